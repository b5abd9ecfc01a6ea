"""`devcell import devcontainer` on hostile inputs (issue 31, item 8): a FIFO never blocks, a
bad -o is one line and leaves nothing behind, values made from runArgs and lifecycle commands
are blamed on devcontainer.json's line and field, and a huge hex number is one clear line."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from devcell.errors import ManifestError
from tests.api.test_devcontainer import _convert, _sample
from tests.conftest import Cli

SIMPLE = '{"name": "x", "image": "devcell/busybox:latest"}\n'


def _refused(tmp_path: Path, text: str) -> list[str]:
    path = _sample(tmp_path, textwrap.dedent(text))
    with pytest.raises(ManifestError) as refused:
        _convert(path, tmp_path, tmp_path / "state")
    return [str(p).removeprefix(str(path)) for p in refused.value.problems]


def test_a_fifo_is_refused_at_once(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "devcontainer.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = cli("import", "devcontainer", str(fifo), timeout=30)  # it blocked for ever
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "not a regular file" in done.stderr and "a FIFO" in done.stderr, done.stderr


@pytest.mark.parametrize("output, said", [
    ("outd", "is a directory"),
    ("missing/dir/f", "no such directory"),
    ("", "an empty file name"),
])
def test_a_bad_output_is_one_line_and_leaves_nothing(cli: Cli, tmp_path: Path, output: str,
                                                     said: str) -> None:
    project = tmp_path / "p"
    _sample(project, SIMPLE, name="devcontainer.json")
    (project / "outd").mkdir()
    before = sorted(p.name for p in project.iterdir())
    done = cli("import", "devcontainer", "devcontainer.json", "-o", output, cwd=project,
               timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and said in errors[0] and "-o" in errors[0], done.stderr
    assert sorted(p.name for p in project.iterdir()) == before
    assert done.stdout == ""


@pytest.mark.parametrize("body, line, field", [
    ('"runArgs": ["--init",\n "--cpus", "-3"]', 4, "runArgs[1]"),
    ('"runArgs": ["--cpus=nan"]', 3, "runArgs[0]"),
    ('"runArgs": ["--memory", "0"]', 3, "runArgs[0]"),
    ('"onCreateCommand": "a\\u0000b"', 3, "onCreateCommand"),
    ('"updateContentCommand": ["a\\u0000b"]', 3, "updateContentCommand"),
    ('"postCreateCommand": "true",\n "onCreateCommand": {"x": "a\\u0000b"}', 4,
     "onCreateCommand"),
])
def test_values_made_from_run_args_and_lifecycle_commands_blame_devcontainer_json(
        tmp_path: Path, body: str, line: int, field: str) -> None:
    shown = _refused(tmp_path, '{"name": "x",\n "image": "devcell/busybox:latest",\n'
                     + body + "\n}\n")
    assert len(shown) == 1 and shown[0].startswith(f":{line}: {field}: "), shown
    assert "<stdout>" not in shown[0] and "cell.yaml" not in shown[0]


@pytest.mark.parametrize("where", ['"forwardPorts": [0x{}]', '"containerEnv": {{"A": 0x{}}}',
                                   '"other": 0x{}'])
def test_a_5000_digit_hex_number_is_one_clear_line(tmp_path: Path, where: str) -> None:
    shown = _refused(tmp_path, '{"name": "x",\n "image": "devcell/busybox:latest",\n'
                     + where.format("f" * 5000) + "\n}\n")
    assert len(shown) == 1 and shown[0].startswith(":3: ") and "too large" in shown[0], shown
    assert len(shown[0]) < 300
