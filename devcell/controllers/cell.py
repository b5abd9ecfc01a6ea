"""The Cell controller: make a cell's workspace and runtime match its spec.

Level-triggered: every decision re-reads the cell, its volume and what the backend observes,
and plans only the difference, so deciding twice in a row plans nothing the second time.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import Any

from devcell import errors
from devcell.backends.base import CellRef, Observed, Outputs
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Decision, Gate, Plan, Settled, Step, Wait, When
from devcell.errors import BackendError, BackendUnavailable
from devcell.manifests.model import digest
from devcell.store import events, objects, volumes
from devcell.store.db import now

KIND = "Cell"
RUNTIME_FIELDS = ("image", "services", "env", "resources", "network", "hooks", "workspace")


OPTIONAL_RUNTIME_FIELDS = ("mounts",)
"""Runtime fields added later: in the digest only when present, so cells without them keep
their digest (and their containers) across the upgrade."""


def runtime_hash(spec: dict[str, Any]) -> str:
    """Digest of what the running instance is built from; a change means recreate."""
    fields = {k: spec.get(k) for k in RUNTIME_FIELDS}
    fields.update({k: spec[k] for k in OPTIONAL_RUNTIME_FIELDS if spec.get(k)})
    return digest(fields)


def _phase_for(state: str) -> str:
    return {"Running": "Running", "Stopped": "Stopped", "Sleeping": "Sleeping"}[state]


class CellController:
    kind = KIND

    def decide(self, ctx: Context, object_id: str) -> Decision:
        conn = ctx.db.conn
        cell = objects.get(conn, KIND, object_id)
        if cell is None:
            return Settled()
        backend_name = cell.extra["backend"]
        try:
            backend = ctx.backend(backend_name)
        except BackendUnavailable as exc:
            self._write_blocked(ctx, cell, "BackendUnavailable", str(exc))
            return Blocked(exc)
        volume = volumes.for_cell(conn, cell.id)
        ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
        try:  # observing can fail too (the engine stopped mid-run): a condition, not a crash
            observed = backend.observe(ref)
            if cell.deleting:
                return self._plan_delete(cell, backend_name, observed, volume, backend, conn)
            volume_missing = volume is None or not backend.volume_exists(volume.id)
            adoptable = backend.volumes_of(cell.id) if volume is None else []
        except BackendError as exc:
            reason = errors.condition_reason(exc, "ObserveFailed")
            self._write_blocked(ctx, cell, reason, f"observing the cell failed: {exc}")
            return Blocked(exc)

        steps: list[Step] = []
        context: dict[str, Any] = {}
        source = cell.spec.get("workspace", {}).get("from")
        if adoptable:
            # Created by an operation that died before recording it: adopt, don't duplicate.
            steps.append(Step("adopt-volume", {"volume_id": adoptable[0], "record": True,
                                               "from_checkpoint": cell.extra.get("forked_from")}))
            ref = CellRef(cell.id, cell.name, cell.spec, adoptable[0])
            volume_missing = False
        if volume_missing:
            from_checkpoint = None
            if source is not None:
                snap = objects.get(conn, "Snapshot", cell.extra.get("forked_from") or "",
                                   include_deleted=True)
                if snap is None or snap.phase != "Ready":
                    name = source["snapshot"]
                    phase = snap.phase if snap else "missing"
                    return self._wait(ctx, cell, "WaitingForSnapshot",
                                      f'snapshot "{name}" is {phase}; the fork waits until it is Ready')
                from_checkpoint = snap.id
            volume_id = volume.id if volume else volumes.new_id()
            context["volume_id"] = volume_id
            steps.append(Step("create-volume", {"volume_id": volume_id,
                                                "from_checkpoint": from_checkpoint,
                                                "record": volume is None}))
            ref = CellRef(cell.id, cell.name, cell.spec, volume_id)

        action = ""
        superseded = cell.status.get("sleep", {}).get("supersedes")
        if superseded:
            # A sleep that crashed after its new checkpoint left the old one to delete.
            steps.append(Step("delete-checkpoint", {"checkpoint_id": superseded}))
            action = "cleanup"
        if observed.frozen:
            # Left quiesced by an operation that died between quiesce and resume.
            steps.append(Step("resume"))
            action = "resume"
            observed = Observed(exists=True, running=observed.running,
                                runtime_hash=observed.runtime_hash)
        desired = cell.spec.get("state", "Running")
        want_hash = runtime_hash(cell.spec)
        stale = observed.exists and observed.runtime_hash != want_hash
        action = ("create" if not observed.exists else "update" if stale else
                  action if steps else "")
        if desired == "Sleeping":
            if observed.exists:
                sleep_id = f"sleep-{cell.id}-g{cell.generation}"
                if observed.running:
                    steps.append(Step("quiesce", hold=True))
                steps += [Step("checkpoint", {"checkpoint_id": sleep_id}, hold=True),
                          Step("delete")]
                previous = cell.status.get("sleep", {}).get("checkpointId")
                if previous and previous != sleep_id and previous != superseded:
                    # Keep only the latest sleep checkpoint; an older one is superseded.
                    steps.append(Step("delete-checkpoint", {"checkpoint_id": previous}))
                if observed.running:
                    steps.append(Step("resume", when=When.FAILURE))
                action = "sleep"
        else:
            if stale:
                if observed.running:
                    steps.append(Step("stop"))
                steps.append(Step("delete"))
            if not observed.exists or stale:
                steps.append(Step("create", {"runtime_hash": want_hash}))
            running_after = observed.running and not stale
            if desired == "Running" and not running_after:
                steps.append(Step("start"))
                if not action:
                    action = "wake" if cell.phase == "Sleeping" else "start"
            if desired == "Stopped" and running_after:
                steps.append(Step("stop"))
                action = action or "stop"
        if not steps:
            self._write_settled(ctx, cell, observed)
            return Settled()
        if not action:
            action = "repair" if observed.exists else "create"
        if action == "create" and cell.phase == "Sleeping" and desired == "Running":
            action = "wake"
        elif action == "create" and source is not None and volume is None:
            action = "fork"
        context["ref"] = ref
        return Plan(cell, action, steps, backend_name, context)

    # -- planning helpers --------------------------------------------------------------------

    def _plan_delete(self, cell: objects.ObjectRecord, backend_name: str, observed: Observed,
                     volume: volumes.VolumeRecord | None, backend: Any = None,
                     conn: sqlite3.Connection | None = None) -> Plan:
        steps = []
        if observed.exists and observed.running:
            steps.append(Step("stop"))
        if observed.exists:
            steps.append(Step("delete"))
        if volume is not None:
            steps.append(Step("delete-volume", {"volume_id": volume.id}))
        sleep = cell.status.get("sleep", {})
        for checkpoint in dict.fromkeys(filter(None, (sleep.get("checkpointId"),
                                                      sleep.get("supersedes")))):
            steps.append(Step("delete-checkpoint", {"checkpoint_id": checkpoint}))
        ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
        gate = None
        if volume is not None and backend is not None and conn is not None:
            latest = objects.latest_taken_snapshot(conn, cell.id)
            since = latest[0] if latest else None
            if backend.workspace_changed_since(volume.id, since):
                what = f"snapshot {latest[1]}" if latest else "no snapshot was ever taken"
                gate = Gate(0, f"the workspace changed since its last snapshot ({what}); "
                            "deleting it loses that work", {
                                "type": "object", "additionalProperties": False,
                                "required": ["confirm"],
                                "properties": {"confirm": {
                                    "const": cell.name,
                                    "description": "the cell's name, to confirm"}}})
        return Plan(cell, "delete", steps, backend_name, {"ref": ref}, gate=gate)

    def _wait(self, ctx: Context, cell: objects.ObjectRecord, reason: str, message: str) -> Wait:
        self._write_blocked(ctx, cell, reason, message)
        return Wait(reason, message)

    def _write_blocked(self, ctx: Context, cell: objects.ObjectRecord, reason: str,
                       message: str) -> None:
        status = dict(cell.status)
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "False", reason, message)
        status["message"] = message
        phase = "Pending" if cell.phase in ("Pending", "") else cell.phase
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is None:
                return
            changed = objects.write_status(conn, fresh, phase=phase, status=status,
                                           observed_generation=fresh.observed_generation)
            if changed and reason != (cell.condition("Ready") or {}).get("reason"):
                events.record(conn, kind=KIND, object_id=cell.id, name=cell.name,
                              reason=reason, message=message, type="Warning")

    def _write_settled(self, ctx: Context, cell: objects.ObjectRecord, observed: Observed) -> None:
        status = self._ready_status(cell, dict(cell.status))
        phase = _phase_for(cell.spec.get("state", "Running"))
        if (phase, status, cell.generation) == (cell.phase, cell.status, cell.observed_generation):
            return  # nothing to write: the common case on a re-apply
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is not None and not fresh.deleting:
                objects.write_status(conn, fresh, phase=phase, status=status,
                                     observed_generation=fresh.generation)

    def _ready_status(self, cell: objects.ObjectRecord, status: dict[str, Any]) -> dict[str, Any]:
        state = cell.spec.get("state", "Running")
        message = {
            "Running": "cell is running",
            "Stopped": "cell is stopped; its workspace is kept",
            "Sleeping": "cell is asleep: workspace checkpointed, processes and memory released",
        }[state]
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "True", state, message)
        for key in ("message", "nextRetryAt", "retries", "failedGeneration"):
            status.pop(key, None)
        return status

    # -- execution ---------------------------------------------------------------------------

    def run_step(self, ctx: Context, plan: Plan, step: Step) -> Outputs:
        backend = ctx.backend(plan.backend)
        ref: CellRef = dataclasses.replace(plan.context["ref"], op_id=ctx.current_op)
        name = step.name
        if name == "create-volume":
            return backend.create_volume(ref, step.args["volume_id"],
                                         from_checkpoint=step.args["from_checkpoint"])
        if name == "adopt-volume":
            return {"volume": step.args["volume_id"], "adopted": True}
        if name == "delete-volume":
            return backend.delete_volume(step.args["volume_id"])
        if name == "delete-checkpoint":
            return backend.delete_checkpoint(step.args["checkpoint_id"])
        if name == "create":
            return backend.create(ref, step.args["runtime_hash"])
        if name == "start":
            return backend.start(ref)
        if name == "stop":
            return backend.stop(ref)
        if name == "delete":
            return backend.delete(ref)
        if name == "quiesce":
            return backend.quiesce(ref)
        if name == "resume":
            return backend.resume(ref)
        if name == "checkpoint":
            info = backend.checkpoint(ref, step.args["checkpoint_id"])
            return {"checkpoint": info.ref, "consistency": str(info.consistency),
                    "bytes": info.size_bytes, "files": info.files}
        raise BackendError(f"cell controller has no step {name!r}")

    def after_step(self, conn: sqlite3.Connection, plan: Plan, step: Step, outputs: Outputs
                   ) -> None:
        cell = plan.object
        if step.name in ("create-volume", "adopt-volume") and step.args.get("record"):
            volumes.record_created(
                conn, volume_id=step.args["volume_id"], cell_id=cell.id, name=f"{cell.name}-workspace",
                mount_path=cell.spec.get("workspace", {}).get("mountPath", "/workspace"),
                from_snapshot_id=step.args["from_checkpoint"],
                backend_ref=str(outputs.get("volume") or ""),
            )
        elif step.name == "delete-volume":
            volumes.record_deleted(conn, step.args["volume_id"])
        elif step.name == "delete-checkpoint":
            fresh = objects.get(conn, KIND, cell.id)
            sleep = dict((fresh.status if fresh else {}).get("sleep", {}))
            if fresh is not None and sleep.get("supersedes") == step.args["checkpoint_id"]:
                sleep.pop("supersedes")
                plan.context.get("sleep", {}).pop("supersedes", None)
                objects.write_status(conn, fresh, phase=fresh.phase,
                                     status=dict(fresh.status, sleep=sleep),
                                     observed_generation=fresh.observed_generation)
        self.note_outputs(plan, step, outputs)
        if step.name == "checkpoint":
            # Record the sleep checkpoint now, not at finish(): a crash later in the plan must
            # not leave a checkpoint the database does not know (a later delete removes it).
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is not None:
                sleep = dict(plan.context["sleep"])
                old = fresh.status.get("sleep", {})
                superseded = old.get("supersedes") or old.get("checkpointId")
                if superseded and superseded != sleep["checkpointId"]:
                    sleep["supersedes"] = superseded  # deleted by a later step (or plan)
                plan.context["sleep"] = sleep
                status = dict(fresh.status, sleep=sleep)
                objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                                     observed_generation=fresh.observed_generation)

    def note_outputs(self, plan: Plan, step: Step, outputs: Outputs) -> None:
        if step.name == "checkpoint":
            plan.context["sleep"] = {"checkpoint": outputs.get("checkpoint"),
                                     "checkpointId": step.args["checkpoint_id"],
                                     "consistency": outputs.get("consistency"), "at": now()}

    def restore(self, ctx: Context, data: dict[str, Any]) -> Plan | None:
        cell = objects.get(ctx.db.conn, KIND, data["objectId"])
        if cell is None:
            return None
        steps = [Step.from_dict(s) for s in data["steps"]]
        volume = volumes.for_cell(ctx.db.conn, cell.id)
        volume_id = volume.id if volume else next(
            (s.args["volume_id"] for s in steps if "volume_id" in s.args), None)
        ref = CellRef(cell.id, cell.name, cell.spec, volume_id)
        return Plan(cell, data["action"], steps, data["backend"], {"ref": ref})

    def finish(self, conn: sqlite3.Connection, plan: Plan, *, error: str | None,
               reason: str = "StepFailed") -> None:
        fresh = objects.get(conn, KIND, plan.object.id, include_deleted=True)
        if fresh is None:
            return
        if plan.action == "delete" and error is None:
            objects.mark_deleted(conn, fresh)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name, reason="Deleted",
                          message="cell torn down; its snapshots remain")
            return
        status = dict(fresh.status)
        if error is not None:
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", reason, error)
            status["message"] = error
            status["failedGeneration"] = plan.object.generation
            objects.write_status(conn, fresh, phase="Failed", status=status,
                                 observed_generation=fresh.observed_generation)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                          reason=f"{plan.action.capitalize()}Failed", message=error,
                          type="Warning")
            return
        status = self._ready_status(fresh, status)
        if "sleep" in plan.context:
            status["sleep"] = plan.context["sleep"]
        if plan.action == "wake":
            status["lastStart"] = {
                "at": now(), "from": "sleep",
                "note": "cold boot from the persisted workspace; processes and memory were not "
                        "restored",
            }
        status["runtime"] = {"backend": plan.backend, "ref": f"{plan.backend}://{fresh.id}"}
        phase = _phase_for(fresh.spec.get("state", "Running"))
        objects.write_status(conn, fresh, phase=phase, status=status,
                             observed_generation=plan.object.generation)
        reason = {"create": "Created", "fork": "Forked", "update": "Updated", "start": "Started",
                  "stop": "Stopped", "sleep": "Slept", "wake": "Woken"}.get(plan.action, "Synced")
        events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name, reason=reason,
                      message=f"{plan.action} done: {', '.join(plan.context.get('ran', plan.step_names))}")
