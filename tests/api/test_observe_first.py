"""Observe before acting: every command that acts on a cell's runtime asks the backend first,
and a runtime changed behind DevCell's back (stopped, paused, removed) is never answered
"unchanged" (issue 10, item 7). The fake backend's world is changed behind DevCell's back with
`FakeBackend.behind_back`, as `docker stop`, `docker pause` or `docker rm` would."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import cells
from devcell.backends import fake
from devcell.store import objects, observations
from devcell.store.db import open_database
from tests.conftest import Cli
from tests.controllers.support import cell_doc, snapshot_doc

Tamper = Callable[[fake.FakeBackend, str], None]
BEHIND_BACK: dict[str, Tamper] = {
    "stopped": lambda b, cid: b.behind_back(cid, state="exited"),
    "paused": lambda b, cid: b.behind_back(cid, frozen=True),
    "removed": lambda b, cid: b.behind_back(cid, gone=True),
}


@pytest.fixture
def applied(state: Path, write: Any) -> str:
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    return path


def cell(state: Path, name: str = "api") -> objects.ObjectRecord:
    db = open_database(state)
    try:
        return objects.require(db.conn, "Cell", name)
    finally:
        db.close()


def tamper(state: Path, how: str, name: str = "api") -> None:
    backend = fake.FakeBackend(state_dir=state)
    try:
        BEHIND_BACK[how](backend, cell(state, name).id)
    finally:
        backend.close()


def runtime(state: Path, name: str = "api") -> tuple[str, int] | None:
    conn = sqlite3.connect(state / "backends" / "fake.db")
    try:
        row = conn.execute("SELECT state, frozen FROM cells WHERE id = ?",
                           (cell(state, name).id,)).fetchone()
        return None if row is None else (row[0], row[1])
    finally:
        conn.close()


def test_observe_all_reads_the_fake_world_in_one_call(state: Path, applied: str) -> None:
    seen = fake.observe_all(state)
    assert list(seen) == [cell(state).id] and seen[cell(state).id].running
    tamper(state, "paused")
    assert fake.observe_all(state)[cell(state).id].frozen


@pytest.mark.parametrize("how", sorted(BEHIND_BACK))
def test_reapply_of_an_unchanged_cell_repairs_its_runtime(state: Path, applied: str,
                                                          how: str) -> None:
    tamper(state, how)
    report = api.apply(state, [applied])
    assert [(c.name, c.outcome) for c in report.recorded.changes] == [("api", "repaired")]
    assert report.ok
    assert runtime(state) == ("running", 0)
    assert cell(state).phase == "Running"
    db = open_database(state)
    try:
        reasons = [r["reason"] for r in db.conn.execute("SELECT reason FROM events")]
    finally:
        db.close()
    assert "RuntimeDrifted" in reasons


def test_reapply_that_agrees_writes_nothing_and_records_the_confirmation(
        state: Path, applied: str, fingerprint: Callable[[Path], str | None]) -> None:
    before = fingerprint(state)
    assert [c.outcome for c in api.apply(state, [applied]).recorded.changes] == ["unchanged"]
    assert fingerprint(state) == before
    assert cell(state).id in observations.load(state)


@pytest.mark.parametrize("how", sorted(BEHIND_BACK))
def test_cell_start_repairs_a_runtime_changed_behind_its_back(state: Path, applied: str,
                                                              how: str) -> None:
    tamper(state, how)
    report = cells.start(state, "api")
    assert [c.outcome for c in report.recorded.changes] == ["repaired"] and report.ok
    assert runtime(state) == ("running", 0)


def test_snapshot_create_repairs_its_cell_first(state: Path, applied: str) -> None:
    tamper(state, "stopped")
    report = cells.snapshot(state, "api", name="snap")
    assert report.ok, report.converged.problems
    assert runtime(state) == ("running", 0)
    assert cell(state).phase == "Running"


def test_engine_unreachable_is_reported_not_unchanged(
        state: Path, applied: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from devcell import backends
    from devcell.errors import BackendUnavailable

    def down(name: str, state_dir: Path) -> dict[str, Any]:
        raise BackendUnavailable("the engine is down")

    monkeypatch.setattr(backends, "observe_all", down)
    report = api.apply(state, [applied])
    # The inline reconcile asks the (working) fake itself: the cell is confirmed, not skipped.
    assert report.converged.objects, "the cell was not looked at"


def _doc(cli: Cli, name: str = "api") -> dict[str, Any]:
    out = cli("get", "cell", name, "-o", "json")
    assert out.returncode == 0, out.stderr
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_read_side_commands_record_what_they_observe(cli: Cli, state: Path, applied: str
                                                     ) -> None:
    """`wait` here; `exec` and `logs` on a container cell: tests/backends/container/
    test_exec_drift.py (the fake runs no command, so they refuse a fake cell unobserved)."""
    tamper(state, "stopped")
    out = cli("wait", "cell", "api", "--for=condition=Ready", "--timeout", "1s")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    for verb in (["exec", "api", "--", "true"], ["logs", "api"]):
        refused = cli(*verb)
        assert refused.returncode == 1 and "capability exec" in refused.stderr
    status = _doc(cli)["status"]
    assert status["phase"] == "Pending"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RuntimeDrifted")
    # ... and `cell start`, which exec's message suggests, now does something.
    started = cli("cell", "start", "api")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "cell/api repaired"  # what it did, not "unchanged"
    assert runtime(state) == ("running", 0)
    assert _doc(cli)["status"]["phase"] == "Running"


def test_get_shows_when_a_phase_was_last_confirmed(cli: Cli, state: Path, applied: str) -> None:
    rows = cli("get", "cells").stdout.splitlines()
    assert rows[0].split()[:6] == ["NAME", "BACKEND", "DESIRED", "PHASE", "OBSERVED",
                                   "FORKED-FROM"]
    assert rows[1].split()[4].endswith("s")  # confirmed by the apply's reconcile
    (state / observations.FILENAME).unlink()
    assert cli("get", "cells").stdout.splitlines()[1].split()[4] == "<none>"
    assert "Observed:" in cli("describe", "cell", "api").stdout


def test_a_freeze_by_an_operation_in_flight_is_not_drift(state: Path, write: Any) -> None:
    """A snapshot freezes its cell between quiesce and resume: a `wait` or `get` observing in
    that window must not record the cell as drifted (nothing would repair it: CI saw a wait
    time out on it). A Running operation only protects while someone holds the reconcile
    lock or a daemon runs; one left by a dead process protects nothing."""
    from devcell.reconciler import lease, observe, reconcile_lock
    from devcell.store import operations

    path = write("api.yaml", cell_doc("api"), snapshot_doc("api-snap", "api"))
    assert api.apply(state, [path]).ok
    db = open_database(state)
    try:
        snap = objects.require(db.conn, "Snapshot", "api-snap")
        with db.write() as conn:
            operations.create(conn, op_id=operations.new_operation_id(), object_kind="Snapshot",
                              object_id=snap.id, object_name=snap.name, action="create",
                              trigger="test", generation=1, step_names=["quiesce", "resume"])
        tamper(state, "paused")
        with reconcile_lock.holding(state):
            assert observe.observe_and_record(db, [cell(state).id]).drifted == {}
        with lease.Lease(state):  # a daemon's workers run under its lease, not the lock
            assert observe.observe_and_record(db, [cell(state).id]).drifted == {}
        assert cell(state).phase == "Running"
        found = observe.observe_and_record(db, [cell(state).id])  # the lock is free: stale
        assert found.drifted[cell(state).id].seen == "is paused (frozen)"
        assert cell(state).phase == "Pending"
    finally:
        db.close()
