"""What the CLI fuzz test (tests/cli/test_fuzz.py) found beyond issue 31's list, one
regression test each, run in this process as the fuzz test runs the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.inprocess import run as _run

CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: api, labels: {team: core}}
spec: {backend: fake}
"""


@pytest.fixture
def state(tmp_path: Path) -> Path:
    (tmp_path / "cell.yaml").write_text(CELL)
    state = tmp_path / "state"
    for argv in (["apply", "-f", str(tmp_path / "cell.yaml")],
                 ["snapshot", "create", "api", "--name", "snap1"]):
        assert _run(["--state-dir", str(state), *argv], tmp_path)[0] == 0
    return state


def test_a_path_too_long_is_one_line_naming_it(state: Path, tmp_path: Path) -> None:
    """`snapshot export snap1 -o 999...` (a name past NAME_MAX) ended in an OSError
    traceback (ENAMETOOLONG)."""
    code, out, err = _run(["--state-dir", str(state), "snapshot", "export", "snap1", "-o",
                           "9" * 400], tmp_path)
    assert code == 1 and "Traceback" not in err, err
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "File name too long" in err and "9999" in err


def test_ssh_proxy_to_a_cell_that_cannot_run_commands_makes_no_host_key(
        state: Path, tmp_path: Path) -> None:
    """`ssh-proxy api` on a fake cell is refused (no exec capability) but first wrote the
    state directory's SSH host key and known_hosts: a refused command changed the state."""
    code, _, err = _run(["--state-dir", str(state), "ssh-proxy", "api"], tmp_path)
    assert code == 1 and "capability exec" in err, err
    assert not (state / "ssh").exists()


def test_output_goes_to_the_standard_output_of_the_moment(state: Path, tmp_path: Path) -> None:
    """render's printers bound sys.stdout when imported (a default argument), so output went
    to whatever stdout was then, not to the one the command runs with (a library caller's
    redirect_stdout, a second in-process run: ValueError, the buffer detached)."""
    for _ in range(2):
        code, out, err = _run(["--state-dir", str(state), "get", "cells"], tmp_path)
        assert code == 0 and "api" in out, err
        code, out, err = _run(["--state-dir", str(state), "df", "-o", "json"], tmp_path)
        assert code == 0 and out.startswith("{"), err
