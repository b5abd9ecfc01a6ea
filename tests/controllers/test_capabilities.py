"""Plans follow what the backend declares: a backend that keeps memory sleeps by saving the
machine and wakes by restoring it; one that keeps only files (or only records) checkpoints and
cold-boots, and the conditions say what each truly keeps."""

from __future__ import annotations

from typing import Any

import pytest

from devcell import backends
from devcell.backends.base import Capabilities, CellRef, CheckpointInfo, Consistency, Outputs
from devcell.backends.fake import FakeBackend
from devcell.controllers.context import Context
from devcell.errors import ManifestError
from devcell.store import desired, objects
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    fake,
    last_operation,
    record,
    snapshot_doc,
)


class MachineFake(FakeBackend):
    """The fake backend, declaring memory state, as a microVM backend would: save_machine
    stops the cell and keeps a checkpoint of consistency `machine`, which restore_machine
    consumes (the machine runs on from it: the vm backend deletes it)."""

    capabilities = Capabilities(memory_state=True, snapshot_consistency=Consistency.MACHINE)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.machines: set[str] = set()

    def save_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        self.checkpoint(cell, checkpoint_id)
        self.machines.add(checkpoint_id)
        self.stop(cell)
        return CheckpointInfo(ref=f"fake://{checkpoint_id}", consistency=Consistency.MACHINE)

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        found = super().find_checkpoint(checkpoint_id)
        if found is None or checkpoint_id not in self.machines:
            return found
        return CheckpointInfo(ref=found.ref, consistency=Consistency.MACHINE)

    def restore_machine(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        if checkpoint_id not in self.machines:
            raise AssertionError(f"no saved machine {checkpoint_id}")
        self.start(cell)
        self.machines.discard(checkpoint_id)
        self.delete_checkpoint(checkpoint_id)
        return {"restoredFrom": checkpoint_id}


def _with_machine_backend(ctx: Context) -> MachineFake:
    backend = MachineFake(state_dir=ctx.db.state_dir)
    ctx._backends["fake"] = backend
    return backend


def _steps(db: Database, name: str) -> list[str]:
    _, steps = last_operation(db, name)
    return [s.name for s in steps if s.status == "Succeeded"]


def test_sleep_on_a_backend_with_memory_saves_the_machine_and_wake_restores_it(
        db: Database, ctx: Context) -> None:
    backend = _with_machine_backend(ctx)
    apply(db, cell_doc("api"))
    assert converge_all(ctx).ok
    desired.set_cell_state(db, "api", "Sleeping")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["save-machine"]
    cell = record(db, "Cell", "api")
    assert cell.phase == "Sleeping"
    assert cell.status["sleep"]["machine"] is True
    assert cell.status["sleep"]["consistency"] == "machine"
    ready = cell.condition("Ready")
    assert ready is not None and "processes resume where they were" in ready["message"]

    desired.set_cell_state(db, "api", "Running")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["restore-machine"]
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running"
    assert "processes and memory came back" in cell.status["lastStart"]["note"]
    calls = [c[0] for c in backend.calls()]
    assert "create" not in calls[calls.index("stop"):]  # woken, not rebuilt


def test_a_woken_machine_that_died_boots_cold_rather_than_restore_what_the_wake_used(
        db: Database, ctx: Context) -> None:
    """The wake consumed the saved machine; the machine then died (powered off from inside,
    killed, a host reboot): the next converge boots it, never plans a restore of nothing
    (which failed every time, leaving the cell Failed for good)."""
    backend = _with_machine_backend(ctx)
    apply(db, cell_doc("api"))
    assert converge_all(ctx).ok
    desired.set_cell_state(db, "api", "Sleeping")
    assert converge_all(ctx).ok
    desired.set_cell_state(db, "api", "Running")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["restore-machine"]
    cell = record(db, "Cell", "api")
    backend.behind_back(cell.id, state="stopped")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["start"]
    assert record(db, "Cell", "api").phase == "Running"


def test_sleep_without_memory_state_checkpoints_and_says_only_records_are_kept(
        db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    assert converge_all(ctx).ok
    desired.set_cell_state(db, "api", "Sleeping")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["quiesce", "checkpoint", "delete"]
    cell = record(db, "Cell", "api")
    assert "machine" not in cell.status["sleep"]
    ready = cell.condition("Ready")
    assert ready is not None and "control-plane records only" in ready["message"]
    desired.set_cell_state(db, "api", "Running")
    assert converge_all(ctx).ok
    assert _steps(db, "api") == ["create", "start"]
    assert "were not restored" in record(db, "Cell", "api").status["lastStart"]["note"]


class SnapshottingMachineFake(MachineFake):
    """...that also takes snapshots keeping memory, with the cell running on."""

    def snapshot_machine(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        self.checkpoint(cell, checkpoint_id)
        return CheckpointInfo(ref=f"fake://{checkpoint_id}", consistency=Consistency.MACHINE)


def _machine_snapshot(name: str, cell: str) -> dict[str, Any]:
    doc = snapshot_doc(name, cell)
    doc["spec"]["consistency"] = "machine"
    return doc


def test_a_machine_snapshot_is_one_step_the_backend_takes_with_the_cell_running_on(
        db: Database, ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = SnapshottingMachineFake(state_dir=ctx.db.state_dir)
    ctx._backends["fake"] = backend
    monkeypatch.setattr(backends, "capabilities", lambda name: backend.capabilities)
    apply(db, cell_doc("api"))
    assert converge_all(ctx).ok
    apply(db, _machine_snapshot("mem", "api"))
    assert converge_all(ctx).ok
    _, steps = last_operation(db, "mem", kind="Snapshot")
    assert [s.name for s in steps] == ["snapshot-machine"]
    snap = record(db, "Snapshot", "mem")
    assert snap.phase == "Ready" and snap.extra["consistency"] == "machine"
    assert record(db, "Cell", "api").phase == "Running"
    assert "stop" not in [c[0] for c in backend.calls()]


def test_a_machine_snapshot_on_a_backend_without_memory_fails_and_says_why(
        db: Database, ctx: Context) -> None:
    """Refused when applied (the cell's backend is known), and failed by the controller if it
    got past admission (a cell recorded on a backend that lost the capability)."""
    apply(db, cell_doc("api"))
    assert converge_all(ctx).ok
    with pytest.raises(ManifestError) as caught:
        apply(db, _machine_snapshot("mem", "api"))
    problem = caught.value.problems[0]
    assert problem.field == "spec.consistency" and "keeps no memory" in problem.message
    assert objects.get(db.conn, "Snapshot", "mem") is None  # nothing changed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(backends, "capabilities", lambda name: MachineFake.capabilities)
        apply(db, _machine_snapshot("mem", "api"))
    converge_all(ctx)
    snap = record(db, "Snapshot", "mem")
    ready = snap.condition("Ready")
    assert snap.phase == "Failed" and ready is not None
    assert ready["reason"] == "CapabilityMissing" and "no memory" in ready["message"]
    assert not fake(ctx).checkpoint_exists(snap.id)


def test_a_snapshots_consistency_is_immutable(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("files", "api"))
    assert converge_all(ctx).ok
    doc = snapshot_doc("files", "api")
    doc["spec"]["consistency"] = "filesystem"
    with pytest.raises(ManifestError) as caught:
        apply(db, doc)
    assert "consistency is immutable" in caught.value.problems[0].message
