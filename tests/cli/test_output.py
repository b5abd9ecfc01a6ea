"""cli/output.py: the standard output closed by its reader or full. Run as the program is
(a fresh interpreter), with Python's output buffered as a user's is, and unbuffered
(PYTHONUNBUFFERED, as attack43 ran it): the two failed in different places, a write during
the command or the interpreter's flush at exit ("Exception ignored", exit 120)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: api, labels: {{team: {team}}}}}
spec: {{backend: fake}}
"""


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("output")
    for team in ("core", "other"):
        (root / f"{team}.yaml").write_text(CELL.format(team=team))
    proc = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(root / "state"),
                           "apply", "-f", str(root / "core.yaml")],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return root


def _run(root: Path, buffered: bool, stdout: int, *argv: str) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(root / "state"),
                           *argv], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env,
                          check=False)
    return proc.returncode, proc.stderr


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone: every write to it fails (EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("buffered", [True, False])
def test_a_diff_whose_reader_closed_the_pipe_keeps_its_answer(applied: Path,
                                                              buffered: bool) -> None:
    """`diff -f | head` exited 0, "no difference", for files that differ (attack43, F)."""
    write = _closed_pipe()
    try:
        differs = _run(applied, buffered, write, "diff", "-f", str(applied / "other.yaml"))
        same = _run(applied, buffered, write, "diff", "-f", str(applied / "core.yaml"))
        listed = _run(applied, buffered, write, "get", "cells")
    finally:
        os.close(write)
    assert differs == (1, "")
    assert same == (0, "")
    assert listed == (0, "")  # the reader's choice: no error, the command's own code


@pytest.mark.parametrize("buffered", [True, False])
def test_a_full_output_is_said_as_the_outputs_not_the_databases(applied: Path,
                                                                buffered: bool) -> None:
    """`get cells > /dev/full` blamed state.db ("the disk is full", with GiB free), or,
    buffered, ended in "Exception ignored" and exit 120 (attack43, G)."""
    said = "error: cannot write the output: No space left on device\n"
    with open("/dev/full", "w") as full:
        assert _run(applied, buffered, full.fileno(), "get", "cells") == (1, said)
        assert _run(applied, buffered, full.fileno(), "diff", "-f",
                    str(applied / "other.yaml")) == (2, said)  # diff's errors exit 2
