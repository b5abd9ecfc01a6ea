"""Garbage collection of one backend: what nothing references goes, step by step, recorded.

Deleting a snapshot or a cell removes what it owns; what a crash, an interrupted removal or an
older version left behind is found here. Every resource the backend holds is judged against
the database's references (devcell.store.references):

- kept: a live object owns it or depends on it (a live fork keeps the checkpoint it was
  forked from, even once its snapshot is deleted);
- reclaimed: its object was deleted (a recorded decision: the user asked), or it holds no
  files (an empty orphan, as the orphan sweep removes);
- reclaimed only with approval (`devcell gc --approve`): it holds files and no object of the
  database ever named it. The orphan sweep keeps such a resource (OrphanKept); approving a
  collection is the recorded decision that may remove it.

The plan is one step per resource, each an ordinary operation step (committed Running before
its backend call, Succeeded or Failed after), so a kill -9 at any point leaves the step in
flight known; every step judges its resource again from a fresh read before removing it, and
references only ever disappear (ids are never reused), so nothing referenced is ever removed.
Whatever a killed collection left (a half-removed tree, a step not run) the next one finds.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from devcell.backends.base import Backend, CellRef, Measuring, Outputs, Owned, OwnedKind
from devcell.controllers.context import Context
from devcell.controllers.plan import Plan, Step, When
from devcell.controllers.steps import StepName
from devcell.errors import BackendError
from devcell.store import events, objects, references
from devcell.store.clock import now
from devcell.store.references import References

KIND = "GC"
"""The operations table's object kind for a collection (not a kind of desired object)."""


class Verdict(StrEnum):
    KEEP = "keep"
    RECLAIM = "reclaim"
    NEEDS_APPROVAL = "needs-approval"


@dataclass(frozen=True)
class Judged:
    item: Owned
    verdict: Verdict
    why: str


def judge(item: Owned, refs: References) -> Judged:
    """Keep, reclaim, or reclaim only with approval, and why (in words for the user)."""
    owner = item.cell_id
    if item.kind is OwnedKind.CHECKPOINT:
        if item.id in refs.live_snapshots:
            return Judged(item, Verdict.KEEP, "its snapshot exists")
        if item.id in refs.depended_on:
            return Judged(item, Verdict.KEEP, "a live cell was forked or restored from it")
        if item.id in refs.sleep_checkpoints:
            return Judged(item, Verdict.KEEP, "it is the sleep checkpoint of a live cell")
        if item.id in refs.deleted_snapshots:
            return Judged(item, Verdict.RECLAIM, "its snapshot was deleted")
        if owner in refs.live_cells:
            # Not a snapshot's: a sleep checkpoint, possibly one being taken right now.
            return Judged(item, Verdict.KEEP, "its cell exists")
        if owner in refs.deleted_cells:
            return Judged(item, Verdict.RECLAIM, "its cell was deleted")
    elif item.kind is OwnedKind.VOLUME or item.kind is OwnedKind.CELL:
        if owner in refs.live_cells:
            return Judged(item, Verdict.KEEP, "its cell exists")
        if owner in refs.deleted_cells:
            return Judged(item, Verdict.RECLAIM, "its cell was deleted")
    if item.content is None:
        return Judged(item, Verdict.RECLAIM, "no object accounts for it and it holds no files")
    return Judged(item, Verdict.NEEDS_APPROVAL,
                  f"no object accounts for it and it holds files ({item.content})")


STEP_OF = {OwnedKind.CELL: StepName.DELETE, OwnedKind.VOLUME: StepName.DELETE_VOLUME,
           OwnedKind.CHECKPOINT: StepName.DELETE_CHECKPOINT}


def step_for(judged: Judged) -> Step:
    item = judged.item
    return Step(STEP_OF[item.kind], {
        "kind": str(item.kind), "id": item.id, "cell_id": item.cell_id,
        "content": item.content, "approved": judged.verdict is Verdict.NEEDS_APPROVAL,
        "why": judged.why}, when=When.ALWAYS)


def target(conn: sqlite3.Connection, backend: str) -> objects.ObjectRecord:
    """What a collection's operation is recorded against: the backend it collects."""
    stamp = now()
    return objects.ObjectRecord(
        kind=KIND, id=f"gc-{backend}", name=backend, spec={}, labels={}, annotations={},
        spec_hash="", manifest_hash="", generation=0, resource_version=0, source=None,
        phase="", observed_generation=0, status={}, created_at=stamp, updated_at=stamp,
        deleting_at=None, deleted_at=None)


@dataclass
class GCWork:
    """What a collection's steps did, for finish() and the report."""

    freed: dict[str, int] = field(default_factory=dict)
    """Resource id -> bytes freed by its removal."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Resource id -> why it was kept after all (referenced when its step came)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Resource id -> why its removal failed (never counted as freed); the next removals
    still run."""


def _work(plan: Plan) -> GCWork:
    assert isinstance(plan.work, GCWork), plan.work
    return plan.work


class GCController:
    """Runs a collection's steps through the executor, like any kind's controller."""

    kind = KIND

    def decide(self, ctx: Context, object_id: str) -> Any:
        raise NotImplementedError("a collection is planned by devcell.reconciler.gc")

    def run_step(self, ctx: Context, plan: Plan, step: Step) -> Outputs:
        args = step.args
        kind = OwnedKind(args["kind"])
        item = Owned(kind, args["id"], args["cell_id"], args.get("content"))
        again = judge(item, references.read(ctx.db.conn))
        allowed = {Verdict.RECLAIM} | ({Verdict.NEEDS_APPROVAL} if args["approved"] else set())
        if again.verdict not in allowed:
            return {"id": item.id, "kept": again.why}
        backend = ctx.backend(plan.backend)
        freed = backend.exclusive_bytes(kind, item.id) if isinstance(backend, Measuring) else 0
        try:
            _remove(backend, item)
        except BackendError as exc:  # said, not counted; the other removals go on
            return {"id": item.id, "notRemoved": str(exc)}
        return {"id": item.id, "freedBytes": freed}

    def after_step(self, conn: sqlite3.Connection, plan: Plan, step: Step, outputs: Outputs
                   ) -> None:
        self.note_outputs(plan, step, outputs)

    def note_outputs(self, plan: Plan, step: Step, outputs: Outputs) -> None:
        work = _work(plan)
        if outputs.get("kept"):
            work.skipped[str(outputs["id"])] = str(outputs["kept"])
        elif outputs.get("notRemoved"):
            work.failed[str(outputs["id"])] = str(outputs["notRemoved"])
        elif "freedBytes" in outputs:
            work.freed[str(outputs["id"])] = int(outputs["freedBytes"] or 0)

    def rebuild_plan(self, ctx: Context, data: dict[str, Any]) -> Plan | None:
        return None  # a collection is never suspended: the next one plans afresh

    def finish(self, conn: sqlite3.Connection, plan: Plan, *, error: str | None,
               reason: str = "StepFailed") -> None:
        work = _work(plan)
        message = (f"removed {len(work.freed)} of {len(plan.steps)} planned, "
                   f"{sum(work.freed.values())} bytes freed"
                   + (f"; {len(work.failed)} could not be removed" if work.failed else ""))
        if error is not None:
            message += f"; {error}"
        events.record(conn, kind=KIND, object_id=plan.object.id, name=plan.object.name,
                      reason="Collected" if error is None else "CollectFailed", message=message,
                      type="Normal" if error is None and not work.failed else "Warning")


def _remove(backend: Backend, item: Owned) -> Outputs:
    if item.kind is OwnedKind.CELL:
        return backend.delete(CellRef(item.cell_id, item.cell_id, {}, None))
    if item.kind is OwnedKind.VOLUME:
        return backend.delete_volume(item.id)
    if item.kind is OwnedKind.CHECKPOINT:
        return backend.delete_checkpoint(item.id)
    raise BackendError(f"garbage collection cannot remove a {item.kind}")
