"""Crash recovery, in-process: a "crash" is an exception raised at a named failpoint.

The operation left Running is failed (reason Interrupted) with the step in flight, never
replayed; the next reconcile plans afresh from what the backend observes, adopting what the
dead operation made instead of making it twice.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from devcell import failpoints
from devcell.backends.base import CellRef
from devcell.controllers.context import Context
from devcell.reconciler.converge import converge
from devcell.store import operations, volumes
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    context_for,
    converge_all,
    fake,
    record,
    snapshot_doc,
)


class Crash(BaseException):
    """Stands in for SIGKILL: nothing catches it, nothing after it runs."""


def crash_at(monkeypatch: pytest.MonkeyPatch, point: str) -> Callable[[], None]:
    original = failpoints.hit

    def hit(name: str) -> None:
        if name == point:
            raise Crash(point)

    monkeypatch.setattr(failpoints, "hit", hit)
    return lambda: monkeypatch.setattr(failpoints, "hit", original)


def statuses(op_id: str, db: Database) -> list[tuple[str, str]]:
    return [(s.name, s.status) for s in operations.steps(db.conn, op_id)]


def test_interrupted_create_is_failed_and_its_volume_adopted(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    apply(db, cell_doc("api"))
    cell = record(db, "Cell", "api")
    restore = crash_at(monkeypatch, "step.create-volume.after-call")
    with pytest.raises(Crash):
        converge_all(ctx)
    restore()
    (op,) = operations.for_object(db.conn, cell.id)
    assert op["status"] == "Running"  # as a dead process leaves it
    made = fake(ctx).volumes_of(cell.id)
    assert len(made) == 1 and volumes.for_cell(db.conn, cell.id) is None  # made, not recorded

    with context_for(db) as restarted:  # a new process
        report = converge(restarted, [])
        assert report.recovered == [op["id"]]
        assert report.ok
        failed = operations.get(db.conn, op["id"])
        assert failed is not None
        assert (failed["status"], failed["reason"], failed["current_step"]) == (
            "Failed", "Interrupted", "create-volume")
        assert "not replayed" in failed["message"]
        assert statuses(op["id"], db) == [("create-volume", "Interrupted"),
                                          ("create", "Skipped"), ("start", "Skipped")]
        latest = operations.for_object(db.conn, cell.id)[0]
        assert latest["id"] != op["id"] and latest["status"] == "Succeeded"
        assert [s.name for s in operations.steps(db.conn, latest["id"])] == [
            "adopt-volume", "create", "start"]
        vol = volumes.for_cell(db.conn, cell.id)
        assert vol is not None and vol.id == made[0]
        assert fake(restarted).volumes_of(cell.id) == made  # not made twice
        assert [c for c in fake(restarted).calls() if c[0] == "create_volume"] == [
            ("create_volume", "api", "ok")]
        assert record(db, "Cell", "api").phase == "Running"
        event = db.execute("SELECT reason, type, op_id FROM events WHERE object_id = ? AND "
                           "reason = 'OperationInterrupted'", (cell.id,)).fetchone()
        assert tuple(event) == ("OperationInterrupted", "Warning", op["id"])
        # recovered once: a second converge finds nothing to recover and nothing to do
        again = converge(restarted, [("Cell", cell.id)])
        assert again.recovered == [] and again.operations == []


def test_interrupted_checkpoint_is_adopted_and_the_cell_resumed(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, snapshot_doc("snap", "api"))
    snap, cell = record(db, "Snapshot", "snap"), record(db, "Cell", "api")
    restore = crash_at(monkeypatch, "step.checkpoint.after-call")
    with pytest.raises(Crash):
        converge_all(ctx, [("Snapshot", snap.id)])
    restore()
    ref = CellRef(cell.id, cell.name, cell.spec)
    assert fake(ctx).observe(ref).frozen  # quiesced and never resumed
    assert record(db, "Snapshot", "snap").phase != "Ready"

    with context_for(db) as restarted:
        report = converge(restarted, [])
        assert report.ok and len(report.recovered) == 1
        snap = record(db, "Snapshot", "snap")
        assert snap.phase == "Ready" and snap.extra["consistency"] == "metadata"
        adopted = operations.for_object(db.conn, snap.id)[0]
        assert adopted["action"] == "adopt"
        assert [s.name for s in operations.steps(db.conn, adopted["id"])] == ["adopt-checkpoint"]
        observed = fake(restarted).observe(ref)
        assert observed.running and not observed.frozen
        resumed = operations.for_object(db.conn, cell.id)[0]
        assert resumed["action"] == "resume" and resumed["status"] == "Succeeded"
        assert [c[0] for c in fake(restarted).calls()].count("checkpoint") == 1  # never retaken
        assert converge(restarted, [("Snapshot", snap.id), ("Cell", cell.id)]).operations == []
