"""The executor: every step of every plan is recorded; failures are recorded, not lost."""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

import pytest

from devcell.backends.fake import Failure, FakeBackend
from devcell.controllers.context import Context
from devcell.controllers.plan import Settled
from devcell.store import desired, operations, volumes
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    fake,
    last_operation,
    op_count,
    plan_of,
    record,
    snapshot_doc,
)


def inject(ctx: Context, *failures: Failure) -> FakeBackend:
    """Give the context a fake backend that fails as told (replacing any open one)."""
    old = ctx._backends.pop("fake", None)
    if old is not None:
        old.close()
    backend = FakeBackend(state_dir=ctx.db.state_dir, failures=list(failures))
    ctx._backends["fake"] = backend
    return backend


def heal(ctx: Context) -> None:
    fake(ctx).failures.clear()


def statuses(steps: list[operations.StepRecord]) -> list[tuple[str, str]]:
    return [(s.name, s.status) for s in steps]


# -- success -----------------------------------------------------------------------------------


def test_each_step_is_recorded_with_status_timings_and_outputs(db: Database,
                                                               ctx: Context) -> None:
    apply(db, cell_doc("api"))
    cell = record(db, "Cell", "api")
    report = converge_all(ctx)
    assert report.ok and len(report.operations) == 1
    op, steps = last_operation(db, "api")
    assert op["id"] == report.operations[0] and op["id"].startswith("op_")
    assert (op["object_kind"], op["object_id"], op["object_name"]) == ("Cell", cell.id, "api")
    assert (op["action"], op["trigger"], op["status"]) == ("create", "test", "Succeeded")
    assert op["generation"] == 1
    assert json.loads(op["plan"]) == ["create-volume", "create", "start"]
    assert op["finished_at"] and op["finished_at"] >= op["created_at"]
    assert op["current_step"] is None and not op["reason"]
    assert statuses(steps) == [("create-volume", "Succeeded"), ("create", "Succeeded"),
                               ("start", "Succeeded")]
    for step in steps:
        assert step.started_at and step.finished_at and step.started_at <= step.finished_at
        assert step.duration_ms is not None and step.duration_ms >= 0
        assert step.error is None
    for earlier, later in zip(steps, steps[1:], strict=False):
        assert earlier.finished_at and later.started_at
        assert earlier.finished_at <= later.started_at
    vol = volumes.for_cell(db.conn, cell.id)
    assert vol is not None
    assert steps[0].outputs == {"volume": vol.id, "restoredFrom": None}
    assert steps[1].outputs == {"runtime": f"fake://{cell.id}"}
    assert steps[2].outputs == {}


def test_checkpoint_outputs_are_recorded(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    snap = record(db, "Snapshot", "snap")
    op, steps = last_operation(db, "snap", kind="Snapshot")
    assert op["action"] == "checkpoint" and op["status"] == "Succeeded"
    assert statuses(steps) == [("quiesce", "Succeeded"), ("checkpoint", "Succeeded"),
                               ("resume", "Succeeded")]
    assert steps[1].outputs == {"checkpoint": f"fake://{snap.id}", "consistency": "metadata",
                                "bytes": 0, "files": 0}


def test_a_step_is_committed_as_running_before_its_backend_call(db: Database, ctx: Context,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    apply(db, cell_doc("api"))
    seen: list[Any] = []
    original = FakeBackend.start

    def spying_start(self: FakeBackend, cell: Any) -> Any:
        # Another connection (as after a crash) sees the in-flight step.
        other = sqlite3.connect(str(db.path))
        try:
            seen.append(other.execute(
                "SELECT o.status, o.current_step, s.name, s.status, s.started_at "
                "FROM operations o JOIN operation_steps s ON s.op_id = o.id "
                "WHERE s.name = 'start'").fetchone())
            seen.append(other.execute(
                "SELECT status FROM operation_steps WHERE name = 'create'").fetchone())
        finally:
            other.close()
        return original(self, cell)

    monkeypatch.setattr(FakeBackend, "start", spying_start)
    assert converge_all(ctx).ok
    (op_status, current, name, step_status, started), (create_status,) = seen
    assert (op_status, current, name, step_status) == ("Running", "start", "start", "Running")
    assert started is not None
    assert create_status == "Succeeded"


def test_a_plan_without_steps_is_still_recorded(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    desired.delete(db, "Snapshot", "snap")
    snap = record(db, "Snapshot", "snap")
    assert plan_of(ctx, "Snapshot", "snap").steps == []
    assert converge_all(ctx, [("Snapshot", snap.id)]).ok
    op, steps = last_operation(db, snap.id, kind="Snapshot")
    assert (op["action"], op["status"]) == ("delete", "Succeeded")
    assert steps == [] and json.loads(op["plan"]) == []
    assert record(db, "Snapshot", snap.id).deleted_at is not None


# -- failure -----------------------------------------------------------------------------------


def test_failed_step_fails_the_operation_and_skips_later_steps(db: Database,
                                                               ctx: Context) -> None:
    inject(ctx, Failure("create", "api", None))
    apply(db, cell_doc("api"))
    cell = record(db, "Cell", "api")
    report = converge_all(ctx)
    assert ("Cell", cell.id) in report.failed
    assert "injected failure" in report.failed[("Cell", cell.id)]
    op, steps = last_operation(db, "api")
    assert op["status"] == "Failed" and op["reason"] == "StepFailed"
    assert op["current_step"] == "create"
    assert op["message"].startswith("step create failed: injected failure")
    assert op["finished_at"]
    assert statuses(steps) == [("create-volume", "Succeeded"), ("create", "Failed"),
                               ("start", "Skipped")]
    failed = steps[1]
    assert failed.error is not None and "injected failure in step create" in failed.error
    assert failed.started_at and failed.finished_at and failed.duration_ms is not None
    skipped = steps[2]
    assert skipped.started_at is None and skipped.finished_at is None
    # the object shows the failure
    cell = record(db, "Cell", "api")
    assert cell.phase == "Failed"
    ready = cell.condition("Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "StepFailed")
    assert "injected failure" in ready["message"]
    assert cell.status["message"] == op["message"]
    assert cell.observed_generation == 0
    event = db.conn.execute("SELECT type, reason FROM events WHERE object_id = ? "
                            "ORDER BY id DESC LIMIT 1", (cell.id,)).fetchone()
    assert tuple(event) == ("Warning", "CreateFailed")
    # what did succeed is recorded: the volume exists and is not made twice
    assert volumes.for_cell(db.conn, cell.id) is not None
    # a failed converge is not retried within the same converge
    assert op_count(db) == 1


def test_later_converge_retries_and_succeeds_once_the_fault_is_gone(db: Database,
                                                                    ctx: Context) -> None:
    inject(ctx, Failure("start", None, None))
    apply(db, cell_doc("api"))
    assert not converge_all(ctx).ok
    assert converge_all(ctx).failed  # still failing: the fault is still there
    assert op_count(db) == 2
    heal(ctx)
    plan = plan_of(ctx, "Cell", "api")
    assert plan.step_names == ["start"]  # only what is still missing
    report = converge_all(ctx)
    assert report.ok
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running" and cell.observed_generation == cell.generation
    ready = cell.condition("Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("True", "Running")
    assert "message" not in cell.status
    op, steps = last_operation(db, "api")
    assert op["status"] == "Succeeded" and statuses(steps) == [("start", "Succeeded")]
    assert decide(ctx, "Cell", "api") == Settled()
    assert db.conn.execute("SELECT count(*) FROM volumes").fetchone()[0] == 1


def test_fault_from_the_environment_with_a_count(db: Database, ctx: Context,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@api:1")
    apply(db, cell_doc("api"), cell_doc("web"))
    report = converge_all(ctx)  # the context opens its backend now, reading the variable
    api, web = record(db, "Cell", "api"), record(db, "Cell", "web")
    assert list(report.failed) == [("Cell", api.id)]
    assert api.phase == "Failed" and web.phase == "Running"
    # the one allowed failure is used up: the same backend now succeeds
    assert converge_all(ctx, [("Cell", api.id)]).ok
    assert record(db, "Cell", "api").phase == "Running"
    api_starts = [c for c in fake(ctx).calls() if c[:2] == ("start", "api")]
    assert api_starts == [("start", "api", "injected-failure"), ("start", "api", "ok")]
    assert [c for c in fake(ctx).calls() if c[:2] == ("start", "web")] == [("start", "web", "ok")]


def test_checkpoint_failure_still_resumes_the_cell(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    inject(ctx, Failure("checkpoint", "api", 1))
    apply(db, snapshot_doc("snap", "api"))
    snap = record(db, "Snapshot", "snap")
    report = converge_all(ctx, [("Snapshot", snap.id)])
    assert ("Snapshot", snap.id) in report.failed
    op, steps = last_operation(db, "snap", kind="Snapshot")
    assert op["status"] == "Failed" and op["current_step"] == "checkpoint"
    assert statuses(steps) == [("quiesce", "Succeeded"), ("checkpoint", "Failed"),
                               ("resume", "Succeeded")]
    assert [m for m, _, _ in fake(ctx).calls()][-3:] == ["quiesce", "checkpoint", "resume"]
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Failed"
    ready = snap.condition("Ready")
    assert ready is not None and (ready["status"], ready["reason"]) == ("False",
                                                                         "CheckpointFailed")
    assert snap.extra["checkpoint_ref"] is None  # nothing half-written is Ready
    assert not fake(ctx).checkpoint_exists(snap.id)
    # the count is spent: the retry takes the snapshot
    assert converge_all(ctx, [("Snapshot", snap.id)]).ok
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Ready" and fake(ctx).checkpoint_exists(snap.id)


def test_quiesce_failure_skips_checkpoint_but_resumes(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    inject(ctx, Failure("quiesce", None, None))
    apply(db, snapshot_doc("snap", "api"))
    converge_all(ctx, [("Snapshot", record(db, "Snapshot", "snap").id)])
    _, steps = last_operation(db, "snap", kind="Snapshot")
    assert statuses(steps) == [("quiesce", "Failed"), ("checkpoint", "Skipped"),
                               ("resume", "Succeeded")]


def test_failed_sleep_runs_its_compensation_and_keeps_the_cell(db: Database,
                                                               ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    inject(ctx, Failure("checkpoint", "api", 1))
    desired.set_cell_state(db, "api", "Sleeping")
    converge_all(ctx)
    op, steps = last_operation(db, "api")
    assert op["action"] == "sleep" and op["status"] == "Failed"
    assert statuses(steps) == [("quiesce", "Succeeded"), ("checkpoint", "Failed"),
                               ("delete", "Skipped"), ("resume", "Succeeded")]
    cell = record(db, "Cell", "api")
    assert cell.phase == "Failed"
    observed = fake(ctx).observe(plan_context_ref(cell))
    assert observed.exists and observed.running  # never deleted without its checkpoint
    assert converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert cell.phase == "Sleeping" and not fake(ctx).observe(plan_context_ref(cell)).exists


def plan_context_ref(cell: Any) -> Any:
    from devcell.backends.base import CellRef

    return CellRef(cell.id, cell.name, cell.spec)


def test_failed_delete_keeps_the_object_and_is_retried(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    inject(ctx, Failure("delete", "api", 1))
    desired.delete(db, "Cell", "api")
    report = converge_all(ctx, [("Cell", cell.id)])
    assert ("Cell", cell.id) in report.failed
    op, steps = last_operation(db, cell.id)
    assert statuses(steps) == [("stop", "Succeeded"), ("delete", "Failed"),
                               ("delete-volume", "Skipped")]
    cell = record(db, "Cell", cell.id)
    assert cell.deleted_at is None and cell.deleting and cell.phase == "Failed"
    assert volumes.for_cell(db.conn, cell.id) is not None
    plan = plan_of(ctx, "Cell", cell.id)
    assert plan.action == "delete" and plan.step_names == ["delete", "delete-volume"]
    assert converge_all(ctx, [("Cell", cell.id)]).ok
    assert record(db, "Cell", cell.id).deleted_at is not None


def test_unexpected_exception_in_a_backend_is_recorded(db: Database, ctx: Context,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: FakeBackend, cell: Any, runtime_hash: str) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(FakeBackend, "create", broken)
    apply(db, cell_doc("api"))
    report = converge_all(ctx)
    assert not report.ok
    op, steps = last_operation(db, "api")
    assert op["status"] == "Failed"
    assert steps[1].status == "Failed" and steps[1].error == "unexpected RuntimeError: boom"
    assert record(db, "Cell", "api").phase == "Failed"


def test_one_failing_object_does_not_stop_the_others(db: Database, ctx: Context) -> None:
    inject(ctx, Failure("create_volume", "bad", None))
    apply(db, cell_doc("bad"), cell_doc("good"), snapshot_doc("snap", "good"),
          cell_doc("fork", fork_of="snap"))
    report = converge_all(ctx)
    assert list(report.failed) == [("Cell", record(db, "Cell", "bad").id)]
    assert [record(db, "Cell", n).phase for n in ("bad", "good", "fork")] == [
        "Failed", "Running", "Running"]


def test_compensation_step_not_needed_is_recorded_as_skipped(db: Database,
                                                             ctx: Context) -> None:
    """Regression: a successful sleep used to leave its when=FAILURE resume step Pending."""
    apply(db, cell_doc("api"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    converge_all(ctx)
    op, steps = last_operation(db, "api")
    assert op["action"] == "sleep" and op["status"] == "Succeeded"
    assert [s.status for s in steps if s.name != "resume"] == ["Succeeded"] * 3
    assert steps[-1].name == "resume"
    assert steps[-1].status == "Skipped"


def test_operations_record_the_generation_they_worked_for(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", image="one"))
    converge_all(ctx)
    apply(db, cell_doc("api", image="two"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    ops = operations.for_object(db.conn, cell.id)
    assert [(o["action"], o["generation"]) for o in ops] == [("update", 2), ("create", 1)]
    assert decide(ctx, "Cell", "api") == Settled()


# -- a graceful shutdown never leaves a cell frozen ------------------------------------------


def _stop_after(ctx: Context, monkeypatch: pytest.MonkeyPatch, method: str) -> threading.Event:
    """Set the context's stopping event right after the fake backend's `method` returns."""
    stopping = threading.Event()
    ctx.stopping = stopping
    backend = fake(ctx)
    real = getattr(backend, method)

    def then_stop(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        stopping.set()
        return out

    monkeypatch.setattr(backend, method, then_stop)
    return stopping


@pytest.mark.parametrize("suspend_on_stop", [True, False])
@pytest.mark.parametrize("method", ["quiesce", "checkpoint"])
def test_a_shutdown_during_a_checkpoint_never_leaves_the_cell_frozen(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch, method: str,
        suspend_on_stop: bool) -> None:
    """quiesce and checkpoint hold the cell still: a shutdown asked during them waits for
    the resume step, whether the daemon suspends its operations or fails them."""
    from devcell.backends.base import CellRef

    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, snapshot_doc("snap", "api"))
    snap, cell = record(db, "Snapshot", "snap"), record(db, "Cell", "api")
    ctx.suspend_on_stop = suspend_on_stop
    _stop_after(ctx, monkeypatch, method)
    converge_all(ctx, [("Snapshot", snap.id)])
    assert not fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec)).frozen
    _, steps = last_operation(db, "snap", kind="Snapshot")
    assert statuses(steps)[-1] == ("resume", "Succeeded")
    assert [m for m, _, _ in fake(ctx).calls()][-3:] == ["quiesce", "checkpoint", "resume"]


@pytest.mark.parametrize("suspend_on_stop", [True, False])
def test_a_shutdown_during_a_sleep_never_leaves_the_cell_frozen(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch,
        suspend_on_stop: bool) -> None:
    """A sleep quiesces, checkpoints, then stops: a shutdown asked after its quiesce lets it
    finish (or at least reach a step that does not hold the cell frozen)."""
    from devcell.backends.base import CellRef

    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, cell_doc("api", "Sleeping"))
    cell = record(db, "Cell", "api")
    ctx.suspend_on_stop = suspend_on_stop
    _stop_after(ctx, monkeypatch, "quiesce")
    converge_all(ctx, [("Cell", cell.id)])
    assert not fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec)).frozen


@pytest.mark.parametrize("kind", ["Cell", "Snapshot"])
def test_a_state_database_that_cannot_record_never_leaves_the_cell_frozen(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The disk fills up right after `quiesce` froze the cell (a sleep or a snapshot): the
    operation cannot be recorded, the error is reported as such, and the plan's compensation
    (`resume`) still runs, so the cell is not left frozen."""
    from contextlib import contextmanager

    from devcell import failpoints
    from devcell.errors import StateUnusable, StorageError

    apply(db, cell_doc("api"))
    converge_all(ctx)
    full = False
    original_hit, original_write = failpoints.hit, db.write

    def hit(name: str) -> None:
        nonlocal full
        full = full or name == "step.quiesce.after-call"
        original_hit(name)

    @contextmanager
    def write() -> Any:
        if full:
            raise StateUnusable("cannot write state.db: the disk is full",
                                cause=StorageError.DISK_FULL, path=str(db.path))
        with original_write() as conn:
            yield conn

    monkeypatch.setattr(failpoints, "hit", hit)
    if kind == "Cell":
        desired.set_cell_state(db, "api", "Sleeping")
        key = ("Cell", record(db, "Cell", "api").id)
    else:
        apply(db, snapshot_doc("snap", "api"))
        key = ("Snapshot", record(db, "Snapshot", "snap").id)
    monkeypatch.setattr(db, "write", write)

    with pytest.raises(StateUnusable):
        converge_all(ctx, [key])

    cell = record(db, "Cell", "api")
    observed = fake(ctx).observe(plan_context_ref(cell))
    assert observed.exists and not observed.frozen  # resumed, although nothing recorded it
    assert [m for m, _, _ in fake(ctx).calls()][-2:] == ["quiesce", "resume"]
