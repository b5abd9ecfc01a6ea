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

Checkpoints, forks, restores and moves are jobs on the nodes (node_jobs.py; a workspace
moving between nodes goes through the cluster's registry, node_transfer.py). What needs a
node's own disk or engine otherwise is refused here, naming the field: exec, seeded or live
workspaces, sidecars, engine volumes, host mounts, bridge networks, postCreate/postStart
hooks, secret environment values, a user other than root.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell import failpoints, names, security
from devcell.backends import supervisor
from devcell.backends.base import (
    Capabilities,
    CellRef,
    Changes,
    CheckpointInfo,
    Consistency,
    Observed,
    Outputs,
    Owned,
    OwnedKind,
)
from devcell.backends.container import node_jobs, node_transfer
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
CHECKPOINT = "dev.devcell.checkpoint"
"""On a checkpoint's volume on its node: the checkpoint's (its snapshot's) id."""
FREEZERS = ("/sys/fs/cgroup/freezer/docker/{id}",
            "/sys/fs/cgroup/freezer/system.slice/docker-{id}.scope",
            "/sys/fs/cgroup/system.slice/docker-{id}.scope",
            "/sys/fs/cgroup/docker/{id}")
"""Where a node's engine puts a container's freezer cgroup: cgroup v1 with the cgroupfs
driver (Debian's docker.io default), v1 with systemd's, v2 with systemd's, v2 with cgroupfs."""
FREEZE_TIMEOUT_S = 60.0
_STATE = (
    'if [ -e /f/freezer.state ]; then state() { cat /f/freezer.state; }\n'
    'else state() { grep -q "^frozen 1" /f/cgroup.events && echo FROZEN || echo THAWED; }; fi\n')
FREEZE = (_STATE
          + 'if [ -e /f/freezer.state ]; then echo FROZEN > /f/freezer.state;'
          ' else echo 1 > /f/cgroup.freeze; fi\n'
          'i=0; while [ "$(state)" != FROZEN ]; do i=$((i + 1));'
          ' [ $i -lt 500 ] || { echo "still $(state) after 10 s" >&2; exit 1; }; sleep 0.02; done\n'
          'echo devcell-frozen\n')
THAW = ('if [ -e /f/freezer.state ]; then echo THAWED > /f/freezer.state;'
        ' else echo 0 > /f/cgroup.freeze; fi\necho devcell-thawed\n')
CHECKPOINT_COPY = (
    f'figures() {{\n{node_jobs.TREE_FIGURES}}}\n'
    'if [ ! -d /c/tree ]; then\n'
    '  rm -rf /c/.tree.tmp\n'
    f'  {node_jobs.CP} -a --no-target-directory /w /c/.tree.tmp\n'
    '  sync -f /c/.tree.tmp\n'
    '  mv /c/.tree.tmp /c/tree\n'
    '  sync -f /c\n'
    'fi\n'
    'figures /c/tree\n')
"""The copy job: the workspace (mounted read-only at /w) into /c/tree of the checkpoint's
volume, under a temporary name renamed once the copy is whole and on disk; a tree a job
completed before (a crash after it, before the record) is kept as it is."""
FORK_FILL = (
    f'figures() {{\n{node_jobs.TREE_FIGURES}}}\n'
    '[ -d /c/tree ] || { echo "the checkpoint volume holds no tree" >&2; exit 1; }\n'
    'find /w -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +\n'
    f'{node_jobs.CP} -a --no-target-directory /c/tree /w\n'
    'sync -f /w\n'
    'figures /w\n')
"""The fork's job: its new workspace volume (at /w; emptied first, for a job run again after
a crash) filled from the checkpoint's tree (mounted read-only at /c)."""
CHECKPOINT_REMOVE = "rm -rf /c/tree /c/.tree.tmp\necho devcell-emptied\n"
CHANGES = (
    "list() { [ -d \"$2\" ] || return 0; cd \"$2\" && find . -mindepth 1 -exec stat -c"
    " \"$1|%F|%s|%Y|%a|%n\" {} +; }\n"
    "{ list C /c/tree; list W /w; } | awk -F'|' -v most=" + str(10) + " '\n"
    "function show(mark, path) { if (shown < most) { print \"devcell-example \" mark"
    " substr(path, 3); shown++ } }\n"
    "{ name = $6; for (i = 7; i <= NF; i++) name = name \"|\" $i\n"
    "  sig = ($2 == \"directory\") ? $2 \"|\" $5 : $2 \"|\" $3 \"|\" $4 \"|\" $5\n"
    "  if ($1 == \"C\") { before[name] = sig; next }\n"
    "  if (!(name in before)) { added++; show(\"+\", name) }\n"
    "  else { if (before[name] != sig) { changed++; show(\"~\", name) }; delete before[name] } }\n"
    "END { for (name in before) { removed++; show(\"-\", name) }\n"
    "  printf \"devcell-changes added=%d changed=%d removed=%d\\n\", added, changed, removed }'\n")
"""What the workspace (at /w) holds that the checkpoint's tree (at /c/tree, if mounted) does
not: each entry's type, size, mtime and mode (a directory's type and mode), by path, as the
single host compares them (workspace_restore.changes); counts and the first paths."""
COPY_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD")
"""What `cp -a` needs to copy any workspace as root does: read every file, make device files
(mknod, never opened), give each entry its owner, mode (setuid and setgid too) and times."""
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
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
    `<state>/cluster/volumes/`, written whole (temporary file and rename). The same for the
    checkpoints (`checkpoints/`: the node and volume holding each) and the cells frozen now
    (`frozen/`: what thaws them)."""

    def __init__(self, state_dir: Path, kind: str = "volumes") -> None:
        self.root = state_dir / "cluster" / kind
        self.what = kind.rstrip("s")

    def path(self, volume_id: str) -> Path:
        return self.root / f"{safe_id(self.what, volume_id)}.json"

    def read(self, volume_id: str) -> dict[str, Any] | None:
        try:
            found = json.loads(self.path(volume_id).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise BackendError(f"the record of {self.what} {volume_id} cannot be read: "
                               f"{exc}") from None
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


def checkpoint_volume(owner: str, checkpoint_id: str) -> str:
    """The engine's name of a checkpoint's volume on its node."""
    return f"devcell-{owner}-cp-{safe_id('checkpoint', checkpoint_id)}"


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
        self.checkpoints = Volumes(state_dir, "checkpoints")
        self.frozen = Volumes(state_dir, "frozen")
        self.nodes = Volumes(state_dir, "nodes")

    def close(self) -> None:
        pass

    # -- finding what is ours ----------------------------------------------------------------

    def _ours(self, **extra: str) -> dict[str, str]:
        return {MANAGED: "true", STATE: self.owner, **extra}

    def _service(self, cell: CellRef) -> dict[str, Any] | None:
        safe_id("cell", cell.id)
        found = [s for s in self.manager.services(self._ours(**{CELL_ID: cell.id}))
                 if _labels(s).get(STATE) == self.owner and _labels(s).get(CELL_ID) == cell.id
                 and not _job(s)]
        if len(found) > 1:
            raise BackendRefused(f"several services carry the labels of cell {cell.name}; "
                                 "remove the extras with docker service rm")
        return found[0] if found else None

    def list_owned(self) -> list[Owned]:
        out = [Owned(OwnedKind.CELL, _labels(s)[CELL_ID], _labels(s)[CELL_ID])
               for s in self.manager.services(self._ours())
               if _labels(s).get(CELL_ID) and not _job(s)]
        # What may hold the user's files (a workspace made on a node, a checkpoint of any
        # file) says where: the orphan sweep never removes it on its own, and `devcell gc`
        # only with approval, as on one host (the manager cannot look inside to see it empty).
        out += [Owned(OwnedKind.VOLUME, volume_id, str(record.get("cell_id") or ""),
                      _where(record) if record.get("node") else None)
                for volume_id, record in self.volumes.all()]
        out += [Owned(OwnedKind.CHECKPOINT, checkpoint_id, str(record.get("cell_id") or ""),
                      _where(record) if record.get("files") else None)
                for checkpoint_id, record in self.checkpoints.all()]
        return out

    # -- observe -----------------------------------------------------------------------------

    def observe(self, cell: CellRef) -> Observed:
        service = self._service(cell)
        if service is None:
            return Observed(exists=False)
        node = _labels(service).get(NODE)
        lost = _lost({node: self._node(node)} if node else {})
        found = observed(service, self.manager.tasks_of([str(service["ID"])]), lost)
        return found.replace(frozen=True) if self.frozen.read(cell.id) else found

    def _node(self, node_id: str) -> dict[str, Any]:
        try:
            return self.manager.node(node_id)
        except BackendNotFound:
            return {"Status": {"State": "removed", "Message": "no longer in the swarm"}}

    # -- volumes -----------------------------------------------------------------------------

    def volume_exists(self, volume_id: str) -> bool:
        record = self.volumes.read(volume_id)
        return record is not None and record.get("filled") is not False  # a fork's: filled

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs:
        """Recorded only: the node's engine makes the volume when the cell's task first
        mounts it, on whichever node the scheduler picks (pinned there after). A fork's is
        made and filled on its checkpoint's node (`_fork_volume`)."""
        problems = unsupported(cell.spec)
        if problems:
            raise BackendRefused(f"cell {cell.name} cannot run on the cluster yet: "
                                 + "; ".join(problems))
        if from_checkpoint is not None:
            return self._fork_volume(cell, volume_id, from_checkpoint)
        if self.volumes.read(volume_id) is None:
            self.volumes.write(volume_id, {"cell_id": cell.id, "cell": cell.name, "node": None,
                                           "volume": engine_volume(self.owner, volume_id)})
        return {"volume": volume_id, "node": None, "storage": "node"}

    def volumes_of(self, cell_id: str) -> list[str]:
        """The cell's workspaces (to adopt after a crash): not a fork's whose fill did not
        complete (recorded before its job, so the orphan sweep finds it; never adopted)."""
        return [v for v, record in self.volumes.all()
                if record.get("cell_id") == cell_id and record.get("filled") is not False]

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
                 if not _job(s)]
        if users:
            raise BackendError(f"volume {volume_id} is still mounted by service "
                               f"{(users[0].get('Spec') or {}).get('Name')}; delete the cell "
                               "first")
        outputs: Outputs = {"volume": volume_id, "node": record.get("node")}
        if record.get("node"):
            outputs["wiped"] = self._wipe(volume_id, str(record["node"]), str(record["volume"]))
        # What a move left: the volume it was filling (killed before its switch) and the old
        # workspace it had not emptied yet; each emptied where its node can run a job.
        for key in ("moving", "previous"):
            extra = record.get(key)
            if isinstance(extra, dict) and extra.get("node") and extra.get("volume"):
                try:
                    node_jobs.node_ready(self.manager, str(extra["node"]),
                                         f"emptying volume {extra['volume']}")
                except BackendError as exc:
                    logger.bind(backend=self.name).warning(
                        "volume {} stays on node {}: {}", extra["volume"], extra["node"], exc)
                    outputs[f"{key}Wiped"] = False
                    continue
                outputs[f"{key}Wiped"] = self._wipe(volume_id, str(extra["node"]),
                                                    str(extra["volume"]))
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
                self._volume_mount(self._engine_volume_of(cell.volume_id), mount,
                                   self._workspace_labels(cell, cell.volume_id)),
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
        service = self._fresh_mount(cell, service)
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
        outputs: Outputs = {"service": _name(service), "node": node, "pinned": pinned}
        emptied = self._forget_previous(cell, node) if node else None
        if emptied is not None:
            outputs["oldWorkspaceEmptied"] = emptied
        return outputs

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

    # -- workspace operations on the node (node_jobs) ---------------------------------------

    def _not_yet(self, what: str) -> BackendRefused:
        return BackendRefused(f"{what} of a cell on the cluster is not built yet (issue 25: "
                              "workspace operations on the node that holds them)")

    def _running_task(self, cell: CellRef) -> dict[str, Any] | None:
        service = self._service(cell)
        if service is None or not _replicas(service):
            return None
        for task in self.manager.tasks_of([str(service["ID"])]):
            if (task.get("DesiredState") == "running"
                    and (task.get("Status") or {}).get("State") == "running"):
                return task
        return None

    def _freezer(self, cell: CellRef, node: str, container: str, *, thaw: bool,
                 templates: tuple[str, ...]) -> str | None:
        """The job that freezes (or thaws) the cell's container through its cgroup on the
        node, with that one directory mounted; which cgroup path it was (None: not on the
        node, the container is gone). The manager cannot know the node's cgroup layout: each
        candidate is tried (a missing bind source rejects the task at once, facts), the one
        found first recorded for the node and tried first next time."""
        record = self.nodes.read(node) or {}
        known = record.get("freezer")
        order = ([known] if known in templates else []) + [t for t in templates if t != known]
        verb = "thawing" if thaw else "freezing"
        for template in order:
            mount = {"Type": "bind", "Source": template.format(id=container), "Target": "/f"}
            try:
                node_jobs.run(self.manager, self.owner, node=node,
                              job=f"{'thaw' if thaw else 'freeze'}:{cell.id}",
                              what=f"{verb} cell {cell.name}", script=THAW if thaw else FREEZE,
                              mounts=[mount], timeout=FREEZE_TIMEOUT_S)
            except node_jobs.SourceMissing:
                continue
            if known != template:
                self.nodes.write(node, dict(record, freezer=template))
            return template
        return None

    def quiesce(self, cell: CellRef) -> Outputs:
        """The cell's running task frozen on its node (a job writing its cgroup's freezer, as
        the single host's checkpoint freezes a container); nothing when it does not run.
        Recorded before the freeze, so a kill between here and resume leaves it observed
        frozen (and resumed)."""
        task = self._running_task(cell)
        if task is None:
            return {"frozen": False}
        node = str(task.get("NodeID") or "")
        container = str(((task.get("Status") or {}).get("ContainerStatus") or {})
                        .get("ContainerID") or "")
        if not _CONTAINER_ID.fullmatch(container) or not node:
            raise BackendError(f"the running task of cell {cell.name} names no container yet")
        node_jobs.node_ready(self.manager, node, f"freezing cell {cell.name}")
        self.frozen.write(cell.id, {"node": node, "container": container, "freezer": None})
        template = self._freezer(cell, node, container, thaw=False, templates=FREEZERS)
        if template is None:
            self.frozen.remove(cell.id)
            raise BackendError(f"freezing cell {cell.name} on node {node}: its container's "
                               "cgroup is at none of " + ", ".join(
                                   t.format(id=container[:12] + "...") for t in FREEZERS))
        self.frozen.write(cell.id, {"node": node, "container": container, "freezer": template})
        return {"frozen": True, "node": node, "how": "cgroup"}

    def resume(self, cell: CellRef) -> Outputs:
        """The cell's task thawed on its node, if this backend froze it (its record)."""
        held = self.frozen.read(cell.id)
        if held is None:
            return {}
        node, container = str(held.get("node")), str(held.get("container"))
        try:
            node_jobs.node_ready(self.manager, node, f"thawing cell {cell.name}")
        except BackendNotFound:  # the node left the swarm, and its processes with it
            self.frozen.remove(cell.id)
            return {"node": node, "thawed": False}
        known = held.get("freezer")
        thawed = _CONTAINER_ID.fullmatch(container) is not None and self._freezer(
            cell, node, container, thaw=True,
            templates=(known,) if known in FREEZERS else FREEZERS) is not None
        self.frozen.remove(cell.id)
        return {"node": node, "thawed": thawed}

    def _checkpoint_info(self, checkpoint_id: str, record: dict[str, Any]) -> CheckpointInfo:
        return CheckpointInfo(ref=str(record.get("volume")), consistency=Consistency.FILESYSTEM,
                              size_bytes=int(record.get("size_bytes") or 0),
                              files=int(record.get("files") or 0),
                              node=str(record.get("node") or "") or None)

    def _volume_mount(self, name: str, target: str, labels: dict[str, str], *,
                      read_only: bool = False) -> dict[str, Any]:
        return {"Type": "volume", "Source": name, "Target": target, "ReadOnly": read_only,
                "VolumeOptions": {"NoCopy": True, "DriverConfig": {"Name": "local"},
                                  "Labels": self._ours(**labels)}}

    def _engine_volume_of(self, volume_id: str) -> str:
        """The engine volume holding the workspace now (a restore makes a new one)."""
        record = self.volumes.read(volume_id) or {}
        return str(record.get("volume") or engine_volume(self.owner, volume_id))

    def _fresh_mount(self, cell: CellRef, service: dict[str, Any]) -> dict[str, Any]:
        """The service mounting the workspace volume the record names, pinned to the node it
        names: a restore or a move swaps the record first (its commit) and the service after,
        so one killed between the two is finished here, before the cell starts."""
        if cell.volume_id is None:
            return service
        record = self.volumes.read(cell.volume_id) or {}
        wanted = self._engine_volume_of(cell.volume_id)
        node = record.get("node")
        spec = copy.deepcopy(service.get("Spec") or {})
        template = spec.get("TaskTemplate") or {}
        mounts = (template.get("ContainerSpec") or {}).get("Mounts") or []
        constraints = list((template.get("Placement") or {}).get("Constraints") or [])
        pinned = f"node.id=={node}"
        if (not mounts or mounts[0].get("Source") == wanted) and (
                not node or not any(c.startswith("node.id==") for c in constraints)
                or pinned in constraints):
            return service
        if mounts:
            mounts[0]["Source"] = wanted
        if node:
            template.setdefault("Placement", {})["Constraints"] = [
                c for c in constraints if not c.startswith("node.id==")] + [pinned]
            spec["Labels"] = dict(spec.get("Labels") or {}, **{NODE: str(node)})
            labels = (template.get("ContainerSpec") or {}).get("Labels")
            if isinstance(labels, dict) and NODE in labels:
                labels[NODE] = str(node)
        self.manager.update_service(service, spec, f"mounting the restored or moved workspace "
                                                   f"of cell {cell.name}")
        return self._service(cell) or service

    def _forget_previous(self, cell: CellRef, node: str) -> bool | None:
        """After a move, once the cell ran on its new node: the old workspace emptied on
        its old node (a job there) and forgotten; None when there was none. A lost old node
        keeps it recorded (it is emptied when the node is back and the cell starts again)."""
        if cell.volume_id is None:
            return None
        record = self.volumes.read(cell.volume_id) or {}
        previous = record.get("previous")
        if not isinstance(previous, dict) or previous.get("node") in (None, node):
            return None
        old_node, old_volume = str(previous.get("node")), str(previous.get("volume"))
        try:
            node_jobs.node_ready(self.manager, old_node, f"emptying the old workspace of "
                                                         f"cell {cell.name}")
        except BackendError as exc:
            logger.bind(backend=self.name, cell=cell.name).warning(
                "the old workspace of {} stays on node {}: {}", cell.name, old_node, exc)
            return False
        emptied = self._wipe(cell.volume_id, old_node, old_volume)
        fresh = self.volumes.read(cell.volume_id) or {}
        self.volumes.write(cell.volume_id, {k: v for k, v in fresh.items() if k != "previous"})
        return emptied

    def _workspace_labels(self, cell: CellRef, volume_id: str) -> dict[str, str]:
        return {CELL_ID: cell.id, CELL: cell.name, VOLUME: volume_id}

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        """The workspace copied into a checkpoint volume on its node by a job there (`cp -a`
        as on a single host: links kept, not followed; device files made, not read; setuid
        and holes kept), with the cell frozen for the copy (by quiesce, or here)."""
        existing = self.checkpoints.read(checkpoint_id)
        if existing is not None:
            self._push_if_asked(cell, checkpoint_id)  # a push a crash interrupted
            return self._checkpoint_info(checkpoint_id, existing)
        if cell.volume_id is None:
            raise BackendError(f"cell {cell.name} has no workspace volume to checkpoint")
        record = self.volumes.read(cell.volume_id) or {}
        node = record.get("node")
        if not node:
            raise BackendError(f"cell {cell.name} never ran: its workspace is on no node yet")
        what = f"checkpointing cell {cell.name}"
        node_jobs.node_ready(self.manager, str(node), what)
        froze = (self.frozen.read(cell.id) is None and self._running_task(cell) is not None
                 and self.quiesce(cell).get("frozen"))
        name = checkpoint_volume(self.owner, checkpoint_id)
        began = time.monotonic()
        try:
            out = node_jobs.run(
                self.manager, self.owner, node=str(node), job=f"checkpoint:{checkpoint_id}",
                what=what, script=CHECKPOINT_COPY, caps=COPY_CAPS, expect="devcell-tree",
                mounts=[self._volume_mount(str(record.get("volume")), "/w",
                                           self._workspace_labels(cell, cell.volume_id),
                                           read_only=True),
                        self._volume_mount(name, "/c", {CHECKPOINT: checkpoint_id,
                                                        CELL_ID: cell.id})])
        finally:
            if froze:
                self.resume(cell)
        found = node_jobs.outputs(out, "devcell-tree")
        meta = {"node": node, "volume": name, "cell_id": cell.id, "cell": cell.name,
                "from_volume": cell.volume_id, "files": _int(found.get("files")),
                "size_bytes": _int(found.get("bytes")), "created": time.time(),
                "copy_ms": round((time.monotonic() - began) * 1000, 1)}
        self.checkpoints.write(checkpoint_id, meta)
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "checkpoint {} on node {}: {} files, {} bytes in {} ms", checkpoint_id, node,
            meta["files"], meta["size_bytes"], meta["copy_ms"])
        self._push_if_asked(cell, checkpoint_id)
        return self._checkpoint_info(checkpoint_id, meta)

    def _push_if_asked(self, cell: CellRef, checkpoint_id: str) -> None:
        """With `cluster.pushSnapshots`, the checkpoint pushed to the registry from its node
        as soon as it is taken (the cell already thawed): a cell whose node is lost later can
        be moved from it."""
        found = settings(self.layout.state_dir)
        record = self.checkpoints.read(checkpoint_id)
        if found is None or not found.push_snapshots or not found.registry or record is None:
            return
        self._pushed(cell, checkpoint_id, record, found.registry, "cluster.pushSnapshots")

    def checkpoint_exists(self, checkpoint_id: str) -> bool:
        return self.checkpoints.read(checkpoint_id) is not None

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        record = self.checkpoints.read(checkpoint_id)
        return None if record is None else self._checkpoint_info(checkpoint_id, record)

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs:
        """The checkpoint's tree removed on its node by a job there, then its record. The
        emptied volume object stays on the node (no swarm call removes a node's volume; only
        its engine can, docs/cluster.md). A node that left the swarm took the bytes with it:
        only the record goes; a node that is down fails the step, retried later."""
        record = self.checkpoints.read(checkpoint_id)
        if record is None:
            return {"checkpoint": checkpoint_id}
        node = str(record.get("node"))
        what = f"deleting checkpoint {checkpoint_id}"
        outputs: Outputs = {"checkpoint": checkpoint_id, "node": node}
        try:
            node_jobs.node_ready(self.manager, node, what)
        except BackendNotFound:
            self.checkpoints.remove(checkpoint_id)
            return {**outputs, "emptied": False}
        node_jobs.run(self.manager, self.owner, node=node, job=f"uncheckpoint:{checkpoint_id}",
                      what=what, script=CHECKPOINT_REMOVE, caps=("DAC_OVERRIDE", "FOWNER"),
                      mounts=[self._volume_mount(str(record.get("volume")), "/c",
                                                 {CHECKPOINT: checkpoint_id})])
        self.checkpoints.remove(checkpoint_id)
        return {**outputs, "emptied": True}

    def _fork_volume(self, cell: CellRef, volume_id: str, checkpoint_id: str) -> Outputs:
        """A fork's workspace made on the node holding its checkpoint, filled from it by a
        job there; recorded on that node, so the fork's service is pinned to it. When the
        fork cannot run there (the node lost, cordoned or drained, or without the labels the
        fork's placement asks), the checkpoint goes through the registry to a node the swarm
        picks instead (`_fork_elsewhere`)."""
        source = self.checkpoints.read(checkpoint_id)
        if source is None:
            raise BackendNotFound(f"cell {cell.name}: checkpoint {checkpoint_id} is on no node "
                                  "of the cluster (a snapshot taken on the cluster can be "
                                  "forked here; an imported one cannot yet)")
        node = str(source.get("node"))
        record = self.volumes.read(volume_id)
        if record is not None and record.get("filled"):
            return {"volume": volume_id, "node": record.get("node") or node,
                    "restoredFrom": checkpoint_id, "storage": "node"}
        why = "an earlier attempt went through the registry" if (
            record is not None and record.get("via") == "registry") else self._elsewhere(
                cell, node)
        if why is not None:
            return self._fork_elsewhere(cell, volume_id, checkpoint_id, source, why)
        what = f"filling the workspace of cell {cell.name} from checkpoint {checkpoint_id}"
        node_jobs.node_ready(self.manager, node, what)
        name = engine_volume(self.owner, volume_id)
        self.volumes.write(volume_id, {"cell_id": cell.id, "cell": cell.name, "node": node,
                                       "volume": name, "from": checkpoint_id, "filled": False})
        out = node_jobs.run(
            self.manager, self.owner, node=node, job=f"fill:{volume_id}", what=what,
            script=FORK_FILL, caps=COPY_CAPS, expect="devcell-tree",
            mounts=[self._volume_mount(str(source.get("volume")), "/c",
                                       {CHECKPOINT: checkpoint_id}, read_only=True),
                    self._volume_mount(name, "/w", self._workspace_labels(cell, volume_id))])
        found = node_jobs.outputs(out, "devcell-tree")
        self.volumes.write(volume_id, {"cell_id": cell.id, "cell": cell.name, "node": node,
                                       "volume": name, "from": checkpoint_id, "filled": True})
        return {"volume": volume_id, "node": node, "restoredFrom": checkpoint_id,
                "files": _int(found.get("files")), "bytes": _int(found.get("bytes")),
                "storage": "node"}

    def _elsewhere(self, cell: CellRef, node: str) -> str | None:
        """Why a fork of a checkpoint on `node` cannot run there (None: it can): the node
        lost, cordoned or drained, or without the labels the fork's placement asks."""
        found = self._node(node)
        status = found.get("Status") or {}
        if status.get("State") != "ready":
            return (f"node {node} is {status.get('State')}"
                    + (f" ({str(status.get('Message'))[:200]})" if status.get("Message") else ""))
        spec = found.get("Spec") or {}
        if spec.get("Availability") in ("pause", "drain"):
            return f"node {node} is {'cordoned' if spec['Availability'] == 'pause' else 'drained'}"
        labels = spec.get("Labels") or {}
        wanted = (cell.spec.get("placement") or {}).get("nodeLabels") or {}
        missing = {k: v for k, v in wanted.items() if labels.get(k) != str(v)}
        if missing:
            return (f"node {node} lacks the labels spec.placement.nodeLabels asks ("
                    + ", ".join(f"{k}={v}" for k, v in sorted(missing.items())) + ")")
        return None

    def _registry(self) -> str | None:
        found = settings(self.layout.state_dir)
        return None if found is None else found.registry

    def _pushed(self, cell: CellRef, checkpoint_id: str, source: dict[str, Any],
                registry: str, why: str) -> tuple[dict[str, Any], bool]:
        """The checkpoint in the registry: pushed from its node now, or as an earlier move
        recorded it (a node lost since can still be moved from); whether it was pushed now."""
        pushed = source.get("pushed")
        if isinstance(pushed, dict) and pushed.get("registry") == registry:
            return pushed, False
        node = str(source.get("node"))
        try:
            node_jobs.node_ready(self.manager, node, f"pushing checkpoint {checkpoint_id}")
        except BackendError as exc:
            raise BackendError(f"cell {cell.name} cannot be made on node {node}, which holds "
                               f"checkpoint {checkpoint_id} ({why}), and the checkpoint was "
                               f"never pushed to {registry}: {exc}") from None
        pushed = node_transfer.push(
            self.manager, self.owner, registry=registry, node=node,
            checkpoint_id=checkpoint_id,
            volume_mount=self._volume_mount(str(source.get("volume")), "/c",
                                            {CHECKPOINT: checkpoint_id}, read_only=True),
            about={"cell": source.get("cell"), "cellId": source.get("cell_id"),
                   "files": source.get("files"), "bytes": source.get("size_bytes")})
        pushed["registry"] = registry
        self.checkpoints.write(checkpoint_id, dict(source, pushed=pushed))
        return pushed, True

    def _fork_elsewhere(self, cell: CellRef, volume_id: str, checkpoint_id: str,
                        source: dict[str, Any], why: str) -> Outputs:
        """The fork's workspace made on another node than its checkpoint's: the checkpoint
        pushed from its node to the registry (node_transfer.push, once per checkpoint), then
        pulled into a new volume on the node the swarm picks for a job with the fork's
        placement and reservations, away from the checkpoint's node; the volume recorded on
        that node as soon as the swarm assigned the job (a rerun after a crash goes to the
        same node), and filled once the job completed."""
        registry = self._registry()
        origin = str(source.get("node"))
        if registry is None:
            raise BackendRefused(f"cell {cell.name} cannot be made on node {origin}, which "
                                 f"holds checkpoint {checkpoint_id}: {why}; moving it to "
                                 "another node needs a registry the nodes reach (cluster."
                                 "registry in DevCell's configuration, docs/cluster.md)")
        pushed, fresh = self._pushed(cell, checkpoint_id, source, registry, why)
        record = self.volumes.read(volume_id) or {}
        name = str(record.get("volume") or engine_volume(self.owner, volume_id))
        base = {"cell_id": cell.id, "cell": cell.name, "volume": name, "from": checkpoint_id,
                "via": "registry", "movedFrom": origin}
        earlier = record.get("node")
        self.volumes.write(volume_id, dict(base, node=earlier, filled=False))
        if earlier:
            constraints = [f"node.id=={earlier}"]
        else:
            placement = cell.spec.get("placement") or {}
            constraints = [f"node.labels.{k}=={v}"
                           for k, v in sorted((placement.get("nodeLabels") or {}).items())]
            constraints.append(f"node.id!={origin}")
        reservations = self._reservations(cell)
        what = (f"filling the workspace of cell {cell.name} from checkpoint {checkpoint_id} "
                f"through {names.printable(str(pushed.get('ref')))}")
        node, out = node_transfer.pull(
            self.manager, self.owner, registry=registry, pushed=pushed,
            job=f"pull:{volume_id}", what=what, constraints=constraints,
            reservations=reservations,
            volume_mount=lambda: self._volume_mount(name, "/w",
                                                    self._workspace_labels(cell, volume_id)),
            on_placed=lambda found: self.volumes.write(volume_id,
                                                       dict(base, node=found, filled=False)))
        found = node_jobs.outputs(out, "devcell-tree")
        self.volumes.write(volume_id, dict(base, node=node, filled=True,
                                           layer=pushed.get("layer")))
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "workspace of {} from checkpoint {} moved from node {} to node {} through {} "
            "({})", cell.name, checkpoint_id, origin, node, pushed.get("ref"), why)
        return {"volume": volume_id, "node": node, "restoredFrom": checkpoint_id,
                "files": _int(found.get("files")), "bytes": _int(found.get("bytes")),
                "storage": "node", "movedFrom": origin, "why": why, "via": "registry",
                "ref": str(pushed.get("ref")), "layer": str(pushed.get("layer")),
                "layerBytes": int(pushed.get("layerBytes") or 0), "pushedNow": fresh}

    def _workspace_and_checkpoint(self, cell: CellRef, volume_id: str, checkpoint_id: str
                                  ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The records of the cell's workspace (on a node) and of the checkpoint a restore or
        a move fills it from; refused, saying which is missing, when either is not there."""
        record = self.volumes.read(volume_id)
        source = self.checkpoints.read(checkpoint_id)
        if record is None or not record.get("node"):
            raise BackendNotFound(f"the workspace of cell {cell.name} is on no node yet")
        if source is None:
            raise BackendNotFound(f"checkpoint {checkpoint_id} is on no node of the cluster")
        return record, source

    def restore_workspace(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        """The stopped cell's workspace replaced by the checkpoint's tree: a new volume on the
        workspace's node filled from it by a job there (as a fork's), then named in the
        workspace's record (the commit: the old workspace or the restored one, never a mix;
        a job cannot exchange a volume's root in place as the single host does), then in the
        service's mount; the old volume emptied after. Refused while the cell runs. A
        checkpoint on another node comes through the registry (pushed from its node once,
        pulled by a job on the workspace's node)."""
        if cell.volume_id is None:
            raise BackendError(f"cell {cell.name} has no workspace volume to restore into")
        record, source = self._workspace_and_checkpoint(cell, cell.volume_id, checkpoint_id)
        node = str(record["node"])
        registry = self._registry()
        if source.get("node") != node and registry is None:
            raise BackendRefused(
                f"checkpoint {checkpoint_id} is on node {source.get('node')}, the workspace "
                f"of cell {cell.name} on node {node}: a restore across nodes needs a "
                "registry the nodes reach (cluster.registry in DevCell's configuration, "
                "docs/cluster.md)")
        if self._running_task(cell) is not None:
            raise BackendRefused(f"cell {cell.name} is running; its workspace is restored "
                                 "only while it is stopped")
        what = f"restoring the workspace of cell {cell.name} from checkpoint {checkpoint_id}"
        node_jobs.node_ready(self.manager, node, what)
        old = self._engine_volume_of(cell.volume_id)
        generation = int(record.get("restores") or 0) + 1
        new = f"{engine_volume(self.owner, cell.volume_id)}-r{generation}"
        across: Outputs = {}
        if source.get("node") != node and registry is not None:
            # The checkpoint is on another node: through the registry, as a fork's
            # (_fork_elsewhere), the pull pinned to the workspace's node.
            pushed, fresh = self._pushed(cell, checkpoint_id, source, registry,
                                         f"the workspace is on node {node}")
            _, out = node_transfer.pull(
                self.manager, self.owner, registry=registry, pushed=pushed,
                job=f"restore:{cell.volume_id}", what=what + f" through {pushed.get('ref')}",
                constraints=[f"node.id=={node}"], reservations={},
                volume_mount=lambda: self._volume_mount(
                    new, "/w", self._workspace_labels(cell, str(cell.volume_id))),
                on_placed=lambda _: None)
            across = {"checkpointNode": source.get("node"), "via": "registry",
                      "ref": str(pushed.get("ref")), "pushedNow": fresh}
        else:
            out = node_jobs.run(
                self.manager, self.owner, node=node, job=f"restore:{cell.volume_id}",
                what=what, script=FORK_FILL, caps=COPY_CAPS, expect="devcell-tree",
                mounts=[self._volume_mount(str(source.get("volume")), "/c",
                                           {CHECKPOINT: checkpoint_id}, read_only=True),
                        self._volume_mount(new, "/w",
                                           self._workspace_labels(cell, cell.volume_id))])
        kept = record.get("previous")  # a move's old workspace not emptied yet stays named
        self.volumes.write(cell.volume_id, dict(record, volume=new, restores=generation,
                                                previous=kept if isinstance(kept, dict) else old))
        service = self._service(cell)
        if service is not None:
            self._fresh_mount(cell, service)
        found = node_jobs.outputs(out, "devcell-tree")
        emptied = self._wipe(cell.volume_id, node, old)
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "workspace restored from {} on node {} into volume {}", checkpoint_id, node, new)
        return {"volume": cell.volume_id, "restoredFrom": checkpoint_id, "node": node,
                "files": _int(found.get("files")), "bytes": _int(found.get("bytes")),
                "storage": "node", "how": "copy", "emptied": emptied, **across}

    def move_workspace(self, cell: CellRef, checkpoint_id: str, away_from: str) -> Outputs:
        """The stopped cell's workspace put on another node than `away_from` (`node drain`)
        from its checkpoint (taken just before, of the stopped cell): the checkpoint pushed
        from its node, pulled into a new volume on the node the swarm picks (the cell's
        placement and reservations, not `away_from`), then that volume and node named in the
        workspace's record (the commit: the old workspace or the moved one), then in the
        service's mount and constraint. The old volume is kept, recorded as `previous`, until
        the cell ran on the new node (`start` empties it then): a move that fails or is
        killed before leaves the cell whole on its node."""
        if cell.volume_id is None:
            raise BackendError(f"cell {cell.name} has no workspace volume to move")
        record, source = self._workspace_and_checkpoint(cell, cell.volume_id, checkpoint_id)
        if record.get("node") != away_from:
            previous = record.get("previous")
            previous = previous if isinstance(previous, dict) else {}  # a restore's: a name
            service = self._service(cell)
            if service is not None:
                self._fresh_mount(cell, service)
            if previous.get("node") == away_from:  # switched by a move killed after it
                return {"volume": cell.volume_id, "node": record.get("node"),
                        "movedFrom": away_from, "restoredFrom": checkpoint_id,
                        "via": "registry", "moved": True, "storage": "node",
                        "resumed": "the switch was recorded before an interruption"}
            return {"volume": cell.volume_id, "node": record.get("node"), "moved": False,
                    "why": f"its workspace is on node {record.get('node')} already"}
        lost = _lost({away_from: self._node(away_from)})
        if not lost and self._running_task(cell) is not None:
            raise BackendRefused(f"cell {cell.name} is running; its workspace is moved only "
                                 "while it is stopped")
        registry = self._registry()
        if registry is None:
            raise BackendRefused(f"moving cell {cell.name} off node {away_from} needs a "
                                 "registry the nodes reach (cluster.registry in DevCell's "
                                 "configuration, docs/cluster.md)")
        why = f"node {away_from} is being drained"
        pushed, fresh = self._pushed(cell, checkpoint_id, source, registry, why)
        moving = dict(record.get("moving") or {})
        if moving.get("checkpoint") != checkpoint_id:
            generation = int(record.get("restores") or 0) + 1
            moving = {"checkpoint": checkpoint_id, "node": None, "restores": generation,
                      "volume": f"{engine_volume(self.owner, cell.volume_id)}-r{generation}"}
            self.volumes.write(cell.volume_id, dict(record, moving=moving))
        name = str(moving["volume"])
        if moving.get("node"):
            constraints = [f"node.id=={moving['node']}"]
        else:
            placement = cell.spec.get("placement") or {}
            constraints = [f"node.labels.{k}=={v}"
                           for k, v in sorted((placement.get("nodeLabels") or {}).items())]
            constraints.append(f"node.id!={away_from}")

        def placed(node: str) -> None:
            self.volumes.write(str(cell.volume_id), dict(record, moving=dict(moving, node=node)))

        node, out = node_transfer.pull(
            self.manager, self.owner, registry=registry, pushed=pushed,
            job=f"move:{cell.volume_id}",
            what=(f"moving the workspace of cell {cell.name} off node {away_from} through "
                  f"{names.printable(str(pushed.get('ref')))}"),
            constraints=constraints, reservations=self._reservations(cell),
            volume_mount=lambda: self._volume_mount(
                name, "/w", self._workspace_labels(cell, str(cell.volume_id))),
            on_placed=placed)
        found = node_jobs.outputs(out, "devcell-tree")
        failpoints.hit("swarm.move.pulled")
        old = {"node": away_from, "volume": self._engine_volume_of(cell.volume_id)}
        committed = {k: v for k, v in record.items() if k != "moving"}
        self.volumes.write(cell.volume_id, dict(committed, node=node, volume=name,
                                                restores=moving["restores"], previous=old))
        failpoints.hit("swarm.move.committed")
        service = self._service(cell)
        if service is not None:
            self._fresh_mount(cell, service)
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "workspace of {} moved from node {} to node {} through {}", cell.name, away_from,
            node, pushed.get("ref"))
        return {"volume": cell.volume_id, "node": node, "movedFrom": away_from,
                "restoredFrom": checkpoint_id, "via": "registry", "moved": True,
                "ref": str(pushed.get("ref")), "layer": str(pushed.get("layer")),
                "pushedNow": fresh, "files": _int(found.get("files")),
                "bytes": _int(found.get("bytes")), "storage": "node"}

    def _reservations(self, cell: CellRef) -> dict[str, Any]:
        resources = cell.spec.get("resources") or {}
        reservations: dict[str, Any] = {}
        if (cell.spec.get("placement") or {}).get("reserve", True):
            if resources.get("cpus"):
                reservations["NanoCPUs"] = int(float(resources["cpus"]) * 1e9)
            if resources.get("memory"):
                reservations["MemoryBytes"] = container_spec.memory_bytes(
                    str(resources["memory"]))
        return reservations

    def workspace_changes(self, volume_id: str, checkpoint_id: str | None) -> Changes:
        """What the workspace holds that the checkpoint does not, listed by a job on the
        workspace's node (both trees mounted read-only); a checkpoint on another node is
        compared as nothing (everything counts as added)."""
        record = self.volumes.read(volume_id)
        if record is None or not record.get("node"):
            return Changes()
        node = str(record["node"])
        what = f"comparing volume {volume_id} with checkpoint {checkpoint_id}"
        node_jobs.node_ready(self.manager, node, what)
        mounts = [self._volume_mount(self._engine_volume_of(volume_id), "/w",
                                     {VOLUME: volume_id}, read_only=True)]
        source = self.checkpoints.read(checkpoint_id) if checkpoint_id else None
        if source is not None and source.get("node") == node:
            mounts.append(self._volume_mount(str(source.get("volume")), "/c",
                                             {CHECKPOINT: str(checkpoint_id)}, read_only=True))
        out = node_jobs.run(self.manager, self.owner, node=node, job=f"changes:{volume_id}",
                            what=what, script=CHANGES, caps=("DAC_OVERRIDE",), mounts=mounts,
                            expect="devcell-changes", timeout=600)
        found = node_jobs.outputs(out, "devcell-changes")
        examples = tuple(_short(names.printable(line.partition(" ")[2]))
                         for line in out.splitlines() if line.startswith("devcell-example "))
        return Changes(_int(found.get("added")), _int(found.get("changed")),
                       _int(found.get("removed")), examples)

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        """Never on the manager: a cluster checkpoint's files are on its node (an export or
        push of one is refused, not written without its files)."""
        record = self.checkpoints.read(checkpoint_id)
        if record is not None:
            raise self._not_yet(f"exporting or pushing snapshot {checkpoint_id} (its files "
                                f"are on node {record.get('node')})")
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


def _where(record: dict[str, Any]) -> str:
    return f"volume {record.get('volume')} on node {record.get('node')}"


def _short(text: str, most: int = 120) -> str:
    return text if len(text) <= most else text[:most - 3] + "..."


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def _labels(service: dict[str, Any]) -> dict[str, str]:
    return dict((service.get("Spec") or {}).get("Labels") or {})


def _job(service: dict[str, Any]) -> bool:
    """A job on a node (emptying a volume, a checkpoint's copy...), not a cell."""
    labels = _labels(service)
    return bool(labels.get(WIPE) or labels.get(node_jobs.JOB))


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
                if _labels(s).get(CELL_ID) and not _job(s)]
    if not services:
        return {}
    tasks = manager.tasks_of([str(s["ID"]) for s in services])
    lost = _lost({str(n.get("ID")): n for n in manager.nodes()})
    frozen = Volumes(state_dir, "frozen")
    out = {}
    for service in services:
        cell_id = _labels(service)[CELL_ID]
        found = observed(service, tasks, lost)
        out[cell_id] = found.replace(frozen=True) if frozen.read(cell_id) else found
    return out
