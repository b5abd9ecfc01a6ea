"""Restoring a cell's workspace to a snapshot, as the cell controller plans it.

The plan (action `restore`) is: `resume` if a crash left the cell frozen, `stop` if it runs,
`checkpoint` of the safety snapshot (unless declined), `restore-workspace`, and `start` again
(always run, so a failed restore leaves the cell running its old workspace) if it was
running. The safety snapshot is recorded as a Ready Snapshot in the very transaction that
records its checkpoint step as done, so it exists, complete, before the step that replaces
the workspace starts. When the workspace changed since the cell's last snapshot (and is not
already the snapshot's tree), the plan waits at an approval gate before its first step, as
a delete does, and the gate's reason says what would be replaced.

Crash safety comes from three facts: the request (with the safety snapshot's id) stays
recorded until the restore finishes, so an interrupted one is planned again from what is
observed; a checkpoint taken under an id that exists complete is not taken again; and the
backend swaps the workspace in one atomic exchange.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.backends.base import (
    Backend,
    CellRef,
    Changes,
    Moving,
    Observed,
    Outputs,
    Restoring,
)
from devcell.controllers import safety_snapshots
from devcell.controllers.plan import Gate, Plan, Step, When, confirm_schema
from devcell.controllers.steps import StepName
from devcell.controllers.work import CellWork
from devcell.errors import CapabilityMissing
from devcell.manifests.model import manifest_hash, spec_hash
from devcell.store import events, holds, objects, restores, volumes
from devcell.store.clock import now

S = StepName
ACTION = "restore"
SOURCE = "restore"
"""The `source` of a safety snapshot (no manifest path: `apply --prune` never touches it)."""
ANNOTATION = safety_snapshots.ANNOTATION


def restoring(backend: Backend) -> Restoring:
    if not isinstance(backend, Restoring):
        raise CapabilityMissing(f"the {backend.name} backend cannot restore a workspace")
    return backend


def plan(cell: objects.ObjectRecord, request: restores.Request, *, backend_name: str,
         backend: Backend, observed: Observed, volume: volumes.VolumeRecord,
         conn: sqlite3.Connection, key: bytes) -> Plan:
    steps: list[Step] = []
    if observed.frozen:
        steps.append(Step(S.RESUME))
    if observed.running:
        steps.append(Step(S.STOP))
    if request.safety_id is not None:
        spec = {"cell": cell.name}
        annotations = {ANNOTATION: f"taken before restoring snapshot {request.snapshot}"}
        steps.append(Step(S.CHECKPOINT, {
            "checkpoint_id": request.safety_id, "safety": request.safety,
            "spec_hash": spec_hash(spec, key),
            "manifest_hash": manifest_hash(spec, {}, annotations, key),
            "restoring": request.snapshot}))
    args = {"checkpoint_id": request.snapshot_id, "snapshot": request.snapshot}
    if request.away_from:
        args["away_from"] = request.away_from
    steps.append(Step(S.RESTORE_WORKSPACE, args))
    if observed.exists and holds.desired_state(cell) == "Running":
        steps.append(Step(S.START, when=When.ALWAYS))
    ref = CellRef(cell.id, cell.name, cell.spec, volume.id)
    # A move restores the checkpoint just taken of the stopped cell: nothing is replaced.
    gate = None if request.away_from else _gate(cell, request, backend, volume.id, conn)
    return Plan(cell, ACTION, steps, backend_name, CellWork(ref), gate=gate)


def moving(backend: Backend) -> Moving:
    if not isinstance(backend, Moving):
        raise CapabilityMissing(f"the {backend.name} backend runs its cells on one machine: "
                                "there is no other node to move a workspace to")
    return backend


def restore_step(backend: Backend, ref: CellRef, args: dict[str, Any]) -> Outputs:
    """The `restore-workspace` step: a restore in place, or a move off a node."""
    if args.get("away_from"):
        return moving(backend).move_workspace(ref, args["checkpoint_id"], args["away_from"])
    return restoring(backend).restore_workspace(ref, args["checkpoint_id"])


def baselines(conn: sqlite3.Connection, cell: objects.ObjectRecord) -> list[tuple[str, str]]:
    """(id, name) of the live snapshots the workspace may still equal: the latest taken of
    the cell, and the one it was last restored from (a restore makes the workspace that
    snapshot's tree, newer than the safety snapshot taken just before)."""
    found = []
    latest = objects.latest_taken_snapshot(conn, cell.id)
    if latest:
        found.append(latest)
    restored = (cell.status.get("restore") or {}).get("snapshotId")
    if restored and not (cell.status.get("restore") or {}).get("failed"):
        snap = objects.get(conn, "Snapshot", str(restored))
        if snap is not None and snap.extra.get("checkpoint_ref") and \
                (snap.id, snap.name) not in found:
            found.append((snap.id, snap.name))
    return found


def unsaved(backend: Backend, volume_id: str, bases: list[tuple[str, str]], target: str
            ) -> tuple[str | None, Changes] | None:
    """None when the workspace equals one of `bases` or the `target` snapshot (restoring
    loses nothing); else the nearest base and what the workspace holds that it does not."""
    if not backend.workspace_changed_since(volume_id, target):
        return None
    if not bases:
        if not backend.workspace_changed_since(volume_id, None):
            return None
        return None, restoring(backend).workspace_changes(volume_id, None)
    if any(not backend.workspace_changed_since(volume_id, b) for b, _ in bases):
        return None
    diffs = [(name, restoring(backend).workspace_changes(volume_id, b)) for b, name in bases]
    name, changes = min(diffs, key=lambda d: d[1].total)
    return name, changes


def _gate(cell: objects.ObjectRecord, request: restores.Request, backend: Backend,
          volume_id: str, conn: sqlite3.Connection) -> Gate | None:
    """An approval gate when restoring would replace work no snapshot holds."""
    found = unsaved(backend, volume_id, baselines(conn, cell), request.snapshot_id)
    if found is None:
        return None
    base, changes = found
    what = f"snapshot {base}" if base else "no snapshot was ever taken of it"
    lost = changes.summary()
    keep = (f"the safety snapshot {request.safety} keeps them" if request.safety else
            "no safety snapshot is taken (--no-safety-snapshot): they are lost")
    return Gate(0, f"restoring snapshot {request.snapshot} replaces the workspace of cell "
                   f"{cell.name}, which changed since its last snapshot ({what}): {lost}; "
                   f"{keep}", confirm_schema(cell.name, "the cell's name"))


def record_safety(conn: sqlite3.Connection, cell: objects.ObjectRecord, args: dict[str, Any],
                  outputs: Outputs) -> None:
    """The safety snapshot, Ready, recorded with its checkpoint step (same transaction)."""
    safety_snapshots.record(conn, cell, args, outputs, spec={"cell": cell.name},
                            why=f"restoring snapshot {args['restoring']}", source=SOURCE,
                            origin={"kind": "safety", "restoring": args["restoring"]})


def finished(conn: sqlite3.Connection, cell: objects.ObjectRecord, plan: Plan,
             error: str | None) -> None:
    """Clear the request (done or failed: a failed restore is reported, not retried on its
    own) and say what happened in status.restore and an event."""
    restores.clear(conn, cell.id)
    fresh = objects.get(conn, "Cell", cell.id)
    if fresh is None:
        return
    step = next(s for s in plan.steps if s.name == S.RESTORE_WORKSPACE)
    target, target_id = step.args.get("snapshot"), step.args.get("checkpoint_id")
    safety = next((s.args.get("safety") for s in plan.steps
                   if s.name == S.CHECKPOINT and s.args.get("safety")), None)
    away = step.args.get("away_from")
    if away:
        if error is None:
            said = (f"snapshot {safety} (kept: the cell's last snapshot before the move)"
                    if safety else f"its last snapshot in the registry, {target} (node {away} "
                                   "was lost: what the cell wrote since is not carried)")
            events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason="Moved",
                          message=f"workspace moved off node {away} from {said}")
        else:
            events.record(conn, kind="Cell", object_id=cell.id, name=cell.name,
                          reason="MoveFailed", type="Warning",
                          message=f"moving off node {away} failed ({error}); the cell keeps "
                                  "its workspace there")
        move = {"from": away, "snapshot": safety or target, "at": now(),
                **({"failed": error} if error else {})}
        objects.write_status(conn, fresh, phase=fresh.phase, status=dict(fresh.status, move=move),
                             observed_generation=fresh.observed_generation)
        return
    if error is None:
        record = {"snapshot": target, "snapshotId": target_id, "safetySnapshot": safety,
                  "at": now()}
        message = (f"workspace restored from snapshot {target}" +
                   (f"; safety snapshot {safety} holds the workspace as it was" if safety
                    else "; no safety snapshot was taken"))
        events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason="Restored",
                      message=message)
    else:
        record = {"snapshot": target, "snapshotId": target_id, "failed": error, "at": now()}
        events.record(conn, kind="Cell", object_id=cell.id, name=cell.name,
                      reason="RestoreFailed", message=error, type="Warning")
    objects.write_status(conn, fresh, phase=fresh.phase, status=dict(fresh.status, restore=record),
                         observed_generation=fresh.observed_generation)
