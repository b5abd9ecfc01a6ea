"""Container cells on a swarm: each cell a service of one task the swarm schedules
(docs/cluster.md), used instead of `backend.ContainerBackend` when the state directory's
configuration names a manager's engine (`cluster.engine`).

Why a service and not a container on a node DevCell picks: the swarm's scheduler places the
task from its own view of free resources and constraints (`spec.placement`, reservations from
`spec.resources`), keeps it off cordoned and drained nodes, and restarts it after a failure.
DevCell adds one rule of its own: once the cell's workspace exists on a node, the cell is
pinned there (a `node.id==` constraint, recorded beside the volume), so a restart never comes
up on another node with an empty workspace.

Where each byte lives: the workspace is an engine volume of the node that runs the task, made
by that node's engine when the task first mounts it (labelled as DevCell's); the supervisor
script reaches the node as a swarm config. The manager's state directory keeps only records
(`cluster/volumes/<id>.json`: which cell, which node); nothing here reads or writes a node's
disk. Emptying a deleted cell's workspace is a job pinned to its node.

What needs a node's own disk or engine is refused here, naming the field, until the node-side
operations exist (issue 25 part 2): checkpoints and forks, exec, seeded or live workspaces,
sidecars, engine volumes, host mounts, bridge networks, postCreate/postStart hooks, secret
environment values, a user other than root.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import security
from devcell.backends import supervisor
from devcell.backends.base import (
    Capabilities,
    CellRef,
    CheckpointInfo,
    Consistency,
    Observed,
    Outputs,
    Owned,
    OwnedKind,
)
from devcell.backends.container import spec as container_spec
from devcell.backends.container.cluster import Manager
from devcell.backends.container.labels import CELL, CELL_ID, MANAGED, RUNTIME_HASH, STATE, VOLUME
from devcell.backends.container.layout import Layout
from devcell.backends.host.ids import safe_id, state_hash
from devcell.errors import (
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRefused,
    ConfigError,
)
from devcell.log import logger

NODE = "dev.devcell.node"
"""On a cell's service: the node its workspace is on (the id of its node.id constraint)."""
WIPE = "dev.devcell.wipe"
"""On a job that empties a deleted cell's workspace on its node: the volume id."""
WIPE_IMAGE = "devcell/busybox:latest"
"""The job's image: DevCell's base image, which every node must hold (docs/cluster.md)."""
START_TIMEOUT_S = 120.0
UNPLACED_S = 10.0
"""How long a start waits on a task the scheduler finds no node for before it says why."""
POLL_S = 0.1
RESTART_DELAY_NS = 1_000_000_000
FAILED = ("failed", "rejected", "orphaned")
_CELL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def settings(state_dir: Path) -> Any:
    """The cluster the state directory controls, or None (single host)."""
    from devcell import config

    try:
        return config.load(state_dir).cluster
    except ConfigError as exc:
        raise BackendError(f"DevCell's configuration cannot be used: {exc}") from None


def manager_of(state_dir: Path) -> Manager:
    from devcell import config

    found = settings(state_dir)
    if found is None:
        raise BackendError("no cluster is configured (cluster.engine)")
    return Manager(found.socket, f"cluster.engine in {config.config_path(state_dir)}")


class Volumes:
    """The control plane's record of each cell workspace: which cell, and the node its
    engine volume is on once a task made it there (None before). One JSON file each under
    `<state>/cluster/volumes/`, written whole (temporary file and rename)."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "cluster" / "volumes"

    def path(self, volume_id: str) -> Path:
        return self.root / f"{safe_id('volume', volume_id)}.json"

    def read(self, volume_id: str) -> dict[str, Any] | None:
        try:
            found = json.loads(self.path(volume_id).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackendError(f"the record of volume {volume_id} cannot be read: {exc}") from None
        return found if isinstance(found, dict) else None

    def write(self, volume_id: str, record: dict[str, Any]) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.path(volume_id)
        temporary = target.with_name(f".{target.name}.tmp")
        temporary.write_text(json.dumps(record, sort_keys=True))
        os.replace(temporary, target)

    def remove(self, volume_id: str) -> None:
        self.path(volume_id).unlink(missing_ok=True)

    def all(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.glob("*.json")):
            record = self.read(entry.stem)
            if record is not None:
                out.append((entry.stem, record))
        return out


def engine_volume(owner: str, volume_id: str) -> str:
    """The engine's name of a workspace volume on its node (this state directory's)."""
    return f"devcell-{owner}-ws-{safe_id('volume', volume_id)}"


def service_name(owner: str, cell: CellRef) -> str:
    if not _CELL_NAME.fullmatch(cell.name):
        raise BackendRefused(f"refusing cell name {cell.name!r}: not a DNS-1123 label")
    tag = hashlib.sha256(f"{owner}/{safe_id('cell', cell.id)}".encode()).hexdigest()[:8]
    return f"devcell-{cell.name}-{tag}"


def unsupported(spec: dict[str, Any]) -> list[str]:
    """The fields of `spec` a cell on the swarm cannot have yet, each with why."""
    out = []
    why = {
        "sidecars": "sidecars share the cell container's network namespace on one engine",
        "volumes": "engine volumes of a cell are not placed with it yet",
        "mounts": "a host path names the disk of a node DevCell does not choose",
        "build": "an image built by the manager's engine is not on the nodes (push it to a "
                 "registry the nodes reach and name it in spec.image)",
        "dotfiles": "installing dotfiles needs exec into the cell",
    }
    for key, reason in why.items():
        if spec.get(key):
            out.append(f"spec.{key}: {reason}")
    hooks = spec.get("hooks") or {}
    for hook in ("postCreate", "postStart", "preCheckpoint", "postCheckpoint"):
        if hooks.get(hook):
            out.append(f"spec.hooks.{hook}: hooks run through exec into the cell")
    source = (spec.get("workspace") or {}).get("source")
    if source:
        out.append("spec.workspace.source: a seeded or live workspace is filled on the "
                   "manager's disk, not on the node")
    if (spec.get("workspace") or {}).get("from"):
        out.append("spec.workspace.from: a fork needs its snapshot on the node (issue 25)")
    network = spec.get("network") or {}
    if network.get("mode", "none") not in ("none", "host") or network.get("ports"):
        out.append("spec.network: a bridge network and published ports need an overlay "
                   "network; use mode none or host")
    if spec.get("user") not in (None, "root", "0", "0:0"):
        out.append("spec.user: a workspace volume made by a node's engine belongs to root")
    _, secret = supervisor.split_env(spec)
    if secret:
        out.append("spec.env: secret values would need a swarm secret")
    return out


class SwarmBackend:
    """Container cells as swarm services (module docstring)."""

    name = "container"
    capabilities = Capabilities(workspace_files=True, exec=False,
                                snapshot_consistency=Consistency.FILESYSTEM, parallel=8)

    def __init__(self, *, state_dir: Path) -> None:
        self.layout = Layout(state_dir)
        self.owner = state_hash(state_dir)
        self.manager = manager_of(state_dir)
        self.volumes = Volumes(state_dir)

    def close(self) -> None:
        pass

    # -- finding what is ours ----------------------------------------------------------------

    def _ours(self, **extra: str) -> dict[str, str]:
        return {MANAGED: "true", STATE: self.owner, **extra}

    def _service(self, cell: CellRef) -> dict[str, Any] | None:
        safe_id("cell", cell.id)
        found = [s for s in self.manager.services(self._ours(**{CELL_ID: cell.id}))
                 if _labels(s).get(STATE) == self.owner and _labels(s).get(CELL_ID) == cell.id
                 and not _labels(s).get(WIPE)]
        if len(found) > 1:
            raise BackendRefused(f"several services carry the labels of cell {cell.name}; "
                                 "remove the extras with docker service rm")
        return found[0] if found else None

    def list_owned(self) -> list[Owned]:
        out = [Owned(OwnedKind.CELL, _labels(s)[CELL_ID], _labels(s)[CELL_ID])
               for s in self.manager.services(self._ours())
               if _labels(s).get(CELL_ID) and not _labels(s).get(WIPE)]
        out += [Owned(OwnedKind.VOLUME, volume_id, str(record.get("cell_id") or ""))
                for volume_id, record in self.volumes.all()]
        return out

    # -- observe -----------------------------------------------------------------------------

    def observe(self, cell: CellRef) -> Observed:
        service = self._service(cell)
        if service is None:
            return Observed(exists=False)
        node = _labels(service).get(NODE)
        lost = _lost({node: self._node(node)} if node else {})
        return observed(service, self.manager.tasks_of([str(service["ID"])]), lost)

    def _node(self, node_id: str) -> dict[str, Any]:
        try:
            return self.manager.node(node_id)
        except BackendNotFound:
            return {"Status": {"State": "removed", "Message": "no longer in the swarm"}}

    # -- volumes -----------------------------------------------------------------------------

    def volume_exists(self, volume_id: str) -> bool:
        return self.volumes.read(volume_id) is not None

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs:
        """Recorded only: the node's engine makes the volume when the cell's task first
        mounts it, on whichever node the scheduler picks (pinned there after)."""
        if from_checkpoint is not None:
            raise BackendRefused(f"cell {cell.name}: a fork on a cluster needs its snapshot "
                                 "on the node, which is not built yet (issue 25)")
        problems = unsupported(cell.spec)
        if problems:
            raise BackendRefused(f"cell {cell.name} cannot run on the cluster yet: "
                                 + "; ".join(problems))
        if self.volumes.read(volume_id) is None:
            self.volumes.write(volume_id, {"cell_id": cell.id, "cell": cell.name, "node": None,
                                           "volume": engine_volume(self.owner, volume_id)})
        return {"volume": volume_id, "node": None, "storage": "node"}

    def volumes_of(self, cell_id: str) -> list[str]:
        return [v for v, record in self.volumes.all() if record.get("cell_id") == cell_id]

    def workspace_changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        return True  # not readable from the manager: a checkpoint would be taken (refused)

    def delete_volume(self, volume_id: str) -> Outputs:
        """The workspace emptied on its node by a job pinned there, then the record gone.
        The engine volume itself stays on the node, empty: only that node's engine can remove
        it (docs/cluster.md)."""
        record = self.volumes.read(volume_id)
        if record is None:
            return {"volume": volume_id}
        users = [s for s in self.manager.services(self._ours(**{VOLUME: volume_id}))
                 if not _labels(s).get(WIPE)]
        if users:
            raise BackendError(f"volume {volume_id} is still mounted by service "
                               f"{(users[0].get('Spec') or {}).get('Name')}; delete the cell "
                               "first")
        outputs: Outputs = {"volume": volume_id, "node": record.get("node")}
        if record.get("node"):
            outputs["wiped"] = self._wipe(volume_id, str(record["node"]), str(record["volume"]))
        self.volumes.remove(volume_id)
        return outputs

    def _wipe(self, volume_id: str, node: str, volume: str) -> bool:
        """A replicated job on `node` that empties the workspace volume (links not followed:
        `rm -rf` removes them, never what they name); True when it completed."""
        name = f"devcell-wipe-{self.owner[:8]}-{safe_id('volume', volume_id)}"[:63]
        labels = self._ours(**{WIPE: volume_id})
        for old in self.manager.services(labels):  # a wipe a crash left behind
            self.manager.remove_service(str(old["ID"]), "removing an earlier wipe job")
        spec = {
            "Name": name, "Labels": labels,
            "TaskTemplate": {
                "ContainerSpec": {
                    "Image": WIPE_IMAGE, "Labels": labels,
                    "Command": ["/bin/find", "/w", "-mindepth", "1", "-maxdepth", "1",
                                "-exec", "/bin/rm", "-rf", "--", "{}", "+"],
                    "Mounts": [{"Type": "volume", "Source": volume, "Target": "/w",
                                "VolumeOptions": {"NoCopy": True}}],
                    "CapabilityDrop": ["ALL"],
                    "CapabilityAdd": ["CAP_DAC_OVERRIDE", "CAP_FOWNER"],
                },
                "Placement": {"Constraints": [f"node.id=={node}"]},
                "RestartPolicy": {"Condition": "none"},
            },
            "Mode": {"ReplicatedJob": {"MaxConcurrent": 1, "TotalCompletions": 1}},
        }
        job = self.manager.create_service(spec, f"emptying volume {volume_id} on node {node}")
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            states: list[str] = []
            while time.monotonic() < deadline:
                tasks = self.manager.tasks_of([job])
                states = [str((t.get("Status") or {}).get("State")) for t in tasks]
                if "complete" in states:
                    return True
                failed = [t for t in tasks if (t.get("Status") or {}).get("State") in FAILED]
                if failed:
                    status = failed[0].get("Status") or {}
                    raise BackendError(f"emptying volume {volume_id} on node {node} failed: "
                                       f"{status.get('Err') or status.get('Message')}")
                time.sleep(POLL_S * 2)
            logger.bind(backend=self.name).warning(
                "volume {} on node {}: the job emptying it did not complete ({})", volume_id,
                node, states)
            return False
        finally:
            self.manager.remove_service(job, "removing the job that emptied a volume")

    # -- lifecycle ---------------------------------------------------------------------------

    def _policy(self) -> Any:
        from devcell import config

        try:
            return config.load(self.layout.state_dir).security
        except ConfigError as exc:
            raise BackendError(f"DevCell's configuration cannot be used: {exc}") from None

    def service_spec(self, cell: CellRef, runtime_hash: str, *, node: str | None,
                     config: tuple[str, str]) -> dict[str, Any]:
        """The service of `cell` (0 replicas: created, not started), from the same arguments
        and checks a container of the single host is made with."""
        problems = unsupported(cell.spec)
        if problems:
            raise BackendRefused(f"cell {cell.name} cannot run on the cluster yet: "
                                 + "; ".join(problems))
        if cell.volume_id is None:
            raise BackendRefused(f"cell {cell.name} has no workspace volume")
        name = service_name(self.owner, cell)
        policy = self._policy()
        kwargs = container_spec.create_kwargs(
            self.layout, name=name, cell_id=cell.id, cell_name=cell.name, spec=cell.spec,
            volume_id=None, runtime_hash=runtime_hash, op_id=cell.op_id, policy=policy)
        container_spec.check_security(self.layout, kwargs, policy)
        if kwargs.get("privileged") or kwargs.get("devices"):
            raise BackendRefused(f"cell {cell.name}: a privileged cell or host devices cannot "
                                 "run as a swarm service")
        options = [o for o in kwargs.get("security_opt") or [] if o != "no-new-privileges"]
        if options:
            raise BackendRefused(f"cell {cell.name}: security options {options} cannot be set "
                                 "on a swarm service")
        labels = dict(kwargs["labels"], **{VOLUME: cell.volume_id})
        if node:
            labels[NODE] = node
        spec = cell.spec
        mount = container_spec.mount_path(spec)
        container: dict[str, Any] = {
            "Image": kwargs["image"], "Labels": labels, "Hostname": cell.name,
            "Command": kwargs["command"],
            "Env": [f"{k}={v}" for k, v in kwargs["environment"].items()],
            "Dir": mount, "Init": True, "StopSignal": "SIGTERM",
            "StopGracePeriod": container_spec.STOP_TIMEOUT * 1_000_000_000,
            "CapabilityDrop": list(kwargs["cap_drop"]),
            "CapabilityAdd": [c if c.startswith("CAP_") else f"CAP_{c}"
                              for c in kwargs["cap_add"]],
            "Mounts": [
                {"Type": "volume", "Source": engine_volume(self.owner, cell.volume_id),
                 "Target": mount,
                 "VolumeOptions": {"NoCopy": True, "DriverConfig": {"Name": "local"},
                                   "Labels": self._ours(**{CELL_ID: cell.id, CELL: cell.name,
                                                           VOLUME: cell.volume_id})}},
                {"Type": "tmpfs", "Target": security.SERVICE_LOG_DIR,
                 "TmpfsOptions": {"SizeBytes": 64 << 20}},
            ],
            "Configs": [{"File": {"Name": f"{security.RUN_DIR}/{supervisor.SCRIPT}",
                                  "UID": "0", "GID": "0", "Mode": 0o444},
                         "ConfigID": config[0], "ConfigName": config[1]}],
        }
        if kwargs.get("user"):
            container["User"] = str(kwargs["user"])
        limits: dict[str, Any] = {"Pids": int(kwargs.get("pids_limit") or 4096)}
        reservations: dict[str, Any] = {}
        if "nano_cpus" in kwargs:
            limits["NanoCPUs"] = int(kwargs["nano_cpus"])
        if "mem_limit" in kwargs:
            limits["MemoryBytes"] = int(kwargs["mem_limit"])
        placement = spec.get("placement") or {}
        if placement.get("reserve", True):
            reservations = {k: v for k, v in limits.items() if k != "Pids"}
        constraints = [f"node.labels.{k}=={v}"
                       for k, v in sorted((placement.get("nodeLabels") or {}).items())]
        if node:
            constraints.append(f"node.id=={node}")
        template: dict[str, Any] = {
            "ContainerSpec": container,
            "Resources": {"Limits": limits, "Reservations": reservations},
            "RestartPolicy": {"Condition": "any", "Delay": RESTART_DELAY_NS, "MaxAttempts": 0},
            "Placement": {"Constraints": constraints},
            "LogDriver": {"Name": "json-file", "Options": {"max-size": "1m", "max-file": "2"}},
        }
        if kwargs.get("network_mode") == "host":
            template["Networks"] = [{"Target": self.manager.network_id("host")}]
        # No network named for mode none: a service cannot name "none" (docs/cluster.md);
        # on the nodes' --bridge=none engines the task then has loopback only.
        return {"Name": name, "Labels": labels, "TaskTemplate": template,
                "Mode": {"Replicated": {"Replicas": 0}}}

    def _config(self, cell: CellRef) -> tuple[str, str]:
        """The supervisor script as a swarm config (id, name), named by its digest."""
        script = supervisor.render_script(cell.name, cell.spec).encode()
        digest = hashlib.sha256(b"%s/%s/" % (self.owner.encode(), cell.id.encode())
                                + script).hexdigest()[:32]
        name = f"devcell-sv-{digest}"
        return self.manager.create_config(name, script, self._ours(**{CELL_ID: cell.id})), name

    def create(self, cell: CellRef, runtime_hash: str) -> Outputs:
        """The cell's service, 0 replicas (the single host's created container). The same
        spec is a no-op; another replaces a service that does not run."""
        record = self.volumes.read(cell.volume_id) if cell.volume_id else None
        if cell.volume_id is not None and record is None:
            raise BackendNotFound(f"volume {cell.volume_id} of cell {cell.name} does not exist")
        node = (record or {}).get("node")
        existing = self._service(cell)
        if existing is not None:
            if _labels(existing).get(RUNTIME_HASH) == runtime_hash:
                return {"service": _name(existing), "created": False}
            if _replicas(existing):
                raise BackendError(f"cell {cell.name} runs from another spec; stop and delete "
                                   "it before creating it again")
            self.manager.remove_service(str(existing["ID"]), f"replacing cell {cell.name}")
        spec = self.service_spec(cell, runtime_hash, node=node, config=self._config(cell))
        action = f"creating the service of cell {cell.name}"
        try:
            service_id = self.manager.create_service(spec, action)
        except BackendConflict:
            raise BackendRefused(f"a service named {spec['Name']} exists but does not carry "
                                 "DevCell's labels for this state directory; refusing to touch "
                                 "it") from None
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "created service {} ({})", spec["Name"], service_id[:12])
        return {"service": spec["Name"], "id": service_id[:12], "created": True,
                **({"node": node} if node else {})}

    def _scale(self, cell: CellRef, service: dict[str, Any], replicas: int,
               constraint: str | None = None) -> None:
        for attempt in range(3):
            spec = dict(service.get("Spec") or {})
            spec["Mode"] = {"Replicated": {"Replicas": replicas}}
            if constraint is not None:
                template = dict(spec.get("TaskTemplate") or {})
                placement = dict(template.get("Placement") or {})
                kept = [c for c in placement.get("Constraints") or []
                        if not str(c).startswith("node.id==")]
                placement["Constraints"] = [*kept, constraint]
                template["Placement"] = placement
                spec["TaskTemplate"] = template
                spec["Labels"] = dict(spec.get("Labels") or {},
                                      **{NODE: constraint.partition("==")[2]})
            try:
                self.manager.update_service(service, spec, f"updating the service of cell "
                                                           f"{cell.name}")
                return
            except BackendError as exc:
                if attempt == 2 or "update out of sequence" not in str(exc):
                    raise
                fresh = self._service(cell)
                if fresh is None:
                    raise BackendNotFound(f"cell {cell.name} has no service") from None
                service = fresh

    def start(self, cell: CellRef) -> Outputs:
        """One replica, and the wait until its task runs (or why it cannot); then the cell
        pinned to the task's node when it was not yet (its workspace is there now)."""
        service = self._service(cell)
        if service is None:
            raise BackendNotFound(f"cell {cell.name} has no service to start")
        before = {str(t.get("ID")) for t in self.manager.tasks_of([str(service["ID"])])}
        if _replicas(service) != 1:
            self._scale(cell, service, 1)
        task = self._wait_running(cell, str(service["ID"]), before)
        node = str(task.get("NodeID") or "")
        record = self.volumes.read(cell.volume_id) if cell.volume_id else None
        pinned = False
        if record is not None and node and record.get("node") in (None, node):
            if record.get("node") is None:
                self.volumes.write(str(cell.volume_id), dict(record, node=node))
            fresh = self._service(cell)
            if fresh is not None and f"node.id=={node}" not in _constraints(fresh):
                # Only the placement changes: the swarm keeps the running task (its node
                # satisfies the new constraint) and never places this cell elsewhere again.
                self._scale(cell, fresh, 1, constraint=f"node.id=={node}")
                pinned = True
        return {"service": _name(service), "node": node, "pinned": pinned}

    def _wait_running(self, cell: CellRef, service_id: str, before: set[str]) -> dict[str, Any]:
        began = time.monotonic()
        while True:
            tasks = self.manager.tasks_of([service_id])
            live = [t for t in tasks if t.get("DesiredState") == "running"]
            for task in live:
                if (task.get("Status") or {}).get("State") == "running":
                    return task
            failed = [t for t in tasks if str(t.get("ID")) not in before
                      and (t.get("Status") or {}).get("State") in FAILED]
            if failed:
                status = failed[-1].get("Status") or {}
                raise BackendError(f"the task of cell {cell.name} {status.get('State')}: "
                                   f"{status.get('Err') or status.get('Message')}")
            waited = time.monotonic() - began
            pending = [t for t in live if (t.get("Status") or {}).get("State") == "pending"]
            if pending and waited > UNPLACED_S:
                status = pending[0].get("Status") or {}
                raise BackendError(f"no node can run cell {cell.name} now: "
                                   f"{status.get('Err') or status.get('Message')} (the swarm "
                                   "places it once one can)")
            if waited > START_TIMEOUT_S:
                raise BackendError(f"the task of cell {cell.name} did not run within "
                                   f"{START_TIMEOUT_S:.0f} s")
            time.sleep(POLL_S)

    def stop(self, cell: CellRef) -> Outputs:
        service = self._service(cell)
        if service is None or not _replicas(service):
            return {}
        self._scale(cell, service, 0)
        deadline = time.monotonic() + container_spec.STOP_TIMEOUT + 30
        while time.monotonic() < deadline:
            states = [(t.get("Status") or {}).get("State")
                      for t in self.manager.tasks_of([str(service["ID"])])]
            if not any(s in ("running", "starting", "preparing", "assigned", "accepted",
                             "ready") for s in states):
                break
            time.sleep(POLL_S)
        return {}

    def delete(self, cell: CellRef) -> Outputs:
        service = self._service(cell)
        if service is not None:
            self.manager.remove_service(str(service["ID"]), f"removing cell {cell.name}")
        for found in self.manager.configs(self._ours(**{CELL_ID: cell.id})):
            self.manager.remove_config(str(found.get("ID")))
        return {"service": _name(service)} if service is not None else {}

    def watch(self, on_event: Callable[[str], None], *, stop: threading.Event,
              on_open: Callable[[], None]) -> None:
        """No event stream of the swarm's tasks is followed yet: the reconciler's periodic
        observation sees a task's changes."""
        on_open()
        stop.wait()

    # -- what needs the node's disk: not yet -------------------------------------------------

    def _not_yet(self, what: str) -> BackendRefused:
        return BackendRefused(f"{what} of a cell on the cluster is not built yet (issue 25: "
                              "workspace operations on the node that holds them)")

    def quiesce(self, cell: CellRef) -> Outputs:
        raise self._not_yet("a snapshot or sleep")

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        raise self._not_yet("a snapshot or sleep")

    def resume(self, cell: CellRef) -> Outputs:
        return {}

    def checkpoint_exists(self, checkpoint_id: str) -> bool:
        return False

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        return None

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs:
        return {"checkpoint": checkpoint_id}

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        return None

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path | None:
        return None

    def release_checkpoint_files(self, checkpoint_id: str) -> None:
        pass

    def import_checkpoint(self, checkpoint_id: str, **_: Any) -> CheckpointInfo:
        raise self._not_yet("importing a snapshot")

    def exec(self, cell: CellRef, argv: list[str], **_: Any) -> int:
        raise self._not_yet("exec")

    def open_port(self, cell: CellRef, port: int) -> Any:
        raise self._not_yet("port-forward")

    def log_paths(self, cell: CellRef) -> dict[str, Path]:
        return {}


def _labels(service: dict[str, Any]) -> dict[str, str]:
    return dict((service.get("Spec") or {}).get("Labels") or {})


def _name(service: dict[str, Any]) -> str:
    return str((service.get("Spec") or {}).get("Name") or "")


def _replicas(service: dict[str, Any]) -> int:
    mode = (service.get("Spec") or {}).get("Mode") or {}
    return int((mode.get("Replicated") or {}).get("Replicas") or 0)


def _constraints(service: dict[str, Any]) -> list[str]:
    template = (service.get("Spec") or {}).get("TaskTemplate") or {}
    return list((template.get("Placement") or {}).get("Constraints") or [])


def _lost(nodes: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Node id -> why the cluster has lost it, for the nodes whose state is not ready (a
    node removed from the swarm reads as lost too)."""
    out = {}
    for node_id, found in nodes.items():
        status = found.get("Status") or {}
        state = str(status.get("State") or "unknown")
        if state != "ready":
            why = str(status.get("Message") or "").strip()
            out[node_id] = (f"node {node_id} is {state}" + (f" ({why[:200]})" if why else "")
                            + ": the cell's workspace is only there")
    return out


def observed(service: dict[str, Any], tasks: list[dict[str, Any]],
             lost: dict[str, str] | None = None) -> Observed:
    """A cell as its service and tasks say: it exists while the service does; it runs while
    the task the swarm wants running does; `nodeDown` when the node it is pinned to is lost
    (`lost`: node id -> why)."""
    mine = [t for t in tasks if t.get("ServiceID") == service.get("ID")]
    live = [t for t in mine if t.get("DesiredState") == "running"]
    running = [t for t in live if (t.get("Status") or {}).get("State") == "running"]
    latest = sorted(mine, key=lambda t: str(t.get("UpdatedAt") or ""))[-1:]
    chosen = running or live or latest
    task = chosen[0] if chosen else None
    labels = _labels(service)
    detail: dict[str, Any] = {"service": _name(service)}
    node = labels.get(NODE) or (str(task.get("NodeID") or "") if task else "")
    if node:
        detail["node"] = node
        if lost and node in lost and labels.get(NODE) == node:
            detail["nodeDown"] = lost[node]
    if task is not None:
        status = task.get("Status") or {}
        detail["task"] = str(status.get("State") or "")
        if status.get("Err"):
            detail["reason"] = str(status.get("Err"))[:500]
    return Observed(exists=True, running=bool(running) and bool(_replicas(service)),
                    runtime_hash=labels.get(RUNTIME_HASH), detail=detail)


def observe_all(state_dir: Path) -> dict[str, Observed]:
    """Every cell's service of `state_dir` with its tasks: two calls to the manager."""
    manager = manager_of(state_dir)
    owner = state_hash(state_dir)
    services = [s for s in manager.services({MANAGED: "true", STATE: owner})
                if _labels(s).get(CELL_ID) and not _labels(s).get(WIPE)]
    if not services:
        return {}
    tasks = manager.tasks_of([str(s["ID"]) for s in services])
    lost = _lost({str(n.get("ID")): n for n in manager.nodes()})
    return {_labels(s)[CELL_ID]: observed(s, tasks, lost) for s in services}
