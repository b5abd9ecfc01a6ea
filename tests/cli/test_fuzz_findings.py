"""What the CLI fuzz test (tests/cli/test_fuzz.py) found beyond issue 31's list, one
regression test each, run in this process as the fuzz test runs the CLI."""

from __future__ import annotations

import os
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


@pytest.mark.parametrize("verb", [["apply"], ["apply", "--dry-run"], ["diff"]])
def test_a_fifo_named_with_f_and_no_writer_never_blocks(state: Path, tmp_path: Path,
                                                         verb: list[str]) -> None:
    """`apply -f FIFO` (and diff) waited for a writer for ever: a path given on its own is
    opened without blocking, and a FIFO is waited on for a writer for a bounded time
    (loader.FIFO_WAIT_S, none in these runs), then refused saying so (`-f <(cmd)`, a pipe
    with its writer, still reads)."""
    from tests.conftest import db_fingerprint

    fifo = tmp_path / "cell.yaml.fifo"
    os.mkfifo(fifo)
    before = db_fingerprint(state)
    code, _, err = _run(["--state-dir", str(state), *verb, "-f", str(fifo)], tmp_path)
    assert "Traceback" not in err, (code, err)
    # a file without objects (diff's errors exit 2: its 1 says "differs", as kubectl's)
    assert code == (1 if verb[0] == "apply" else 2), (code, err)
    assert err.startswith("error: ") and str(fifo) in err, err
    assert "a FIFO no program opened for writing" in err, err
    assert db_fingerprint(state) == before


def test_a_pipe_with_its_writer_is_still_read(state: Path, tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, CELL.replace("name: api", "name: piped").encode())
    os.close(write)
    try:
        code, out, err = _run(["--state-dir", str(state), "apply", "-f", f"/dev/fd/{read}"],
                              tmp_path)
    finally:
        os.close(read)
    assert code == 0 and "cell/piped created" in out, err


@pytest.mark.parametrize("argv", [
    ["snapshot", "import", "{fifo}"], ["snapshot", "import", "{fifo}", "--name", "x"],
    ["get", "cells", "-o", "jsonpath-file={fifo}"],
    ["get", "cells", "-o", "custom-columns-file={fifo}"]])
def test_other_files_given_never_wait_for_a_fifos_writer(state: Path, tmp_path: Path,
                                                          argv: list[str]) -> None:
    """`snapshot import FIFO` and `get -o jsonpath-file=FIFO` (custom-columns-file too)
    waited for a writer for ever (found trying the fuzz test's FIFOs on every file flag)."""
    from tests.conftest import db_fingerprint

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = db_fingerprint(state)
    code, _, err = _run(["--state-dir", str(state), *[a.format(fifo=fifo) for a in argv]],
                        tmp_path)
    assert code in (0, 1, 2) and "Traceback" not in err, (code, err)  # it was a hang
    assert code == 0 or err.splitlines()[-1].startswith("error: "), (code, err)
    assert db_fingerprint(state) == before


@pytest.mark.parametrize("name", ["Not_A_Name", "/tmp/x", "--for", "", "a\0b"])
def test_wait_refuses_at_once_a_name_that_can_never_be_recorded(state: Path, tmp_path: Path,
                                                                 name: str) -> None:
    """`wait cells Not_A_Name` (or `wait -- cells x --for ...`, whose words after -- are
    names) waited its whole --timeout for an object no manifest can ever create."""
    code, _, err = _run(["--state-dir", str(state), "wait", "--timeout", "60s", "--", "cells",
                         name], tmp_path)
    assert code == 2 and err.splitlines()[-1].startswith("error: "), (code, err)
    assert "never" in err and "Traceback" not in err


@pytest.mark.parametrize("verb", [["logs", "api"], ["exec", "api", "--", "true"],
                                  ["port-forward", "api", "8000"]])
def test_a_verb_that_needs_a_runtime_refuses_a_fake_cell_before_observing_it(
        state: Path, tmp_path: Path, verb: list[str]) -> None:
    """`logs api` on a fake cell was refused only after the cell was observed and the
    observation recorded (observed.json rewritten): a refused command changed the state."""
    before = {p.name: p.read_bytes() for p in state.iterdir() if p.is_file()}
    code, _, err = _run(["--state-dir", str(state), *verb], tmp_path)
    assert code == 1 and "capability exec" in err and len(err.splitlines()) == 1, err
    assert {p.name: p.read_bytes() for p in state.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("argv", [["exec", "api", "--", "true"], ["snapshot", "list", "api"],
                                  ["cell", "start", "api"], ["ssh-config"],
                                  ["op", "cancel", "op_x"], ["delete", "cell", "api"]])
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_command_on_recorded_objects_makes_no_state_where_nothing_was_applied(
        tmp_path: Path, argv: list[str], kind: str) -> None:
    """Each of these opened (and so created) a state database before finding that nothing
    it names exists: a refused command left a new state directory changed."""
    state = tmp_path / "state"
    if kind == "empty":
        state.mkdir(mode=0o700)
    code, _, err = _run(["--state-dir", str(state), *argv], tmp_path)
    assert code == 1 and "nothing has been applied there yet" in err, err
    assert len(err.splitlines()) == 1, err
    assert (sorted(os.listdir(state)) if kind == "empty" else state.exists()) in ([], False)


def test_gc_where_nothing_was_applied_collects_nothing_and_makes_nothing(tmp_path: Path
                                                                        ) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    code, _, err = _run(["--state-dir", str(state), "gc", "--dry-run"], tmp_path)
    assert code == 0, err
    assert os.listdir(state) == []


def test_a_usage_error_is_said_before_the_state_where_nothing_was_applied(tmp_path: Path
                                                                         ) -> None:
    code, _, err = _run(["--state-dir", str(tmp_path / "state"), "exec", "api"], tmp_path)
    assert code == 2 and "after --" in err, err
    assert not (tmp_path / "state").exists()
