"""The Cell controller: make a cell's workspace and runtime match its spec.

Level-triggered: every decision re-reads the cell, its volume and what the backend observes,
and plans only the difference, so deciding twice in a row plans nothing the second time.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import backends, errors, security
from devcell.backends.base import (
    Backend,
    Building,
    Capabilities,
    CellRef,
    Consistency,
    KeepsCellCaches,
    KeepsRootfs,
    MachineState,
    Observed,
    Outputs,
    Pulling,
    Supervising,
)
from devcell.backends.container import images
from devcell.controllers import (
    builds,
    crashloop,
    dotfiles,
    host_hooks,
    idle,
    post_create,
    prune_keep,
    retention,
    services,
)
from devcell.controllers import restore as restoring
from devcell.controllers.context import Context
from devcell.controllers.plan import (
    Blocked,
    Decision,
    Gate,
    Plan,
    Settled,
    Step,
    Wait,
    When,
    confirm_schema,
)
from devcell.controllers.steps import StepName
from devcell.controllers.work import CellWork
from devcell.errors import (
    BackendError,
    BackendUnavailable,
    CapabilityMissing,
    ImageNotFound,
)
from devcell.log import logger
from devcell.manifests import secrets
from devcell.manifests.model import digest
from devcell.store import activity, events, frozen, holds, objects, prunes, restores, volumes
from devcell.store.clock import now
from devcell.store.objects import Phase

KIND = "Cell"
S = StepName
RUNTIME_FIELDS = ("image", "services", "env", "resources", "network", "hooks", "workspace")


OPTIONAL_RUNTIME_FIELDS = ("mounts", "user", "volumes", "sidecars", "userEnvProbe",
                           "security")
"""Runtime fields added later: in the digest only when present, so cells without them keep
their digest (and their containers) across the upgrade."""

RUNTIME_HOOKS = frozenset({"preCheckpoint", "postCheckpoint", "postCreate", "postStart",
                           "timeoutSeconds"})
"""The hooks in the runtime's digest (hostInitialize and postAttach are not: changing them
recreates nothing)."""


def runtime_hash(spec: dict[str, Any], key: bytes) -> str:
    """Digest of what the running instance is built from; a change means recreate.

    It is a container label anyone allowed to `docker inspect` reads, so secrets enter it
    only through an HMAC under the state directory's key (devcell.manifests.secrets.keyed):
    a changed secret still changes it, a guessed one cannot be checked against it. A cell
    without secrets keeps the hash it always had; one with secrets, upgraded from a DevCell
    that hashed them plainly, is recreated once (its old label was the leak).
    """
    fields = {k: spec.get(k) for k in RUNTIME_FIELDS}
    if isinstance(fields["workspace"], dict) and "source" in fields["workspace"]:
        # what a new workspace starts with, used once: never a reason to recreate the runtime
        fields["workspace"] = {k: v for k, v in fields["workspace"].items() if k != "source"}
    if isinstance(fields["hooks"], dict) and not RUNTIME_HOOKS.issuperset(fields["hooks"]):
        # run on the host, or when someone attaches: nothing the runtime is made of
        fields["hooks"] = {k: v for k, v in fields["hooks"].items() if k in RUNTIME_HOOKS} \
            or None
    fields.update({k: spec[k] for k in OPTIONAL_RUNTIME_FIELDS if spec.get(k)})
    asked = fields.get("security")
    if isinstance(asked, dict):  # init: true is what every cell has anyway
        fields["security"] = {k: v for k, v in asked.items() if k != "init"}
        if not fields["security"]:
            del fields["security"]
    return digest(secrets.keyed(fields, key))


def _phase_for(state: str) -> Phase:
    return Phase(state)  # the desired states are named as the phases that reach them


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
            if cell.extra.get("frozen_at") and not observed.frozen:
                with ctx.db.write() as wconn:  # resumed since (by hand, or a compensation)
                    frozen.clear(wconn, cell.id)
            lost = observed.detail.get("nodeDown")
            moving = restores.of(cell)
            if lost and moving is not None and moving.away_from and moving.safety_id is None:
                lost = None  # a move off the lost node from a pushed snapshot, asked for
            if lost and not cell.deleting:
                # Its node is gone from the cluster: what runs there is not known, and the
                # workspace is only there. Nothing is planned (never recreated empty
                # elsewhere); the cell is Ready again when its node comes back.
                self._write_unknown(ctx, cell, str(lost))
                return Blocked(BackendUnavailable(str(lost)))
            if cell.deleting:
                return self._plan_delete(cell, backend_name, observed, volume, backend, conn,
                                         key=ctx.db.hash_key)
            volume_missing = volume is None or not backend.volume_exists(volume.id)
            adoptable = backend.volumes_of(cell.id) if volume is None else []
        except BackendError as exc:
            reason = errors.condition_reason(exc, "ObserveFailed")
            self._write_blocked(ctx, cell, reason, f"observing the cell failed: {exc}")
            return Blocked(exc)

        request = restores.of(cell)
        if request is not None and volume is not None and not volume_missing and not adoptable:
            try:
                return restoring.plan(cell, request, backend_name=backend_name, backend=backend,
                                      observed=observed, volume=volume, conn=conn,
                                      key=ctx.db.hash_key)
            except BackendError as exc:
                reason = errors.condition_reason(exc, "RestoreFailed")
                self._write_blocked(ctx, cell, reason, f"planning the restore failed: {exc}")
                return Blocked(exc)
        port_held = self._port_held(conn, cell, observed)
        if port_held:
            return self._wait(ctx, cell, "PortHeld", port_held, after=0.5)
        steps: list[Step] = []
        caps = backend.capabilities
        spec = cell.spec
        build_tag = None
        wanted_build: builds.Wanted | None = None
        if builds.built(cell.spec) and holds.desired_state(cell) != "Sleeping":
            built = self._judge_build(ctx, cell, backend, ref)
            if isinstance(built, Blocked):
                return built
            wanted_build = built
            build_tag = built.tag
            spec = with_image(cell.spec, build_tag, built.runtime)
            ref = ref.replace(spec=spec)
        sidecar_tags: dict[str, str] = {}
        if holds.desired_state(cell) != "Sleeping":
            for sidecar in built_sidecars(cell.spec):
                sidecar_build = self._judge_build(ctx, cell, backend, sidecar_ref(ref, sidecar))
                if isinstance(sidecar_build, Blocked):
                    return sidecar_build
                sidecar_tags[str(sidecar["name"])] = sidecar_build.tag
            if sidecar_tags:
                spec = with_sidecar_images(spec, sidecar_tags)
                ref = ref.replace(spec=spec)
        source = cell.spec.get("workspace", {}).get("from")
        if adoptable:
            # Created by an operation that died before recording it: adopt, don't duplicate.
            steps.append(Step(S.ADOPT_VOLUME, {"volume_id": adoptable[0], "record": True,
                                               "from_checkpoint": cell.extra.get("forked_from")}))
            ref = CellRef(cell.id, cell.name, spec, adoptable[0])
            volume_missing = False
        if volume_missing:
            from_checkpoint = None
            if source is not None:
                snap = objects.get(conn, "Snapshot", cell.extra.get("forked_from") or "",
                                   include_deleted=True)
                if snap is None or snap.phase != Phase.READY:
                    name = source["snapshot"]
                    phase = snap.phase if snap else "missing"
                    return self._wait(ctx, cell, "WaitingForSnapshot",
                                      f'snapshot "{name}" is {phase}; the fork waits until it is Ready')
                from_checkpoint = snap.id
            volume_id = volume.id if volume else volumes.new_id()
            steps.append(Step(S.CREATE_VOLUME, {"volume_id": volume_id,
                                                "from_checkpoint": from_checkpoint,
                                                "record": volume is None}))
            ref = CellRef(cell.id, cell.name, spec, volume_id)

        action = ""
        superseded = cell.status.get("sleep", {}).get("supersedes")
        if superseded:
            # A sleep that crashed after its new checkpoint left the old one to delete.
            steps.append(Step(S.DELETE_CHECKPOINT, {"checkpoint_id": superseded}))
            action = "cleanup"
        if observed.frozen:
            # Left quiesced by an operation that died between quiesce and resume.
            steps.append(Step(S.RESUME))
            action = "resume"
            observed = Observed(exists=True, running=observed.running,
                                runtime_hash=observed.runtime_hash)
        desired = holds.desired_state(cell)  # a runtime hold's, else the manifest's
        want_hash = runtime_hash(spec, ctx.db.hash_key)
        stale = observed.exists and observed.runtime_hash != want_hash
        pull = False
        if desired != "Sleeping":
            judged = self._judge_image(ctx, cell, backend, observed,
                                       creating=not observed.exists or stale)
            if isinstance(judged, Blocked):
                return judged
            pull, moved = judged
            stale = stale or moved
        action = ("create" if not observed.exists else "update" if stale else
                  action if steps else "")
        saved = cell.status.get("sleep", {})
        if desired == "Sleeping":
            sleep_id = f"sleep-{cell.id}-g{cell.generation}"
            # A saved machine, or a container whose root filesystem the sleep kept, keeps its
            # (stopped) runtime: that is what asleep looks like there.
            kept_asleep = ((saved.get("machine") or saved.get("rootfs"))
                           and saved.get("checkpointId") == sleep_id and not observed.running)
            if observed.exists and not kept_asleep:
                # A sleep killed after its save: the memory is kept, only not recorded (a
                # checkpoint and delete would throw it away). save-machine returns it again.
                machine = caps.memory_state and (observed.running or _saved_machine(
                    backend, sleep_id))
                if machine:
                    # The backend keeps memory: the whole machine is saved and stopped, and a
                    # wake resumes its processes where they were.
                    steps.append(Step(S.SAVE_MACHINE, {"checkpoint_id": sleep_id}, hold=True))
                else:
                    # The workspace is checkpointed (what a fork or a restore can start from);
                    # a backend whose stopped runtime keeps its root filesystem stops it, so
                    # what was installed in the cell survives; any other releases it.
                    if observed.running:
                        steps.append(Step(S.QUIESCE, hold=True))
                    keep = caps.keeps_rootfs
                    steps += [Step(S.CHECKPOINT, {"checkpoint_id": sleep_id,
                                                  **({"rootfs": True} if keep else {})},
                                   hold=True),
                              Step(S.STOP) if keep else Step(S.DELETE)]
                previous = cell.status.get("sleep", {}).get("checkpointId")
                if previous and previous != sleep_id and previous != superseded:
                    # Keep only the latest sleep checkpoint; an older one is superseded.
                    steps.append(Step(S.DELETE_CHECKPOINT, {"checkpoint_id": previous}))
                if observed.running and not machine:
                    steps.append(Step(S.RESUME, when=When.FAILURE))
                action = "sleep"
        else:
            if pull:  # before the old runtime goes: a failed pull leaves it running
                steps.append(Step(S.PULL_IMAGE, {"image": cell.spec["image"]}))
            creating = not observed.exists or stale
            if creating:  # before the old runtime goes, as the cell's own image
                missing = self._sidecar_pulls(ctx, cell, backend)
                if isinstance(missing, Blocked):
                    return missing
                steps += missing
            if build_tag is not None and creating and not _building(backend).image_exists(
                    build_tag):
                # Before the old runtime goes: a failed build leaves it running.
                assert wanted_build is not None
                steps.append(Step(S.BUILD_IMAGE, wanted_build.step_args()))
            for sidecar in built_sidecars(cell.spec) if creating else []:
                tag = sidecar_tags[str(sidecar["name"])]
                if not _building(backend).image_exists(tag):
                    steps.append(Step(S.BUILD_IMAGE, {"tag": tag, "sidecar": sidecar["name"],
                                                      "build": sidecar["build"]}))
            keep = stale and caps.keeps_rootfs and isinstance(backend, KeepsRootfs)
            if stale:
                if observed.running:
                    steps.append(Step(S.STOP))
                if keep:  # what was installed goes into the new runtime (same image)
                    # the image, as CREATE's: a resumed plan of a built cell has no other
                    steps.append(Step(S.KEEP_ROOTFS, {} if wanted_build is None
                                      else _built_args(wanted_build)))
                steps.append(Step(S.DELETE))
            if creating:
                create: dict[str, Any] = {"runtime_hash": want_hash,
                                          **({"rootfs": True} if keep else {})}
                if wanted_build is not None:  # kept for a resumed plan (rebuild_plan())
                    create.update(_built_args(wanted_build))
                if sidecar_tags:
                    create["sidecarImages"] = sidecar_tags  # the same
                steps.append(Step(S.CREATE, create))
            running_after = observed.running and not stale
            resume_failed = saved.get("restoreFailed")  # api/wake.py: boot cold instead
            if desired == "Running" and not running_after and saved.get("machine") \
                    and not resume_failed and caps.memory_state and observed.exists \
                    and not stale \
                    and _saved_machine(backend, str(saved.get("checkpointId"))):
                # Asleep with its memory saved: bring the machine back, not a cold boot. A
                # saved machine already woken (a wake consumes it) and since gone, powered
                # off or killed, say, is booted cold instead: never a restore of nothing.
                steps.append(Step(S.RESTORE_MACHINE, {"checkpoint_id": saved["checkpointId"]}))
                action = action or "wake"
            elif desired == "Running" and not running_after:
                held = self._crash_backoff(ctx, cell, observed, stale)
                if held is not None:
                    return held
                steps.append(Step(S.START))
                if not action:
                    action = ("wake" if cell.phase == Phase.SLEEPING or resume_failed
                              else "start")
            if desired == "Stopped" and running_after:
                steps.append(Step(S.STOP))
                action = action or "stop"
            asked, asked_action = self._asked(ctx, cell, steps, desired)
            steps += asked
            action = action or asked_action
            host_hooks.insert(cell, steps)  # before everything a start does, its build too
            install = dotfiles.plan(cell, steps) if desired == "Running" else None
            if install is not None:
                steps.append(install)
                action = action or "dotfiles"
        if not steps:
            self._write_settled(ctx, cell, observed, built=build_tag, sidecars=sidecar_tags)
            idleness = idle.check(cell, Path(ctx.db.state_dir), desired=desired,
                                  running=observed.running, now=ctx.clock())
            if idleness is not None and idleness.due:
                idle.hold_asleep(ctx.db, cell, idleness)
                return self.decide(ctx, object_id)  # now to sleep: plans the sleep
            settled = self._retention(ctx, cell, observed, backend_name, ref)
            if isinstance(settled, Settled) and idleness is not None:
                return Settled(requeue_after=idle.sooner(settled.requeue_after, idleness))
            return settled
        if not action:
            action = "repair" if observed.exists else "create"
        if action in ("create", "update") and cell.phase == Phase.SLEEPING \
                and desired == "Running":
            action = "wake"  # an update of a runtime its sleep kept is a wake too
        elif action == "create" and source is not None and volume is None:
            action = "fork"
        return Plan(cell, action, steps, backend_name, CellWork(ref))

    # -- planning helpers --------------------------------------------------------------------

    def _retention(self, ctx: Context, cell: objects.ObjectRecord, observed: Observed,
                   backend_name: str, ref: CellRef) -> Decision:
        """A settled cell's snapshot policy: expire what its retain no longer keeps, take
        the scheduled snapshot that is due, or sleep until the next one is."""
        conn = ctx.db.conn
        now = ctx.clock()
        steps = []
        for snapshot_id, expiry in retention.over_retain(conn, cell).items():
            snap = objects.get(conn, "Snapshot", snapshot_id)
            depending = retention.forks(conn, snap) if snap is not None else []
            if snap is None or not depending:
                steps.append(Step(S.EXPIRE, {"snapshot_id": snapshot_id}))
            else:
                with ctx.db.write() as wconn:
                    retention.note_deferred(wconn, snap, expiry, depending)
        if steps:
            return Plan(cell, "retain", steps, backend_name, CellWork(ref))
        running = (holds.desired_state(cell) == "Running" and observed.running
                   and not cell.deleting)
        if not running:
            return Settled()
        due = retention.due_snapshot(conn, cell, now)
        if due is not None:
            name, slot = due
            return Plan(cell, "schedule", [Step(S.SCHEDULE_SNAPSHOT, {
                "name": name, "slot": retention.stamp(slot)})], backend_name, CellWork(ref))
        upcoming = retention.next_slot(cell, now)
        if upcoming is None:
            return Settled()
        return Settled(requeue_after=max((upcoming - now).total_seconds(), 0.001))

    def _plan_delete(self, cell: objects.ObjectRecord, backend_name: str, observed: Observed,
                     volume: volumes.VolumeRecord | None, backend: Any = None,
                     conn: sqlite3.Connection | None = None, key: bytes = b"") -> Plan:
        steps = []
        if observed.exists and observed.running:
            steps.append(Step(S.STOP))
        kept = self._kept_workspace(cell, volume, conn, backend, key)
        if kept is not None:
            steps.append(kept)  # before the cell and its workspace go
        if observed.exists:
            # The cell goes for good: its caches too (a recreate or a sleep keeps them).
            steps.append(Step(S.DELETE, {"forget_caches": True}))
        if builds.built(cell.spec) and backend is not None \
                and isinstance(backend, Building):
            # After its runtime: the engine refuses to remove an image a container uses.
            steps.append(Step(S.DELETE_IMAGES))
        if backend is not None and isinstance(backend, Building):
            steps += [Step(S.DELETE_IMAGES, {"sidecar": sidecar["name"]})
                      for sidecar in built_sidecars(cell.spec)]
        # With no volume recorded, whatever the backend holds for the cell: a volume made by
        # an operation that died before recording it is the cell's workspace too (as decide
        # adopts it; with one recorded, the next create adopts instead of making another).
        held = backend.volumes_of(cell.id) if backend is not None and volume is None else []
        unrecorded = [v for v in held if volume is None or v != volume.id]
        if volume is not None:
            steps.append(Step(S.DELETE_VOLUME, {"volume_id": volume.id}))
        for volume_id in unrecorded:
            steps.append(Step(S.DELETE_VOLUME, {"volume_id": volume_id}))
        sleep = cell.status.get("sleep", {})
        for checkpoint in dict.fromkeys(filter(None, (sleep.get("checkpointId"),
                                                      sleep.get("supersedes")))):
            steps.append(Step(S.DELETE_CHECKPOINT, {"checkpoint_id": checkpoint}))
        ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
        gate = None
        workspaces = ([volume.id] if volume is not None else []) + unrecorded
        if workspaces and backend is not None and conn is not None and kept is None:
            latest = objects.latest_taken_snapshot(conn, cell.id)
            since = latest[0] if latest else None
            if any(backend.workspace_changed_since(v, since) for v in workspaces):
                what = f"snapshot {latest[1]}" if latest else "no snapshot was ever taken"
                gate = Gate(0, f"the workspace changed since its last snapshot ({what}); "
                            "deleting it loses that work",
                            confirm_schema(cell.name, "the cell's name"))
        return Plan(cell, "delete", steps, backend_name, CellWork(ref), gate=gate)

    @staticmethod
    def _kept_workspace(cell: objects.ObjectRecord, volume: volumes.VolumeRecord | None,
                        conn: sqlite3.Connection | None, backend: Any, key: bytes
                        ) -> Step | None:
        """A pruned cell's safety snapshot step (store/prunes.py): its workspace is kept for
        the prune's keep time. None when the deletion is not a prune that keeps, there is no
        workspace, or the safety snapshot was already recorded (an attempt that crashed)."""
        kept = prunes.of(cell)
        if kept is None or volume is None or conn is None or backend is None \
                or not backend.volume_exists(volume.id):
            return None
        if objects.get(conn, "Snapshot", kept.safety_id, include_deleted=True) is not None:
            return None
        return prune_keep.step(cell, kept, key)

    def _judge_image(self, ctx: Context, cell: objects.ObjectRecord, backend: Backend,
                     observed: Observed, *, creating: bool) -> tuple[bool, bool] | Blocked:
        """(pull the image first?, recreate the runtime because its image moved?) by
        spec.imagePullPolicy, or Blocked when the image may not be pulled and is missing.

        Only `Always` asks anything of a settled cell (its registry, for the digest it serves
        now); the other policies look at the engine only when a runtime is about to be made.
        """
        image = cell.spec.get("image")
        if (not backend.capabilities.pulls_images or not isinstance(backend, Pulling)
                or not isinstance(image, str)):
            return False, False
        policy = images.policy_of(cell.spec)
        if policy != images.PullPolicy.ALWAYS and not creating:
            return False, False
        try:
            state = backend.image_state(image, check_registry=policy == images.PullPolicy.ALWAYS)
        except BackendError as exc:
            self._write_blocked(ctx, cell, errors.condition_reason(exc, "ObserveFailed"),
                                f"looking up the cell's image failed: {exc}")
            return Blocked(exc)
        if policy == images.PullPolicy.NEVER:
            if state.present:
                return False, False
            refused = ImageNotFound(
                f"image {image} is not on the engine and spec.imagePullPolicy is Never; load "
                f"it (`docker pull {image}`, `docker load`, or `devcell image build-base` for "
                "the base image) or let DevCell pull it (imagePullPolicy: IfNotPresent)")
            self._write_blocked(ctx, cell, refused.reason or "ImageNotFound", str(refused))
            return Blocked(refused)
        if policy == images.PullPolicy.IF_NOT_PRESENT:
            return not state.present, False
        if creating or state.current is False:
            return True, not creating  # Always: a new runtime, or a digest that moved
        if state.current is None:
            logger.bind(kind=KIND, name=cell.name).warning(
                "cannot ask the registry of {} for its digest; the cell keeps its image: {}",
                image, state.check_error)
            return False, False
        if cell.spec.get("features"):
            return False, False  # the runtime's image is the one built on it, not it
        seen = observed.detail.get("image_id")
        return False, bool(seen and state.image_id and seen != state.image_id)

    def _sidecar_pulls(self, ctx: Context, cell: objects.ObjectRecord, backend: Backend
                       ) -> list[Step] | Blocked:
        """A pull-image step for each sidecar image the engine lacks (as the cell's own
        image with IfNotPresent), before the runtime is made."""
        named = [(str(s["name"]), s["image"]) for s in cell.spec.get("sidecars") or []
                 if isinstance(s.get("image"), str)]
        if not named or not backend.capabilities.pulls_images or not isinstance(
                backend, Pulling):
            return []
        steps: list[Step] = []
        for name, image in named:
            try:
                present = backend.image_state(image, check_registry=False).present
            except BackendError as exc:
                self._write_blocked(ctx, cell, errors.condition_reason(exc, "ObserveFailed"),
                                    f"looking up the image of sidecar {name} failed: {exc}")
                return Blocked(exc)
            if not present and image not in {s.args["image"] for s in steps}:
                steps.append(Step(S.PULL_IMAGE, {"image": image, "sidecar": name}))
        return steps

    def _judge_build(self, ctx: Context, cell: objects.ObjectRecord, backend: Backend,
                     ref: CellRef) -> builds.Wanted | Blocked:
        """The image spec.build and spec.features name now (builds.wanted), or Blocked when
        the context cannot be read or leads where it may not, a feature cannot be fetched
        or asks what the configuration does not allow, or the backend cannot build."""
        try:
            return builds.wanted(backend, ref, source=cell.source,
                                 state_dir=Path(ctx.db.state_dir))
        except BackendError as exc:
            self._write_blocked(ctx, cell, errors.condition_reason(exc, "ImageBuildFailed"),
                                str(exc))
            return Blocked(exc)

    @staticmethod
    def _port_held(conn: sqlite3.Connection, cell: objects.ObjectRecord,
                   observed: Observed) -> str:
        """Why a cell whose runtime is still to be made must wait: a cell being deleted (a
        prune moved the port to this one) still publishes one of its host ports. Admission
        lets the newcomer in; starting it before the old cell is gone would be refused."""
        if observed.exists or not security.published(cell.spec):
            return ""
        holders = [name for name, other in objects.cells_publishing_ports(conn).items()
                   if other.deleting and name != cell.name
                   and any(security.port_clashes(cell.spec, {name: other.spec}))]
        if not holders:
            return ""
        return (f"a host port of this cell is still published by cell {holders[0]}, which "
                "is being deleted; the cell is made once that deletion frees the port")

    def _wait(self, ctx: Context, cell: objects.ObjectRecord, reason: str, message: str,
              after: float = 1.0) -> Wait:
        self._write_blocked(ctx, cell, reason, message)
        return Wait(reason, message, requeue_after=after)

    def _asked(self, ctx: Context, cell: objects.ObjectRecord, steps: list[Step],
               desired: str) -> tuple[list[Step], str]:
        """The steps a user's ask needs (store/asks.py): rerun the hooks, restart the cell's
        services or one of them. A runtime this plan creates runs its hooks anyway, and one
        it starts starts its services: those asks are moot and cleared by that step."""
        if not cell.status.get("asked"):
            return [], ""
        from devcell.store import asks  # only for a cell someone asked something of

        asked = asks.of(cell)
        if desired != "Running":
            with ctx.db.write() as conn:  # a cell that will not run has nothing to restart
                asks.clear(conn, cell.id, asks.RERUN_HOOKS, asks.RESTART)
            return [], ""
        names = {step.name for step in steps}
        if S.CREATE in names:
            return [], ""
        out: list[Step] = []
        action = ""
        if asks.RERUN_HOOKS in asked:
            out.append(Step(S.RERUN_HOOKS))
            action = "rerun-hooks"
        restart = asked.get(asks.RESTART)
        if restart is not None and not names & {S.START, S.RESTORE_MACHINE}:
            if restart.get("service"):
                out.append(Step(S.RESTART_SERVICE, {"service": restart["service"]}))
            else:
                out += [Step(S.STOP), Step(S.START)]
            action = action or "restart"
        return out, action

    def _crash_backoff(self, ctx: Context, cell: objects.ObjectRecord, observed: Observed,
                       stale: bool) -> Wait | None:
        """A runtime DevCell started that has died: count the death (once), and hold the
        restart while its back-off runs (crashloop), unless a user asked for it."""
        restarts = cell.status.get("restarts")
        if (not restarts or stale or not observed.exists or observed.running
                or cell.observed_generation != cell.generation):
            return None
        now = time.time()
        if not restarts.get("dead"):
            restarts = crashloop.died(restarts, now)
            self._record_death(ctx, cell, restarts, observed)
        wait = float(restarts["retryAt"]) - now
        if wait <= 0 or ctx.trigger in crashloop.USER_TRIGGERS:
            return None
        return self._wait(ctx, cell, crashloop.REASON,
                          f"back-off {crashloop.delay(int(restarts['deaths'])):.0f}s restarting "
                          f"its runtime, which died {restarts['deaths']} times in a row "
                          f"(`devcell cell start {cell.name}` restarts it now)", after=wait)

    def _record_death(self, ctx: Context, cell: objects.ObjectRecord, restarts: dict[str, Any],
                      observed: Observed) -> None:
        state = observed.detail.get("state") or "stopped"
        message = f"its runtime died behind DevCell's back ({state}); restarting it"
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is None:
                return
            status = dict(fresh.status, restarts=restarts, message=message)
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", "RuntimeDied", message)
            objects.write_status(conn, fresh, phase=Phase.PENDING, status=status,
                                 observed_generation=fresh.observed_generation)
            events.record(conn, kind=KIND, object_id=cell.id, name=cell.name,
                          reason="RuntimeDied", message=message, type="Warning")
        cell.phase, cell.status = fresh.phase, fresh.status
        cell.resource_version = fresh.resource_version

    def _write_blocked(self, ctx: Context, cell: objects.ObjectRecord, reason: str,
                       message: str) -> None:
        status = dict(cell.status)
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "False", reason, message)
        status["message"] = message
        phase = Phase.PENDING if cell.phase in (Phase.PENDING, "") else cell.phase
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is None:
                return
            changed = objects.write_status(conn, fresh, phase=phase, status=status,
                                           observed_generation=fresh.observed_generation)
            if changed and reason != (cell.condition("Ready") or {}).get("reason"):
                events.record(conn, kind=KIND, object_id=cell.id, name=cell.name,
                              reason=reason, message=message, type="Warning")

    def _write_unknown(self, ctx: Context, cell: objects.ObjectRecord, message: str) -> None:
        """Phase Unknown, with the cluster's reason (status.nodeDown, Ready False NodeDown)."""
        status = dict(cell.status, nodeDown=message, message=message)
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "False", "NodeDown", message)
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is None:
                return
            changed = objects.write_status(conn, fresh, phase=Phase.UNKNOWN, status=status,
                                           observed_generation=fresh.observed_generation)
            if changed and fresh.phase != Phase.UNKNOWN:
                events.record(conn, kind=KIND, object_id=cell.id, name=cell.name,
                              reason="NodeDown", message=message, type="Warning")

    def _write_settled(self, ctx: Context, cell: objects.ObjectRecord, observed: Observed,
                       *, built: str | None = None,
                       sidecars: dict[str, str] | None = None) -> None:
        """Ready, as observed; `built`: the tag the runtime runs, kept for `apply`/`diff`
        (`sidecars`: its built sidecars' tags, by name)."""
        caps = ctx.backend(cell.extra["backend"]).capabilities
        verdict = None
        if holds.desired_state(cell) == "Running" and observed.running:
            verdict = services.judge(cell.name, cell.spec, observed.detail.get("services"),
                                     observed.detail.get("sidecars", [])
                                     if cell.spec.get("sidecars") else None)
        status = self._ready_status(cell, dict(cell.status), caps, verdict)
        status.pop("nodeDown", None)  # its node is back
        if observed.detail.get("node"):  # a cluster's: where the cell's workspace is
            status["node"] = str(observed.detail["node"])
        if built is not None:
            status = builds.with_recorded(status, built)
        if sidecars:
            status = builds.with_sidecars_recorded(status, sidecars)
        phase = _phase_for(holds.desired_state(cell))
        if (phase, status, cell.generation) == (cell.phase, cell.status, cell.observed_generation):
            return  # nothing to write: the common case on a re-apply
        with ctx.db.write() as conn:
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is not None and not fresh.deleting:
                objects.write_status(conn, fresh, phase=phase, status=status,
                                     observed_generation=fresh.generation)

    def _ready_status(self, cell: objects.ObjectRecord, status: dict[str, Any],
                      caps: Capabilities, verdict: services.Verdict | None = None
                      ) -> dict[str, Any]:
        """The status of a cell its reconcile settled: Ready, unless its dotfiles, its
        postCreate hooks or its services (`verdict`, as observed) say otherwise."""
        state = holds.desired_state(cell)
        message = {
            "Running": "cell is running",
            "Stopped": "cell is stopped; its workspace is kept" if caps.workspace_files else
                       "cell is stopped",
            "Sleeping": _asleep(caps, status.get("sleep", {})),
        }[state]
        status["conditions"] = objects.set_condition(
            status.get("conditions", []), "Ready", "True", state, message)
        for key in ("message", "nextRetryAt", "retries", "failedGeneration", "drifted",
                    "rebuild"):
            status.pop(key, None)
        failed = dotfiles.not_ready(cell.spec, status) if state == "Running" else None
        if failed is not None:  # running and reachable, not Ready: the developer fixes it
            status["conditions"] = objects.set_condition(
                status["conditions"], "Ready", "False", dotfiles.FAILED, failed)
            status["message"] = failed
        if state != "Running":
            status.pop("services", None)
            status.pop("sidecars", None)
        elif not (verdict is None or (dotfiles.not_ready(cell.spec, status)
                                      or post_create.not_ready(cell.name, status))):
            status = services.with_verdict(status, verdict, conditions=objects.set_condition)
        hooked = post_create.not_ready(cell.name, status) if state == "Running" else None
        if hooked is not None:  # running and enterable, its services held: not Ready
            status["conditions"] = objects.set_condition(
                status["conditions"], "Ready", "False", post_create.FAILED, hooked)
            status["message"] = hooked
        return status

    # -- execution ---------------------------------------------------------------------------

    def run_step(self, ctx: Context, plan: Plan, step: Step) -> Outputs:
        if step.name in (S.EXPIRE, S.SCHEDULE_SNAPSHOT):  # records only, no backend call
            return {**step.args, "at": retention.stamp(ctx.clock())}
        owner = plan.object.extra.get("owner")
        ref = _work(plan).ref.replace(op_id=ctx.current_op,
                                      owner=owner if isinstance(owner, str) else None)
        if step.name == S.INSTALL_DOTFILES:
            # imported here: a cell's sleep, start or snapshot does without it (its git
            # source, a dataclass and the exec protocol's sockets: ~5-14 ms of start-up)
            from devcell.backends import dotfiles as backends_dotfiles

            return backends_dotfiles.install(ctx.backend(plan.backend), ref,
                                             state_dir=Path(ctx.db.state_dir))
        if step.name == S.HOST_INITIALIZE:
            return host_hooks.run(ref, step, state_dir=Path(ctx.db.state_dir),
                                  others=objects.cells_with_host_mounts(ctx.db.conn))
        handler = _STEPS.get(step.name)
        if handler is None:
            raise BackendError(f"cell controller has no step {step.name!r}")
        outputs = handler(ctx.backend(plan.backend), ref, step)
        if step.name == S.DELETE and plan.action == "delete":
            activity.forget(ctx.db.state_dir, ref.id)  # its idle clock goes with it
        return outputs

    def after_step(self, conn: sqlite3.Connection, plan: Plan, step: Step, outputs: Outputs
                   ) -> None:
        cell = plan.object
        if step.name == S.QUIESCE:
            frozen.mark(conn, cell.id)
        elif step.name in (S.RESUME, S.STOP, S.DELETE):  # no longer frozen: thawed or gone
            frozen.clear(conn, cell.id)
        if step.name == S.EXPIRE:
            retention.expire(conn, str(outputs["snapshot_id"]),
                             retention.parse_time(str(outputs["at"])))
        elif step.name == S.SCHEDULE_SNAPSHOT:
            retention.schedule(conn, cell.id, str(outputs["name"]), str(outputs["slot"]))
        if step.name in (S.CREATE, S.START, S.RERUN_HOOKS, S.RESTART_SERVICE):
            from devcell.store import asks  # the steps that carry an ask out, or make it moot
        if step.name == S.CREATE:
            dotfiles.forget(conn, cell.id)
            post_create.forget(conn, cell.id)
            asks.clear(conn, cell.id, asks.RERUN_HOOKS, asks.RESTART)
        elif step.name in (S.START, S.RERUN_HOOKS):
            post_create.record(conn, cell.id, outputs)
            if outputs.get("node"):  # a cluster's: the node the cell's workspace is on
                _record_node(conn, cell.id, str(outputs["node"]))
            asks.clear(conn, cell.id, asks.RESTART if step.name == S.START
                       else asks.RERUN_HOOKS)
        elif step.name == S.RESTART_SERVICE:
            asks.clear(conn, cell.id, asks.RESTART)
        elif step.name == S.INSTALL_DOTFILES:
            dotfiles.record(conn, cell.id, step, outputs)
        if step.name in (S.CREATE_VOLUME, S.ADOPT_VOLUME) and step.args.get("record"):
            volumes.record_created(
                conn, volume_id=step.args["volume_id"], cell_id=cell.id, name=f"{cell.name}-workspace",
                mount_path=cell.spec.get("workspace", {}).get("mountPath", "/workspace"),
                from_snapshot_id=step.args["from_checkpoint"],
                backend_ref=str(outputs.get("volume") or ""),
            )
        elif step.name == S.DELETE_VOLUME:
            volumes.record_deleted(conn, step.args["volume_id"])
        elif step.name == S.DELETE_CHECKPOINT:
            fresh = objects.get(conn, KIND, cell.id)
            sleep = dict((fresh.status if fresh else {}).get("sleep", {}))
            if fresh is not None and sleep.get("supersedes") == step.args["checkpoint_id"]:
                sleep.pop("supersedes")
                taken = _work(plan).sleep
                if taken is not None:
                    taken.pop("supersedes", None)
                objects.write_status(conn, fresh, phase=fresh.phase,
                                     status=dict(fresh.status, sleep=sleep),
                                     observed_generation=fresh.observed_generation)
        if step.name == S.CHECKPOINT and step.args.get("pruned"):
            prune_keep.record(conn, cell, step.args, outputs)
            return
        if step.name == S.CHECKPOINT and step.args.get("safety"):
            restoring.record_safety(conn, cell, step.args, outputs)
            return
        self.note_outputs(plan, step, outputs)
        if step.name in (S.CHECKPOINT, S.SAVE_MACHINE):
            # Record the sleep checkpoint now, not at finish(): a crash later in the plan must
            # not leave a checkpoint the database does not know (a later delete removes it).
            fresh = objects.get(conn, KIND, cell.id)
            if fresh is not None:
                sleep = dict(_work(plan).sleep or {})
                old = fresh.status.get("sleep", {})
                superseded = old.get("supersedes") or old.get("checkpointId")
                if superseded and superseded != sleep["checkpointId"]:
                    sleep["supersedes"] = superseded  # deleted by a later step (or plan)
                _work(plan).sleep = sleep
                status = dict(fresh.status, sleep=sleep)
                objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                                     observed_generation=fresh.observed_generation)

    def note_outputs(self, plan: Plan, step: Step, outputs: Outputs) -> None:
        if step.name == S.KEEP_ROOTFS:
            _work(plan).rootfs = {"kept": bool(outputs.get("kept")), "at": now(),
                                  **({"why": str(outputs["why"])} if outputs.get("why")
                                     else {})}
        if step.name in (S.CHECKPOINT, S.SAVE_MACHINE) and not step.args.get("safety"):
            sleep: dict[str, Any] = {"checkpoint": outputs.get("checkpoint"),
                                     "checkpointId": step.args["checkpoint_id"],
                                     "consistency": outputs.get("consistency"), "at": now()}
            if step.name == S.SAVE_MACHINE:
                sleep["machine"] = True
            elif step.args.get("rootfs"):
                sleep["rootfs"] = True  # the stopped runtime keeps its root filesystem
            _work(plan).sleep = sleep

    def rebuild_plan(self, ctx: Context, data: dict[str, Any]) -> Plan | None:
        cell = objects.get(ctx.db.conn, KIND, data["objectId"])
        if cell is None:
            return None
        steps = [Step.from_dict(s) for s in data["steps"]]
        volume = volumes.for_cell(ctx.db.conn, cell.id)
        volume_id = volume.id if volume else next(
            (s.args["volume_id"] for s in steps if "volume_id" in s.args), None)
        spec = cell.spec
        made = next((s.args for s in steps if s.name == S.CREATE), {})
        if made.get("sidecarImages"):  # the built sidecars' images, as decide named them
            spec = with_sidecar_images(spec, dict(made["sidecarImages"]))
        ref = CellRef(cell.id, cell.name, spec, volume_id)
        return Plan(cell, data["action"], steps, data["backend"], CellWork(ref))

    def finish(self, conn: sqlite3.Connection, plan: Plan, *, error: str | None,
               reason: str = "StepFailed") -> None:
        fresh = objects.get(conn, KIND, plan.object.id, include_deleted=True)
        if fresh is None:
            return
        if plan.action == restoring.ACTION:
            restoring.finished(conn, fresh, plan, error)
            fresh = objects.get(conn, KIND, plan.object.id)
            if fresh is None:
                return
        if plan.action == "delete" and error is None:
            objects.mark_deleted(conn, fresh)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name, reason="Deleted",
                          message="cell torn down; its snapshots remain")
            return
        status = dict(fresh.status)
        if error is not None and reason == "Interrupted":
            # Ctrl-C or SIGTERM: the plan's compensations put the runtime back as it was (a
            # stopped cell started, a frozen one resumed), so the phase stays what it was and
            # the generation is not marked failed: the next reconcile plans afresh.
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", reason, error)
            status["message"] = error
            objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                                 observed_generation=fresh.observed_generation)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                          reason="Interrupted", message=error, type="Warning")
            return
        if error is not None:
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", reason, error)
            status["message"] = error
            status["failedGeneration"] = plan.object.generation
            objects.write_status(conn, fresh, phase=Phase.FAILED, status=status,
                                 observed_generation=fresh.observed_generation)
            events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                          reason=f"{plan.action.capitalize()}Failed", message=error,
                          type="Warning")
            return
        started = S.START in plan.ran or S.RESTORE_MACHINE in plan.ran
        status = self._ready_status(fresh, status, backends.capabilities(plan.backend),
                                    services.starting(fresh.name, fresh.spec) if started
                                    else _kept_verdict(fresh))
        work = _work(plan)
        if work.sleep is not None:
            status["sleep"] = work.sleep
        if work.rootfs is not None:
            status["rootfs"] = work.rootfs  # describe says it; the event too
        if started and not (plan.action == "start" and fresh.phase == Phase.RUNNING):
            # When DevCell brought it up (idle time counts from here); a runtime that died
            # on its own and was started again is no new start: a cell cannot reset its
            # idle clock by crashing, or by flapping its readiness.
            status["startedAt"] = now()
        if plan.action == "wake":
            sleep = status.get("sleep") or {}
            status["lastStart"] = {"at": now(), "from": "sleep",
                                   "restored": S.RESTORE_MACHINE in plan.ran,
                                   "note": _woken(plan, sleep, work.rootfs)}
            if sleep.get("restoreFailed"):
                status["sleep"] = {k: v for k, v in sleep.items() if k != "restoreFailed"}
        status["runtime"] = {"backend": plan.backend, "ref": f"{plan.backend}://{fresh.id}"}
        made_from = next((str(step.args["image"]) for step in plan.steps
                          if step.name == S.CREATE and step.args.get("image")), None)
        if made_from is not None and S.CREATE in plan.ran:
            status = builds.with_recorded(status, made_from)  # apply and diff compare it
        made_sidecars = next((dict(step.args["sidecarImages"]) for step in plan.steps
                              if step.name == S.CREATE and step.args.get("sidecarImages")), None)
        if made_sidecars and S.CREATE in plan.ran:
            status = builds.with_sidecars_recorded(status, made_sidecars)
        phase = _phase_for(holds.desired_state(fresh))
        if phase != Phase.RUNNING:
            status.pop("restarts", None)  # stopped by DevCell: no death to count
        elif S.START in plan.ran or S.RESTORE_MACHINE in plan.ran:
            status["restarts"] = crashloop.started(status.get("restarts"), time.time())
        objects.write_status(conn, fresh, phase=phase, status=status,
                             observed_generation=plan.object.generation)
        reason = {"create": "Created", "fork": "Forked", "update": "Updated", "start": "Started",
                  "stop": "Stopped", "sleep": "Slept", "wake": "Woken",
                  "retain": "SnapshotsExpired", "schedule": "SnapshotScheduled",
                  "rerun-hooks": "HooksRerun", "restart": "Restarted",
                  }.get(plan.action, "Synced")
        if plan.action in (restoring.ACTION, "dotfiles"):
            return  # its event (Restored; Dotfiles*) is written by its own step
        done = f"{plan.action} done: {', '.join(plan.ran or plan.step_names)}"
        if plan.action == "sleep":  # what the sleep kept, said where it is looked for
            done += f"; {_asleep(backends.capabilities(plan.backend), status.get('sleep') or {})}"
        elif plan.action == "wake":
            done += f"; {status['lastStart']['note']}"
        elif work.rootfs is not None:
            done += f"; {_recreated(work.rootfs)}"
        events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name, reason=reason,
                      message=done)


def _kept_verdict(cell: objects.ObjectRecord) -> services.Verdict | None:
    """What the services said when last observed, for a plan that did not start them (a
    retention or dotfiles plan must not make a crash-looping cell Ready)."""
    ready = cell.condition("Ready") or {}
    view = cell.status.get("services")
    if not isinstance(view, dict):
        return None
    reason = ready.get("reason") if ready.get("reason") in services.REASONS else None
    return services.Verdict(reason, str(ready.get("message") or ""), view)


def _saved_machine(backend: Backend, checkpoint_id: str) -> bool:
    """Whether the backend holds this sleep's saved machine (memory and disk)."""
    found = backend.find_checkpoint(checkpoint_id)
    return found is not None and found.consistency == Consistency.MACHINE


def _woken(plan: Plan, sleep: dict[str, Any], rootfs: dict[str, Any] | None) -> str:
    """What a wake brought back, in words (lastStart.note; describe shows it)."""
    if S.RESTORE_MACHINE in plan.ran:
        return "resumed from the saved machine: processes and memory came back"
    if sleep.get("rootfs") and S.CREATE not in plan.ran:
        return ("started its kept runtime: the root filesystem (what was installed) and the "
                "workspace as they were; processes and memory were not restored")
    if rootfs is not None:
        return (f"made again (its spec changed while it slept): {_recreated(rootfs)}; the "
                "workspace is kept; processes and memory were not restored")
    if sleep.get("rootfs"):
        return ("made again (its container was gone): the root filesystem starts fresh from "
                "the image, the workspace is kept; processes and memory were not restored")
    cold = "cold boot from the persisted workspace; processes and memory were not restored"
    if sleep.get("restoreFailed"):  # api/wake.py set the saved machine aside
        return f"{cold} (resuming the saved machine failed: {sleep['restoreFailed']})"
    return cold


def _recreated(rootfs: dict[str, Any]) -> str:
    """What a recreate did with the root filesystem, in words."""
    if rootfs.get("kept"):
        return "the root filesystem (what was installed) was kept across the recreate"
    return str(rootfs.get("why") or "the root filesystem starts fresh from the image")


def _asleep(caps: Capabilities, sleep: dict[str, Any]) -> str:
    """What a sleeping cell truly keeps, by what its backend can do (never more)."""
    if sleep.get("machine"):
        return "cell is asleep: memory and disk saved; its processes resume where they were"
    if sleep.get("rootfs"):
        return ("cell is asleep: workspace checkpointed, root filesystem kept (its stopped "
                "runtime: what was installed stays); processes and memory released")
    if caps.workspace_files:
        return "cell is asleep: workspace checkpointed, processes and memory released"
    return ("cell is asleep: this backend keeps control-plane records only (no files, "
            "processes or memory)")


def _record_node(conn: sqlite3.Connection, cell_id: str, node: str) -> None:
    """status.node: where the cell runs on a cluster (`get cells -o wide`'s NODE), recorded
    with the step that placed (and pinned) it."""
    fresh = objects.get(conn, KIND, cell_id)
    if fresh is not None and fresh.status.get("node") != node:
        objects.write_status(conn, fresh, phase=fresh.phase, status=dict(fresh.status, node=node),
                             observed_generation=fresh.observed_generation)


def _work(plan: Plan) -> CellWork:
    assert isinstance(plan.work, CellWork), plan.work
    return plan.work


def with_image(spec: dict[str, Any], image: str,
               runtime: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec a runtime is made from when spec.build or spec.features names its image: the
    built tag as spec.image, so the runtime hash (and so the cell) changes exactly when the
    build's digest does; and what the features ask of the container (`runtime`,
    feature_builds.with_runtime)."""
    if runtime:
        from devcell.controllers import feature_builds

        spec = feature_builds.with_runtime(spec, runtime)
    return {**spec, "image": image}


def _built_args(wanted: builds.Wanted) -> dict[str, Any]:
    """What create and keep-rootfs carry of a built cell, for a resumed plan."""
    return {"image": wanted.tag, **({"runtime": wanted.runtime} if wanted.runtime else {})}


def built_sidecars(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The sidecars whose image DevCell builds (spec.sidecars[].build)."""
    return [s for s in spec.get("sidecars") or [] if s.get("build") is not None]


def sidecar_ref(ref: CellRef, sidecar: dict[str, Any] | str) -> CellRef:
    """What a sidecar's build is judged, built and removed as: named CELL.SIDECAR (its own
    tags devcell-build/<state>/CELL.SIDECAR:<digest>, which a build of the cell never
    removes: no cell name holds a dot), with the sidecar's build as spec.build."""
    name = sidecar if isinstance(sidecar, str) else str(sidecar["name"])
    spec = {} if isinstance(sidecar, str) else {"build": sidecar["build"]}
    return ref.replace(name=f"{ref.name}.{name}", spec=spec)


def with_sidecar_images(spec: dict[str, Any], tags: dict[str, str]) -> dict[str, Any]:
    """The spec a runtime is made from when sidecars are built: each built sidecar's tag as
    its image (so the runtime hash changes exactly when a build's digest does)."""
    return {**spec, "sidecars": [
        {**{k: v for k, v in s.items() if k != "build"}, "image": tags[str(s["name"])]}
        if str(s.get("name")) in tags else s for s in spec.get("sidecars") or []]}


def _building(backend: Backend) -> Building:
    return builds.building(backend)


def _build_image(b: Backend, ref: CellRef, step: Step) -> Outputs:
    sidecar = step.args.get("sidecar")
    return builds.build_image(b, ref if sidecar is None else sidecar_ref(ref, str(sidecar)),
                              step.args)


def _delete_images(b: Backend, ref: CellRef, step: Step) -> Outputs:
    sidecar = step.args.get("sidecar")
    return builds.delete_images(
        b, ref if sidecar is None else sidecar_ref(ref, str(sidecar)))


def _create(b: Backend, ref: CellRef, step: Step) -> Outputs:
    image = step.args.get("image")
    if image is not None:
        ref = ref.replace(spec=with_image(ref.spec, image, step.args.get("runtime")))
    if step.args.get("sidecarImages"):
        ref = ref.replace(spec=with_sidecar_images(
            ref.spec, dict(step.args["sidecarImages"])))
    if step.args.get("rootfs"):
        return _keeping(b).create_from_kept(ref, step.args["runtime_hash"])
    return b.create(ref, step.args["runtime_hash"])


def _keeping(backend: Backend) -> KeepsRootfs:
    if not backend.capabilities.keeps_rootfs or not isinstance(backend, KeepsRootfs):
        raise CapabilityMissing(f"the {backend.name} backend cannot keep a root filesystem")
    return backend


def _keep_rootfs(b: Backend, ref: CellRef, step: Step) -> Outputs:
    image = step.args.get("image")
    if image is not None:
        ref = ref.replace(spec=with_image(ref.spec, image, step.args.get("runtime")))
    return _keeping(b).keep_rootfs(ref)


def _delete(b: Backend, ref: CellRef, step: Step) -> Outputs:
    outputs = b.delete(ref)
    if step.args.get("forget_caches") and isinstance(b, KeepsCellCaches):
        b.forget_cell_caches(ref)
    return outputs


def _machine(backend: Backend) -> MachineState:
    if not backend.capabilities.memory_state or not isinstance(backend, MachineState):
        raise CapabilityMissing(f"the {backend.name} backend cannot save a machine's memory")
    return backend


def _supervising(backend: Backend) -> Supervising:
    if not isinstance(backend, Supervising):
        raise CapabilityMissing(f"the {backend.name} backend cannot rerun hooks or restart "
                                "one service")
    return backend


def _pulling(backend: Backend) -> Pulling:
    if not backend.capabilities.pulls_images or not isinstance(backend, Pulling):
        raise CapabilityMissing(f"the {backend.name} backend cannot pull images")
    return backend


StepHandler = Callable[[Backend, CellRef, Step], Outputs]
_STEPS: dict[StepName, StepHandler] = {
    S.CREATE_VOLUME: lambda b, ref, step: b.create_volume(
        ref, step.args["volume_id"], from_checkpoint=step.args["from_checkpoint"]),
    S.ADOPT_VOLUME: lambda b, ref, step: {"volume": step.args["volume_id"], "adopted": True},
    S.DELETE_VOLUME: lambda b, ref, step: b.delete_volume(step.args["volume_id"]),
    S.DELETE_CHECKPOINT: lambda b, ref, step: b.delete_checkpoint(step.args["checkpoint_id"]),
    S.PULL_IMAGE: lambda b, ref, step: _pulling(b).pull_image(ref, step.args["image"]),
    S.DELETE_IMAGES: _delete_images,
    S.BUILD_IMAGE: _build_image,
    S.CREATE: _create,
    S.START: lambda b, ref, step: b.start(ref),
    S.RERUN_HOOKS: lambda b, ref, step: _supervising(b).rerun_hooks(ref),
    S.RESTART_SERVICE: lambda b, ref, step: _supervising(b).restart_service(
        ref, step.args["service"]),
    S.STOP: lambda b, ref, step: b.stop(ref),
    S.KEEP_ROOTFS: _keep_rootfs,
    S.DELETE: lambda b, ref, step: _delete(b, ref, step),
    S.QUIESCE: lambda b, ref, step: b.quiesce(ref),
    S.RESUME: lambda b, ref, step: b.resume(ref),
    S.CHECKPOINT: lambda b, ref, step: b.checkpoint(ref, step.args["checkpoint_id"]).outputs(),
    S.SAVE_MACHINE: lambda b, ref, step: _machine(b).save_machine(
        ref, step.args["checkpoint_id"]).outputs(),
    S.RESTORE_MACHINE: lambda b, ref, step: _machine(b).restore_machine(
        ref, step.args["checkpoint_id"]),
    S.RESTORE_WORKSPACE: lambda b, ref, step: restoring.restore_step(b, ref, step.args),
}
"""Which backend call each step is: the table the executor's steps are dispatched through."""
