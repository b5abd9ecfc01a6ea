"""Snapshot controller decisions: wait for the cell, take the checkpoint once, delete cleanly."""

from __future__ import annotations

import pytest

from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Settled, Wait, When
from devcell.controllers.snapshot import SnapshotController
from devcell.errors import Conflict
from devcell.store import desired, volumes
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    fake,
    op_count,
    plan_of,
    record,
    snapshot_doc,
)


def test_snapshot_of_a_running_cell_plans_quiesce_checkpoint_resume(db: Database,
                                                                    ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, snapshot_doc("snap", "api"))
    plan = plan_of(ctx, "Snapshot", "snap")
    assert plan.action == "checkpoint"
    assert plan.step_names == ["quiesce", "checkpoint", "resume"]
    assert [s.when for s in plan.steps] == [When.SUCCESS, When.SUCCESS, When.ALWAYS]
    cell = record(db, "Cell", "api")
    ref = plan.work.ref
    vol = volumes.for_cell(db.conn, cell.id)
    assert vol is not None
    assert (ref.id, ref.name, ref.volume_id) == (cell.id, "api", vol.id)


def test_snapshot_waits_for_a_cell_that_is_not_yet_running(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    # the cell has not been reconciled yet: it is Pending
    decision = decide(ctx, "Snapshot", "snap")
    assert isinstance(decision, Wait)
    assert decision.reason == "WaitingForCell"
    assert '"api"' in decision.message and "Pending" in decision.message
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Pending"
    ready = snap.condition("Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False", "WaitingForCell")
    assert fake(ctx).calls() == []


@pytest.mark.parametrize("state", ["Stopped", "Sleeping"])
def test_snapshot_of_a_cell_that_is_not_running_keeps_waiting(db: Database, ctx: Context,
                                                              state: str) -> None:
    apply(db, cell_doc("api", state), snapshot_doc("snap", "api"))
    report = converge_all(ctx)
    snap = record(db, "Snapshot", "snap")
    assert report.waiting.get(("Snapshot", snap.id), "").startswith('cell "api" is ' + state)
    assert isinstance(decide(ctx, "Snapshot", "snap"), Wait)
    assert snap.extra["checkpoint_ref"] is None
    assert not any(m == "checkpoint" for m, _, _ in fake(ctx).calls())


def test_snapshot_waits_while_its_cell_is_being_updated(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", image="one"))
    converge_all(ctx)
    apply(db, cell_doc("api", image="two"), snapshot_doc("snap", "api"))
    # generation 2 not yet observed: the cell is Running, but not the Running we asked for
    assert isinstance(decide(ctx, "Snapshot", "snap"), Wait)


def test_taken_snapshot_is_settled_ready_and_metadata_only(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    assert converge_all(ctx).ok
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Ready"
    assert snap.observed_generation == snap.generation
    assert snap.extra["consistency"] == "metadata"
    assert snap.extra["checkpoint_ref"] == f"fake://{snap.id}"
    assert snap.extra["taken_at"]
    assert snap.status["checkpoint"]["consistency"] == "metadata"
    ready = snap.condition("Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "Taken")
    assert decide(ctx, "Snapshot", "snap") == Settled()
    assert fake(ctx).checkpoint_exists(snap.id)


def test_snapshot_is_taken_once_and_never_retaken(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", image="one"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    checkpoints = [c for c in fake(ctx).calls() if c[0] == "checkpoint"]
    assert len(checkpoints) == 1
    apply(db, cell_doc("api", image="two"))
    converge_all(ctx)
    assert isinstance(decide(ctx, "Snapshot", "snap"), Settled)
    assert [c for c in fake(ctx).calls() if c[0] == "checkpoint"] == checkpoints


def test_snapshot_whose_cell_was_deleted_first_fails_terminally(db: Database,
                                                                ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    desired.delete(db, "Cell", "api")
    converge_all(ctx, [("Cell", record(db, "Cell", "api").id)])
    decision = decide(ctx, "Snapshot", "snap")
    assert isinstance(decision, Blocked) and decision.message
    assert "deleted before the snapshot was taken" in decision.message
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Failed"
    ready = snap.condition("Ready")
    assert ready is not None and ready["reason"] == "CellGone"


def test_snapshot_of_a_deleting_cell_waits(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, snapshot_doc("snap", "api"))
    desired.delete(db, "Cell", "api")
    assert isinstance(decide(ctx, "Snapshot", "snap"), Wait)


def test_deleting_a_taken_snapshot_deletes_its_checkpoint(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    snap = record(db, "Snapshot", "snap")
    desired.delete(db, "Snapshot", "snap")
    plan = plan_of(ctx, "Snapshot", "snap")
    assert plan.action == "delete" and plan.step_names == ["delete-checkpoint"]
    assert converge_all(ctx, [("Snapshot", snap.id)]).ok
    gone = record(db, "Snapshot", snap.id)
    assert gone.deleted_at is not None and gone.phase == "Deleted"
    assert not fake(ctx).checkpoint_exists(snap.id)
    assert SnapshotController().decide(ctx, snap.id) == Settled()
    # the cell is untouched
    assert record(db, "Cell", "api").phase == "Running"


def test_deleting_an_untaken_snapshot_needs_no_backend_step(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    desired.delete(db, "Snapshot", "snap")
    plan = plan_of(ctx, "Snapshot", "snap")
    assert plan.steps == []


def test_snapshot_named_by_a_live_fork_cannot_be_deleted(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"), cell_doc("exp", fork_of="snap"))
    converge_all(ctx)
    ops = op_count(db)
    with pytest.raises(Conflict, match="exp"):
        desired.delete(db, "Snapshot", "snap")
    assert not record(db, "Snapshot", "snap").deleting
    assert isinstance(decide(ctx, "Snapshot", "snap"), Settled)
    assert op_count(db) == ops


def test_snapshot_of_a_cell_on_an_unavailable_backend_fails_clearly(db: Database,
                                                                    ctx: Context,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    ) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")  # no engine: unavailable
    apply(db, {**cell_doc("box"), "spec": {"backend": "container", "image": "busybox"}},
          snapshot_doc("snap", "box"))
    decision = decide(ctx, "Snapshot", "snap")
    assert isinstance(decision, Blocked) and decision.message
    assert "container" in decision.message
    snap = record(db, "Snapshot", "snap")
    ready = snap.condition("Ready")
    assert ready is not None and ready["reason"] == "BackendUnavailable"
    assert op_count(db) == 0
