"""The Snapshot controller: take a checkpoint of a cell once, with its services quiesced.

A snapshot is an immutable moment: it is taken once and never retaken. Until its cell is
Running it waits; a failed attempt resumes the cell's services and is retried, and nothing
half-written is ever marked Ready.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from devcell import names
from devcell.backends.base import Backend, CellRef, Consistency, MachineSnapshots, Outputs
from devcell.controllers import retention
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Decision, Plan, Settled, Step, Wait, When
from devcell.controllers.steps import StepName
from devcell.errors import BackendError, BackendUnavailable, CapabilityMissing, PermanentError
from devcell.records import MutableRecord
from devcell.store import events, frozen, objects, restores, volumes
from devcell.store.clock import now
from devcell.store.objects import Phase

KIND = "Snapshot"
S = StepName


class CellGone(PermanentError):
    """The snapshot's cell was deleted before the snapshot was taken: it never can be."""


class SnapshotController:
    kind = KIND

    def decide(self, ctx: Context, object_id: str) -> Decision:
        conn = ctx.db.conn
        snap = objects.get(conn, KIND, object_id)
        if snap is None:
            return Settled()
        cell = source_cell(conn, snap)
        taken = snap.extra.get("checkpoint_ref") is not None
        backend_name = backend_of(snap, cell)
        if snap.deleting:
            restoring = restores.restoring_to(conn, snap.id)
            if restoring:  # the restore reads the checkpoint: it finishes (or is cancelled) first
                message = ("waits until the restore of "
                           f"{', '.join(names.printable(n) for n in restoring)} to it is done")
                self._write(ctx, snap, snap.phase, "False", "WaitingForRestore", message)
                return Wait("WaitingForRestore", message)
            forks = objects.forks_of(conn, snap.id)
            if forks:  # deleted in the same request: they go first, the checkpoint after
                message = (f"waits until the cells forked from it are gone: {', '.join(forks)}")
                self._write(ctx, snap, snap.phase, "False", "WaitingForForks", message)
                return Wait("WaitingForForks", message)
            # What the backend holds, not only what was recorded: a checkpoint taken by an
            # operation that died before recording it is this snapshot's bytes too.
            held = taken or self._held(ctx, backend_name, snap.id)
            steps = [Step(S.DELETE_CHECKPOINT)] if held else []
            return Plan(snap, "delete", steps, backend_name, SnapshotWork())
        now = ctx.clock()
        expiry = retention.judge(conn, snap, now)
        deferred = False
        if expiry is not None:
            depending = retention.forks(conn, snap)
            if not depending:
                return Plan(snap, "expire", [Step(S.EXPIRE, {"snapshot_id": snap.id})],
                            backend_name, SnapshotWork())
            deferred = True  # a fork's progress wakes it (the registry's wakes)
            with ctx.db.write() as wconn:
                retention.note_deferred(wconn, snap, expiry, depending)
        elif snap.condition("Expired") is not None:
            with ctx.db.write() as wconn:
                retention.clear_deferred(wconn, snap)
            snap = objects.get(conn, KIND, snap.id) or snap
        if taken:
            self._settle(ctx, snap)
            due = retention.expires_at(snap)
            if due is None or deferred:
                return Settled()
            return Settled(requeue_after=max((due - now).total_seconds(), 0.001))
        if cell is not None:
            try:
                found = ctx.backend(backend_name).find_checkpoint(snap.id)
            except BackendUnavailable:
                found = None
            if found is not None:
                # Taken by an operation that died before recording it: adopt, don't retake.
                return Plan(snap, "adopt", [Step(S.ADOPT_CHECKPOINT)], backend_name,
                            SnapshotWork(cell=cell))
        if cell is None or cell.deleted_at is not None:
            message = f'cell "{snap.spec["cell"]}" was deleted before the snapshot was taken'
            self._write(ctx, snap, Phase.FAILED, "False", "CellGone", message)
            return Blocked(CellGone(message))
        try:
            backend = ctx.backend(backend_name)
        except BackendUnavailable as exc:
            self._write(ctx, snap, Phase.PENDING, "False", "BackendUnavailable", str(exc))
            return Blocked(exc)
        wanted = snap.spec.get("consistency")
        missing = _cannot_keep(backend, backend_name, wanted)
        if missing is not None:
            self._write(ctx, snap, Phase.FAILED, "False", "CapabilityMissing", missing)
            return Blocked(CapabilityMissing(missing))
        cell_ready = (
            cell.phase == Phase.RUNNING
            and not cell.deleting
            and cell.observed_generation == cell.generation
        )
        if not cell_ready:
            message = f'cell "{cell.name}" is {cell.phase}; the snapshot waits until it is Running'
            self._write(ctx, snap, Phase.PENDING, "False", "WaitingForCell", message)
            return Wait("WaitingForCell", message)
        volume = volumes.for_cell(conn, cell.id)
        ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
        if wanted == Consistency.MACHINE:
            # Disk and memory at one paused moment; the backend lets the cell run on after.
            steps = [Step(S.SNAPSHOT_MACHINE, hold=True)]
        else:
            steps = [Step(S.QUIESCE, hold=True), Step(S.CHECKPOINT, hold=True),
                     Step(S.RESUME, when=When.ALWAYS)]
        return Plan(snap, "checkpoint", steps, backend_name, SnapshotWork(ref=ref, cell=cell))

    @staticmethod
    def _held(ctx: Context, backend_name: str, snapshot_id: str) -> bool:
        """Whether the backend holds a checkpoint for this snapshot (unreachable: assume so,
        the delete step then fails and is retried rather than leaking the bytes)."""
        try:
            return ctx.backend(backend_name).checkpoint_exists(snapshot_id)
        except BackendError:
            return True

    def _settle(self, ctx: Context, snap: objects.ObjectRecord) -> None:
        if snap.phase == Phase.READY and snap.observed_generation == snap.generation:
            return
        self._write(ctx, snap, Phase.READY, "True", "Taken", "checkpoint taken")

    def _write(self, ctx: Context, snap: objects.ObjectRecord, phase: str, ready: str,
               reason: str, message: str) -> None:
        status = dict(snap.status)
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", ready, reason, message)
        if phase == snap.phase and status == snap.status and (
                ready == "False" or snap.observed_generation == snap.generation):
            return  # (a new generation, a ttl changed, is observed even when nothing else is)
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, snap.id)
            if fresh is None:
                return
            objects.write_status(conn, fresh, phase=phase, status=status,
                                 observed_generation=fresh.generation)
            if ready == "False":
                events.record(conn, kind=KIND, object_id=snap.id, name=snap.name, reason=reason,
                              message=message, type="Warning" if phase == Phase.FAILED else "Normal")

    def run_step(self, ctx: Context, plan: Plan, step: Step) -> Outputs:
        if step.name == S.EXPIRE:  # a record only: the clock it was judged by goes with it
            return {**step.args, "at": retention.stamp(ctx.clock())}
        handler = _STEPS.get(step.name)
        if handler is None:
            raise BackendError(f"snapshot controller has no step {step.name!r}")
        work = _work(plan)
        ref = work.ref.replace(op_id=ctx.current_op) if work.ref else None
        return handler(ctx.backend(plan.backend), plan.object.id, ref)

    def after_step(self, conn: sqlite3.Connection, plan: Plan, step: Step, outputs: Outputs
                   ) -> None:
        if step.name == S.EXPIRE:
            retention.expire(conn, str(outputs["snapshot_id"]),
                             retention.parse_time(str(outputs["at"])))
        work = _work(plan)
        if step.name == S.QUIESCE and work.ref is not None:
            frozen.mark(conn, work.ref.id)
        elif step.name == S.RESUME and work.ref is not None:
            frozen.clear(conn, work.ref.id)
        self.note_outputs(plan, step, outputs)

    def note_outputs(self, plan: Plan, step: Step, outputs: Outputs) -> None:
        if step.name in (S.CHECKPOINT, S.ADOPT_CHECKPOINT, S.SNAPSHOT_MACHINE):
            _work(plan).taken = outputs

    def rebuild_plan(self, ctx: Context, data: dict[str, Any]) -> Plan | None:
        snap = objects.get(ctx.db.conn, KIND, data["objectId"])
        if snap is None:
            return None
        cell = source_cell(ctx.db.conn, snap)
        work = SnapshotWork()
        if cell is not None:
            volume = volumes.for_cell(ctx.db.conn, cell.id)
            work = SnapshotWork(
                ref=CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None),
                cell=cell)
        steps = [Step.from_dict(s) for s in data["steps"]]
        return Plan(snap, data["action"], steps, data["backend"], work)

    def finish(self, conn: sqlite3.Connection, plan: Plan, *, error: str | None,
               reason: str = "StepFailed") -> None:
        fresh = objects.get(conn, KIND, plan.object.id, include_deleted=True)
        if fresh is None:
            return
        if plan.action == "expire":
            return  # the expire step asked for its deletion (or kept it, and said why)
        if plan.action == "delete":
            if error is None and fresh.status.get("expired"):
                objects.mark_deleted(conn, fresh, Phase.EXPIRED)
                events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                              reason="ExpiredDeleted", message="expired: snapshot and its "
                              "checkpoint deleted")
            elif error is None:
                objects.mark_deleted(conn, fresh)
                events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                              reason="Deleted", message="snapshot and its checkpoint deleted")
            return
        status = dict(fresh.status)
        taken = _work(plan).taken
        if error is not None or taken is None:
            message = error or "checkpoint produced no result"
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False",
                "CheckpointFailed" if reason == "StepFailed" else reason, message)
            status["failedGeneration"] = plan.object.generation
            objects.write_status(conn, fresh, phase=Phase.FAILED, status=status,
                                 observed_generation=fresh.observed_generation)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                          reason="CheckpointFailed", message=message, type="Warning")
            return
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "True", "Taken", "checkpoint taken")
        status["checkpoint"] = dict(taken)
        for key in ("nextRetryAt", "retries", "failedGeneration"):
            status.pop(key, None)
        objects.write_status(
            conn, fresh, phase=Phase.READY, status=status, observed_generation=fresh.generation,
            extra={"checkpoint_ref": taken["checkpoint"], "consistency": taken["consistency"],
                   "taken_at": now()},
        )
        events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name, reason="Taken",
                      message=f"checkpoint of cell {_cell_name(plan)} taken "
                              f"(consistency {taken['consistency']})")


IMPORTED = "imported"
"""status.origin.kind of a snapshot brought in by `snapshot import` (it has no cell here)."""


def source_cell(conn: sqlite3.Connection, snap: objects.ObjectRecord
                ) -> objects.ObjectRecord | None:
    """The cell the snapshot was taken of (even deleted); None for an imported snapshot."""
    cell_id = snap.extra.get("cell_id")
    return objects.get(conn, "Cell", cell_id, include_deleted=True) if cell_id else None


def backend_of(snap: objects.ObjectRecord, cell: objects.ObjectRecord | None) -> str:
    """The backend holding the snapshot's checkpoint: its cell's, or for an imported snapshot
    the one its import recorded."""
    if cell is not None:
        return str(cell.extra["backend"])
    return str(snap.status.get("origin", {}).get("backend") or "fake")


class SnapshotWork(MutableRecord):
    """What a snapshot's plan carries between its steps and finish()."""

    ref: CellRef | None = None
    cell: objects.ObjectRecord | None = None
    taken: Outputs | None = None
    """The checkpoint step's outputs, once it ran."""


def _work(plan: Plan) -> SnapshotWork:
    assert isinstance(plan.work, SnapshotWork), plan.work
    return plan.work


def _cell_name(plan: Plan) -> str:
    cell = _work(plan).cell
    return cell.name if cell is not None else str(plan.object.spec.get("cell"))


def _cell(ref: CellRef | None) -> CellRef:
    if ref is None:
        raise BackendError("this step needs the snapshot's cell, which is gone")
    return ref


_LEVELS = (Consistency.METADATA, Consistency.FILESYSTEM, Consistency.MACHINE)


def _cannot_keep(backend: Backend, backend_name: str, wanted: str | None) -> str | None:
    """Why the backend cannot keep what spec.consistency asks for (None: it can)."""
    if wanted is None:
        return None
    caps = backend.capabilities
    can = (caps.memory_state and isinstance(backend, MachineSnapshots)
           if wanted == Consistency.MACHINE
           else _LEVELS.index(caps.snapshot_consistency) >= _LEVELS.index(Consistency(wanted)))
    if can:
        return None
    return (f'backend "{backend_name}" cannot keep a snapshot with consistency {wanted} '
            f"(it keeps {caps.snapshot_consistency}"
            f"{'' if caps.memory_state else ', no memory'}); ask for less, or use a cell "
            f"on a backend that can (vm keeps memory)")


def _machine(backend: Backend) -> MachineSnapshots:
    if not isinstance(backend, MachineSnapshots):
        raise CapabilityMissing("this backend keeps no memory")
    return backend


def _adopt(backend: Backend, snapshot_id: str) -> Outputs:
    info = backend.find_checkpoint(snapshot_id)
    if info is None:
        raise BackendError("the checkpoint to adopt is gone")
    return {**info.outputs(), "adopted": True}


_STEPS: dict[StepName, Callable[[Backend, str, CellRef | None], Outputs]] = {
    S.DELETE_CHECKPOINT: lambda b, snapshot_id, ref: b.delete_checkpoint(snapshot_id),
    S.ADOPT_CHECKPOINT: lambda b, snapshot_id, ref: _adopt(b, snapshot_id),
    S.QUIESCE: lambda b, snapshot_id, ref: b.quiesce(_cell(ref)),
    S.CHECKPOINT: lambda b, snapshot_id, ref: b.checkpoint(_cell(ref), snapshot_id).outputs(),
    S.RESUME: lambda b, snapshot_id, ref: b.resume(_cell(ref)),
    S.SNAPSHOT_MACHINE: lambda b, snapshot_id, ref: _machine(b).snapshot_machine(
        _cell(ref), snapshot_id).outputs(),
}
"""Which backend call each step is (a snapshot's checkpoint id is the snapshot's id)."""
