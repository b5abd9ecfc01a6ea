"""Every command on a faulty state directory, as a user runs it: a full disk, a read-only
directory, garbage inside state.db, a truncated state.db. Each command either works or prints
one clear line naming the cause, the path and the fix, and exits 1: never a traceback. Nothing
already recorded is lost, and the cell is left as it was (running, not frozen)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, db_fingerprint
from tests.e2e.test_cli import write
from tests.store import faulty

CAUSES = {
    "full": "the disk is full",
    "read-only": "read-only file system",
    "garbage": "is damaged or is not a DevCell database",
    "truncated": "is damaged or is not a DevCell database",
}
READS = [["get", "cells"], ["get", "operations"], ["describe", "cell", "api"]]
WRITES = [["cell", "sleep", "api"], ["apply", "-f", "{changed}"]]
"""Commands that must record something, so cannot work on any of these faults."""
OTHERS = [["cell", "start", "api"], ["apply", "-f", "{manifests}"]]


def run(state_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    env.pop("DEVCELL_FAKE_FAIL", None)
    return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=timeout, check=False)


@pytest.fixture(params=sorted(CAUSES))
def fault(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(fault, state directory, manifests) with a cell `api` applied and running."""
    name = request.param
    manifests = tmp_path / "m"
    write(manifests, "api")
    on_disk = name in ("full", "read-only")
    disk = tmp_path / "disk"
    with faulty.small_disk(disk, "16m") if on_disk else _nothing(disk):
        state = disk / "state"
        applied = run(state, "apply", "-f", str(manifests))
        assert applied.returncode == 0, applied.stderr
        yield name, state, manifests


class _nothing:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> Path:
        self.path.mkdir()
        return self.path

    def __exit__(self, *exc: object) -> None:
        return None


def _break(name: str, state: Path) -> object:
    """Make the fault happen; returns what mends it (for full and read-only)."""
    db = state / "state.db"
    if name == "full":
        return faulty.fill(state.parent)
    if name == "read-only":
        faulty.remount(state.parent, "ro")
        return None
    faulty.checkpoint(db)
    if name == "garbage":
        for table in ("cells", "operations", "events", "applied_sources", "operation_steps"):
            faulty.damage_table(db, table)
    else:
        os.truncate(db, 3 * 4096)
    return None


def _migrations(state: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute("SELECT * FROM migrations ORDER BY version")]
    finally:
        conn.close()


def _mend(name: str, state: Path, token: object) -> None:
    if name == "full":
        assert isinstance(token, Path)
        token.unlink()
    elif name == "read-only":
        faulty.remount(state.parent, "rw")


def _clear(result: subprocess.CompletedProcess[str], cause: str, state: Path, *,
           must_fail: bool) -> None:
    shown = " ".join(result.args[2:])
    assert "Traceback" not in result.stderr, f"{shown}: {result.stderr}"
    if result.returncode == 0 and not must_fail:
        return
    assert result.returncode == 1, f"{shown}: {result.returncode} {result.stderr}"
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors, f"{shown}: {result.stderr}"
    assert cause in errors[-1] and str(state) in errors[-1], f"{shown}: {errors[-1]}"


def test_every_command_names_the_fault_and_changes_nothing(
        fault: tuple[str, Path, Path], tmp_path: Path) -> None:
    name, state, manifests = fault
    changed = tmp_path / "changed"
    write(changed, "api", team="other")
    before = db_fingerprint(state)
    raw_before = (state / "state.db").read_bytes()
    migrations_before = _migrations(state)
    token = _break(name, state)
    damaged = (state / "state.db").read_bytes()
    try:
        commands = [(c, False) for c in READS + OTHERS] + [(c, True) for c in WRITES]
        for command, must_fail in commands:
            argv = [a.format(changed=changed, manifests=manifests) for a in command]
            _clear(run(state, *argv), CAUSES[name], state, must_fail=must_fail)
        daemon = run(state, "controller", "run", "--manifests", str(manifests), timeout=60)
        _clear(daemon, CAUSES[name], state, must_fail=True)
        if name == "truncated":
            assert (state / "state.db").read_bytes() == damaged  # nothing written into it
        elif name == "garbage":  # what is still readable is still there
            assert _migrations(state) == migrations_before
    finally:
        _mend(name, state, token)
    if name in ("full", "read-only"):
        assert db_fingerprint(state) == before  # nothing recorded was lost or half-written
        cell = json.loads(run(state, "get", "cell", "api", "-o", "json").stdout)
        assert cell["status"]["phase"] == "Running"  # the cell is as it was
    else:
        assert raw_before != damaged


@pytest.mark.parametrize("loss", ["missing", "empty"])
def test_a_lost_database_is_never_taken_for_a_fresh_install(tmp_path: Path, loss: str) -> None:
    """state.db deleted or emptied while the backend still holds the cell's records: every
    command refuses, names the path and the fix, and creates nothing (a fresh database would
    make the daemon's sweep take the cell's workspace for an orphan)."""
    state = tmp_path / "state"
    manifests = tmp_path / "m"
    write(manifests, "api")
    assert run(state, "apply", "-f", str(manifests)).returncode == 0
    for path in state.glob("state.db*"):
        path.unlink()
    if loss == "empty":
        (state / "state.db").write_bytes(b"")
    before = sorted(p.name for p in state.iterdir())
    for argv in (["get", "cells"], ["get", "operations"], ["apply", "-f", str(manifests)],
                 ["cell", "sleep", "api"], ["controller", "run", "--manifests", str(manifests)]):
        result = run(state, *argv)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"{state / 'state.db'} is {loss}" in result.stderr
        assert "Restore state.db from a backup" in result.stderr
        assert sorted(p.name for p in state.iterdir()) == before


@pytest.mark.parametrize("table,column", [("cells", "status"), ("cells", "spec"),
                                          ("operations", "plan")])
def test_a_damaged_json_value_is_named_not_a_traceback(tmp_path: Path, table: str,
                                                       column: str) -> None:
    """One stored JSON value that does not parse (a bad page, a hand edit): every command that
    reads it names the damaged database and the fix, and exits 1; none prints a traceback."""
    state = tmp_path / "state"
    manifests = tmp_path / "m"
    write(manifests, "api")
    assert run(state, "apply", "-f", str(manifests)).returncode == 0
    conn = sqlite3.connect(state / "state.db")
    with conn:
        conn.execute(f"UPDATE {table} SET {column} = '{{bad'")
    conn.close()
    for argv in (["get", "cells", "-o", "yaml"], ["describe", "cell", "api"],
                 ["get", "operations"], ["get", "operations", "-o", "yaml"],
                 ["apply", "-f", str(manifests)], ["gc", "--dry-run"], ["df"],
                 ["get", "snapshots", "-o", "wide"]):
        result = run(state, *argv)
        assert "Traceback" not in result.stderr, f"{argv}: {result.stderr}"
        if result.returncode == 0:
            continue  # this command never reads the damaged value
        assert result.returncode == 1, f"{argv}: {result.stderr}"
        assert "is damaged" in result.stderr and str(state / "state.db") in result.stderr, (
            f"{argv}: {result.stderr}")
    # The daemon either stops with that line or keeps serving, logging it: never a traceback.
    try:
        daemon = run(state, "controller", "run", "--manifests", str(manifests), timeout=8)
        stderr = daemon.stderr
    except subprocess.TimeoutExpired as still_running:
        raw = still_running.stderr or b""
        stderr = raw.decode() if isinstance(raw, bytes) else raw
    assert "Traceback" not in stderr, stderr
