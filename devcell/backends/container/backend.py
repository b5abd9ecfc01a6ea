"""The container backend: cells as containers on the Docker engine, through the `docker` SDK.

This is the only module that imports docker, and only when a call needs the SDK (the client
is made on first use): a checkpoint's list, freeze and thaw go over the engine's socket with
the standard library (`container_observe`), so `devcell snapshot create` never pays for
importing docker-py. Docker's errors are translated here, at one
function (`translate`), into DevCell's: by HTTP status as docker-py classifies them (404
BackendNotFound, 409 BackendConflict, 400 BackendRefused), ImageNotFound, BackendUnavailable.
Callers catch those classes and never read a message. The engine is the local daemon, or
whatever DOCKER_HOST names.

- A cell is one container whose main process is DevCell's supervisor (`supervisor.py`); the
  workspace volume is a host directory (`container/workspaces.py`) bind-mounted at its mountPath.
- Every container carries DevCell's labels for this state directory; DevCell finds its
  containers by those labels only, so it never acts on one it does not own, and finds what a
  crash left behind.
- Checkpoint: preCheckpoint hooks, sync, freeze (docker pause), copy the workspace, unfreeze,
  postCheckpoint hooks; consistency `filesystem`. Processes and memory are not preserved.
"""

from __future__ import annotations

import _socket  # `socket` builds its enums at import (~2 ms): the snapshot path needs none
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from devcell import names, safeio, security
from devcell.backends import log_source, supervisor
from devcell.backends.base import (
    Capabilities,
    CellRef,
    Changes,
    CheckpointInfo,
    Consistency,
    Fill,
    ImageState,
    Observed,
    Outputs,
    Owned,
    OwnedKind,
)
from devcell.backends.container import freezer, sdk
from devcell.backends.container import observe as container_observe
from devcell.backends.container import spec as container_spec
from devcell.backends.container.layout import Layout
from devcell.backends.container.spec import (
    BASE_IMAGE,
    CELL,
    CELL_ID,
    KEPT_ROOTFS,
    MANAGED,
    POST_CREATE,
    RUNTIME_HASH,
    SIDECAR_OF,
    STATE,
    STATE_PATH,
    VOLUME,
)
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import live_folder
from devcell.backends.host.ids import safe_id, state_hash
from devcell.errors import (
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRefused,
    BackendUnavailable,
    ConfigError,
    DevCellError,
    HookFailed,
    ImagePullFailed,
    MountRefused,
)
from devcell.log import logger

if TYPE_CHECKING:
    import socket

    import docker
    import docker.api

    from devcell import config
    from devcell.backends.host import workspace_seed
    from devcell.backends.interactive import CellRoot, ExecOptions, Terminal

QUIESCED = container_observe.QUIESCED
POST_CREATE_RAN = "post-create.ran"
"""In the run directory (the host's; read-only in the cell): the postCreate hooks that
succeeded in the current runtime, as JSON. A container made from that runtime's kept root
filesystem has run them already when they are unchanged, so it does not run them again."""
_CELL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_BUILD_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?|__base)?")
"""What a build is named after: a cell, CELL.SIDECAR for a sidecar's build, or CELL__base for
spec.build's own image when spec.features layer on it (controllers/feature_builds.py)."""
WATCHED_EVENTS = ("die", "oom", "kill", "stop", "pause", "unpause", "destroy", "start")
"""Engine events that change what DevCell observes of a cell's container."""


def _explanation(exc: BaseException) -> str:
    """The engine's own words for a failed request (its JSON `message`), else the SDK's."""
    explained = getattr(exc, "explanation", None)
    return str(explained or exc)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _split_reference(image: str) -> tuple[str, str | None]:
    """`repo[:tag][@digest]` as the pull API wants it: the repository, and the tag or digest
    (None: the engine's default, latest)."""
    if "@" in image:
        repository, _, digest = image.partition("@")
        return repository, digest
    head, colon, tag = image.rpartition(":")
    if colon and "/" not in tag:
        return head, tag
    return image, None


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


_BRIDGE_LOCK = threading.RLock()


def _fill_sidecars(layout: Layout, checkpoint_id: str, into: Path) -> None:
    """A fork's sidecar data from its checkpoint (container/sidecar_data.py), if it has any."""
    if (layout.checkpoint_sidecars(checkpoint_id)).is_dir():
        from devcell.backends.container import sidecar_data

        sidecar_data.fill(layout, checkpoint_id, into)


def _saving_sidecars(layout: Layout, volume_id: str, spec: dict[str, Any]
                     ) -> Callable[[Path], dict[str, Any]] | None:
    """What saves the sidecars' data into a checkpoint, for a cell with sidecar volumes."""
    if not spec.get("sidecars"):
        return None  # the common case imports nothing more
    from devcell.backends.container import sidecar_data

    wanted = sidecar_data.names(spec)
    return functools.partial(sidecar_data.save, layout, volume_id, wanted) if wanted else None


def _read_only(mount: dict[str, Any]) -> bool:
    """A bind mount's read-only flag, as create arguments or as the engine lists it."""
    if "ReadOnly" in mount:
        return bool(mount["ReadOnly"])
    return not mount.get("RW", True)


HOOK_TAIL = 400
HOOK_TIMEOUT_S = 60
"""A checkpoint hook's time limit when spec.hooks.timeoutSeconds does not say."""
"""Bytes of a failed hook's output kept for its error message."""


def post_create_failed(exc: HookFailed) -> Outputs:
    """A start's outputs when postCreate failed: which hook, its status and output's tail."""
    return {"hooks": 0, "postCreate": "Failed", "hook": " ".join(exc.argv)[:200],
            "exitCode": exc.code, "output": exc.output or str(exc)}


class _Tail:
    """The last `limit` bytes of a stream: a hook runs a cell's program, which may print
    without end (`cat /dev/zero`); the host keeps a bounded tail, never the whole output."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = b""

    def add(self, chunk: bytes) -> None:
        self.data = (self.data + chunk[-self.limit:])[-self.limit:]

    def text(self) -> str:
        return self.data.decode(errors="replace").strip()


class ContainerBackend:
    name = "container"
    capabilities = Capabilities(workspace_files=True, exec=True,
                                snapshot_consistency=Consistency.FILESYSTEM, parallel=8,
                                pulls_images=True, builds_images=True, keeps_rootfs=True,
                                service_state=True, start_hooks=True)

    def __init__(self, *, state_dir: Path) -> None:
        # An engine that is down is BackendUnavailable here, as planners expect, asked over
        # the socket; the SDK's client is made only when a call needs it.
        if not container_observe.reachable():
            _ = self.client  # an address only the SDK speaks: connect through it now
        self.layout = Layout(state_dir)
        self.store = WorkspaceStore(self.layout)
        self.owner = state_hash(state_dir)
        self._created: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        """cell id -> (id, bind mounts) of the container this instance created and has not
        yet started."""
        self._froze: dict[str, freezer.Freezer] = {}
        """cell id -> the cgroup freezer this instance froze the cell's container through
        (quiesce), until it thaws it: a checkpoint and a resume in the same process ask the
        group itself whether it is still frozen instead of asking the engine for the
        container again (a list call each). Only ever trusted while the group reads FROZEN,
        which proves the container is there and frozen; otherwise the engine is asked."""

    @functools.cached_property
    def client(self) -> docker.DockerClient:
        """The SDK's client, connected on first use (what needs only a list, a pause or an
        unpause goes over the socket without it: `container_observe`)."""
        return sdk.connect()

    @property
    def api(self) -> docker.api.APIClient:
        return self.client.api

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()

    # -- finding what is ours --------------------------------------------------------------

    def _owned_filter(self, **extra: str) -> dict[str, list[str]]:
        wanted = {MANAGED: "true", STATE: self.owner, **extra}
        return {"label": [f"{k}={v}" for k, v in wanted.items()]}

    def _is_owned(self, info: dict[str, Any], cell_id: str | None = None) -> bool:
        found = info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}
        return (found.get(MANAGED) == "true" and found.get(STATE) == self.owner
                and (cell_id is None or found.get(CELL_ID) == cell_id))

    def container_name(self, cell: CellRef) -> str:
        if not _CELL_NAME.fullmatch(cell.name):
            raise BackendRefused(f"refusing cell name {cell.name!r}: not a DNS-1123 label")
        tag = hashlib.sha256(f"{self.owner}/{safe_id('cell', cell.id)}".encode()).hexdigest()[:8]
        return f"devcell-{cell.name}-{tag}"

    def _find(self, cell: CellRef) -> dict[str, Any] | None:
        """This cell's container (as the engine lists it), found by its labels only."""
        safe_id("cell", cell.id)
        listed = container_observe.list_labelled(self.layout.state_dir,
                                                labels={CELL_ID: cell.id})
        if listed is None:  # an address only the SDK speaks
            with sdk.engine_calls(f"listing the containers of cell {cell.name}"):
                listed = self.api.containers(
                    all=True, filters=self._owned_filter(**{CELL_ID: cell.id}))
        found = [c for c in listed if self._is_owned(c, cell.id)]
        if len(found) > 1:
            names = ", ".join(n.lstrip("/") for c in found for n in c.get("Names", []))
            raise BackendRefused(f"several containers carry the labels of cell {cell.name} "
                                 f"({names}); remove the extras with docker rm -f")
        return found[0] if found else None

    def owned_containers(self) -> list[dict[str, str]]:
        """Every container DevCell made for this state directory: cell id, name, state.

        The state database is not consulted: a container whose cell is not recorded there
        (left by a crash between the engine call and the commit) is an orphan.
        """
        with sdk.engine_calls("listing DevCell's containers"):
            listed = self.api.containers(all=True, filters=self._owned_filter())
        return [{"cell_id": c["Labels"].get(CELL_ID, ""), "cell": c["Labels"].get(CELL, ""),
                 "name": (c.get("Names") or ["?"])[0].lstrip("/"), "state": c.get("State", ""),
                 "sidecar_of": c["Labels"].get(SIDECAR_OF, "")}
                for c in listed if self._is_owned(c)]

    def list_owned(self) -> list[Owned]:
        """Containers, volumes and checkpoints of this state directory, each with its owning
        cell id (from labels and marker files), for the orphan sweep after a crash."""
        out = [Owned(OwnedKind.CELL, c["cell_id"], c["cell_id"]) for c in self.owned_containers()
               if c["cell_id"]]
        runtimes = {item.id for item in out}
        # A sidecar left without its cell's container (a crash between the two removals):
        # its cell, as the sweep removes it (delete removes the sidecars by their label).
        out += [Owned(OwnedKind.CELL, cell_id, cell_id) for cell_id in dict.fromkeys(
            c["sidecar_of"] for c in self.owned_containers() if c["sidecar_of"])
            if cell_id not in runtimes]
        for kind, entries in ((OwnedKind.VOLUME, self.store.all_volumes()),
                              (OwnedKind.CHECKPOINT, self.store.all_checkpoints())):
            for resource_id, cell_id in entries:
                content = self.store.content(kind, resource_id)
                out.append(Owned(kind, resource_id, cell_id,
                                 None if content is None else str(content)))
        return out

    # -- observe ---------------------------------------------------------------------------

    def observe(self, cell: CellRef) -> Observed:
        info = self._find(cell)
        if info is None:
            return Observed(exists=False)
        observed = container_observe.observed(info, self.layout, cell.id)
        if cell.spec.get("sidecars"):
            observed.detail["sidecars"] = container_observe.sidecar_states(
                self._sidecars.listed(cell.id))
        return observed

    @functools.cached_property
    def _sidecars(self) -> Any:
        """The engine's side of the cells' sidecars (container/sidecars.py), made on first use."""
        from devcell.backends.container.sidecars import Sidecars

        return Sidecars(self)

    def api_list(self, *, size: bool = False) -> list[dict[str, Any]]:
        """The engine's list of this state directory's containers (container_observe's one
        call, through the SDK for engine addresses only the SDK speaks)."""
        with sdk.engine_calls("listing DevCell's containers"):
            listed: list[dict[str, Any]] = self.api.containers(
                all=True, size=size, filters=self._owned_filter())
        return listed

    def owns(self, info: dict[str, Any]) -> bool:
        return self._is_owned(info)

    def watch(self, on_event: Callable[[str], None], *, stop: threading.Event,
              on_open: Callable[[], None]) -> None:
        """Follow the engine's event stream for this state directory's containers (die, oom,
        kill, stop, pause, unpause, destroy, start) until `stop` is set; a lost stream (the
        engine restarted) raises BackendUnavailable."""
        filters = {"type": ["container"], "event": list(WATCHED_EVENTS),
                   "label": self._owned_filter()["label"]}
        with sdk.engine_calls("following the engine's events"):
            stream = self.client.events(filters=filters, decode=True)
        done = threading.Event()

        def close_on_stop() -> None:
            while not done.is_set():
                if stop.wait(0.2):
                    stream.close()
                    return

        threading.Thread(target=close_on_stop, name="events-close", daemon=True).start()
        on_open()
        try:
            with sdk.engine_calls("following the engine's events"):
                for event in stream:
                    attributes = (event.get("Actor") or {}).get("Attributes") or {}
                    if attributes.get(STATE) != self.owner:
                        continue
                    owner = attributes.get(CELL_ID) or attributes.get(SIDECAR_OF)
                    if owner:  # a sidecar's event is its cell's
                        on_event(owner)
        except BackendError:
            if stop.is_set():
                return  # closed by the stop: not a loss
            raise
        finally:
            done.set()
        if not stop.is_set():
            raise BackendUnavailable("the Docker engine's event stream ended (the engine "
                                     "stopped or restarted)")

    # -- volumes ---------------------------------------------------------------------------

    def volume_exists(self, volume_id: str) -> bool:
        return self.store.volume_exists(volume_id)

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs:
        live = None if from_checkpoint else live_folder.of_spec(cell.spec)
        made = self.store.create_volume(cell_id=cell.id, cell_name=cell.name,
                                        volume_id=volume_id, from_checkpoint=from_checkpoint,
                                        op_id=cell.op_id,
                                        seed=None if from_checkpoint or live else
                                        self._seed(cell),
                                        live=None if live is None else
                                        live_folder.checked(live, self.layout.state_dir),
                                        extra=None if from_checkpoint is None else
                                        functools.partial(_fill_sidecars, self.layout,
                                                          from_checkpoint))
        outputs: Outputs = {"volume": volume_id, "path": str(self.store.workspace_dir(volume_id)),
                            "restoredFrom": from_checkpoint, "files": made.stats.files,
                            "bytes": made.stats.size_bytes, "storage": made.storage}
        if made.copy_reason:
            outputs["copiedBecause"] = made.copy_reason
        return outputs

    def _seed(self, cell: CellRef) -> workspace_seed.Seed | None:
        """What a new workspace starts with, judged again now (workspace_seed.checked)."""
        from devcell.backends.host import git_source, workspace_seed  # only here

        seed = workspace_seed.of_spec(cell.spec, host_credentials=git_source.host_credentials(
            cell.owner, self.layout.state_dir, cell.spec.get("sharedWith")))
        return None if seed is None else workspace_seed.checked(seed, self.layout.state_dir)

    def _live_workspace(self, volume_id: str | None) -> Path | None:
        """The host folder a LIVE volume's workspace is, judged again now: it must still be
        allowed and still resolve to the path recorded when the volume was made."""
        recorded = None if volume_id is None else self.store.live_path(volume_id)
        if recorded is None:
            return None
        now = live_folder.checked(live_folder.LiveFolder(str(recorded)), self.layout.state_dir)
        if now.path != str(recorded):
            raise MountRefused(f"the workspace folder {live_folder.LiveFolder(str(recorded)).shown}"
                               f" now resolves to {now.shown} (a path component was replaced "
                               "by a symbolic link); put the folder back")
        return recorded

    def delete_volume(self, volume_id: str) -> Outputs:
        safe_id("volume", volume_id)
        with sdk.engine_calls(f"checking who mounts volume {volume_id}"):
            users = self.api.containers(all=True, filters=self._owned_filter(**{VOLUME: volume_id}))
        if users:
            names = ", ".join(n.lstrip("/") for c in users for n in c.get("Names", []))
            raise BackendError(f"volume {volume_id} is still mounted by {names}; delete the cell's "
                               "container first")
        self.store.delete_volume(volume_id)
        return {"volume": volume_id}

    def volumes_of(self, cell_id: str) -> list[str]:
        return self.store.volumes_of(cell_id)

    def workspace_changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        return self.store.changed_since(volume_id, checkpoint_id)

    # -- lifecycle -------------------------------------------------------------------------

    def _write_run_dir(self, cell: CellRef) -> None:
        run = self.layout.run_dir(cell.id)
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        _, secret = supervisor.split_env(cell.spec)
        script = supervisor.render_script(cell.name, cell.spec, gated=True)
        for name, text, mode in ((supervisor.SCRIPT, script, 0o644),
                                 (supervisor.SECRETS, supervisor.render_secrets(secret), 0o600)):
            tmp = run / f".{name}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, mode)
            os.rename(tmp, run / name)
        # The directory is mounted read-only; the container's root reads it as its owner.
        os.chmod(run, 0o755)

    def _hand_over(self, cell: CellRef, ids: tuple[int, int] | None) -> None:
        """Give a cell that does not run as root what it must write or read: the top of its
        workspace, its log directory and its secrets file (links never followed)."""
        if ids is None or ids == (0, 0):
            return
        paths = [self.layout.run_dir(cell.id) / supervisor.SECRETS]
        if cell.volume_id is not None:  # a host folder bound live is never handed over
            if self.store.live_path(cell.volume_id) is None:
                paths.append(self.layout.workspace(cell.volume_id))
            paths.append(self.layout.logs(cell.volume_id))
        for path in paths:
            os.chown(path, *ids, follow_symlinks=False)

    def _hand_over_named(self, cell: CellRef, container_id: str, user: str) -> None:
        """`spec.user` given by name: its ids from the image's own /etc/passwd and /etc/group
        (read from the created container, bounded), then `_hand_over`. A name the image does
        not know removes the container and is refused with the fix."""
        from devcell.backends.host import passwd

        found = passwd.ids(user, self._image_text(container_id, "/etc/passwd"),
                           self._image_text(container_id, "/etc/group") if ":" in user else None)
        if found is None:
            with sdk.engine_calls(f"removing container {container_id[:12]}"):
                self.api.remove_container(container_id, force=True)
            raise BackendRefused(f"spec.user {user}: the image's /etc/passwd (or /etc/group) "
                                 "has no such name; give a user the image has, or uid[:gid]")
        self._hand_over(cell, found)

    def _image_text(self, container_id: str, path: str) -> str | None:
        """A small regular file of the container's image (None if absent, not regular or over
        passwd.MAX_BYTES), through the engine's archive of it."""
        import tarfile

        from devcell.backends.host import passwd

        try:
            with sdk.engine_calls(f"reading {path} of the image"):
                stream, info = self.api.get_archive(container_id, path)
                if int(info.get("size") or 0) > passwd.MAX_BYTES:
                    return None
                data = bytearray()
                for chunk in stream:
                    data += chunk
                    if len(data) > passwd.MAX_BYTES + 65536:
                        return None
        except BackendNotFound:
            return None
        with tarfile.open(fileobj=io.BytesIO(bytes(data))) as archive:
            member = archive.next()
            if member is None or not member.isreg() or member.size > passwd.MAX_BYTES:
                return None
            handle = archive.extractfile(member)
            return handle.read(passwd.MAX_BYTES).decode(errors="replace") if handle else None

    def _policy(self) -> config.SecurityPolicy:
        """DevCell's configuration as it is now (an administrator may have tightened it)."""
        from devcell import config

        try:
            return config.load(self.layout.state_dir).security
        except ConfigError as exc:
            raise BackendError(f"DevCell's configuration cannot be used: {exc}") from None

    def _images_settings(self) -> config.ImageSettings:
        """The images section of DevCell's configuration (read when a pull or build needs
        it, so a checkpoint does not import the configuration's module)."""
        from devcell import config

        return config.load(self.layout.state_dir).images

    def bridge_name(self) -> str:
        """One bridge network per state directory: cells of other state dirs are not peers."""
        return f"{container_spec.BRIDGE_NETWORK}-{self.owner[:12]}"

    def _ensure_bridge(self) -> str:
        """The id of DevCell's bridge network, created once.

        Engines before API 1.44 allow several networks of one name, so the check-and-create
        runs under a process-wide lock (parallel workers would each create one) and
        containers name the network by id; of several, DevCell's own oldest is used.
        """
        name = self.bridge_name()
        with _BRIDGE_LOCK, sdk.engine_calls(f"creating the {name} network"):  # (re-entrant)
            found = [n for n in self.api.networks(names=[name]) if n.get("Name") == name]
            ours = sorted((n for n in found if self._is_owned(n)),
                          key=lambda n: (n.get("Created", ""), n["Id"]))
            if ours:
                return str(ours[0]["Id"])
            if found:
                raise BackendRefused(f"a network named {name} exists but does not carry "
                                     "DevCell's labels for this state directory; refusing to "
                                     "use it (remove or rename it yourself)")
            created = self.api.create_network(name, driver="bridge", check_duplicate=True,
                                              labels={MANAGED: "true", STATE: self.owner})
            return str(created["Id"])

    def _release_bridge(self) -> None:
        """Remove this state directory's bridge network once no container uses it: one
        network per state directory must not exhaust the engine's address pools."""
        name = self.bridge_name()
        with _BRIDGE_LOCK, sdk.engine_calls(f"removing the unused {name} network"):
            for network in self.api.networks(names=[name]):
                if network.get("Name") != name or not self._is_owned(network):
                    continue
                # By the containers' own network mode: the engine's network filter misses
                # containers that are created but not started (they have no endpoint yet).
                users = [c for c in self.api.containers(all=True)
                         if (c.get("HostConfig") or {}).get("NetworkMode") in (network["Id"], name)
                         or name in ((c.get("NetworkSettings") or {}).get("Networks") or {})]
                if not users:
                    self.api.remove_network(network["Id"])

    def create(self, cell: CellRef, runtime_hash: str) -> Outputs:
        return self._make(cell, runtime_hash, from_kept=False)

    def create_from_kept(self, cell: CellRef, runtime_hash: str) -> Outputs:
        """`create`, from the root filesystem `keep_rootfs` kept when there is one made on the
        cell's image (container/rootfs.py), else from the image."""
        return self._make(cell, runtime_hash, from_kept=True)

    def _make(self, cell: CellRef, runtime_hash: str, *, from_kept: bool) -> Outputs:
        """Create the cell's container (not started), its engine volumes (spec.volumes)
        before it and its sidecars after it. Idempotent: the same spec is a no-op."""
        if cell.spec.get("volumes"):
            self._ensure_volumes(cell)
        outputs = self._make_cell(cell, runtime_hash, from_kept=from_kept)
        fresh = self._created.get(cell.id)
        joins = fresh[0] if fresh is not None else None
        if joins is None:
            info = self._find(cell) if cell.spec.get("sidecars") else None
            joins = str(info["Id"]) if info is not None else None
        if joins is not None:
            made = self._sidecars.create(cell, self.container_name(cell), joins)
            outputs = {**outputs, **made}
        elif not cell.spec.get("sidecars"):
            self._sidecars.remove(cell)
        return outputs

    def _ensure_volumes(self, cell: CellRef) -> None:
        """The cell's engine volumes (spec.volumes), made with DevCell's labels when missing;
        one of the name that is not this cell's (its labels) is refused, never used."""
        from devcell.backends.container.labels import CELL_VOLUME

        for volume in cell.spec.get("volumes") or []:
            name = container_spec.volume_name(self.layout, cell.id, str(volume["name"]))
            wanted = {MANAGED: "true", STATE: self.owner, CELL_ID: cell.id, CELL: cell.name,
                      CELL_VOLUME: str(volume["name"]),
                      STATE_PATH: str(self.layout.state_dir.resolve())}
            with sdk.engine_calls(f"creating volume {name} of cell {cell.name}"):
                try:
                    found = self.api.inspect_volume(name)
                except Exception as exc:
                    if _status(exc) != 404:
                        raise
                    found = self.api.create_volume(name, driver="local", labels=wanted)
            labels = found.get("Labels") or {}
            if any(labels.get(k) != wanted[k] for k in (MANAGED, STATE, CELL_ID, CELL_VOLUME)):
                raise BackendRefused(f"an engine volume named {name} exists but does not carry "
                                     f"DevCell's labels for volume {volume['name']} of cell "
                                     f"{cell.name}; refusing to use it (remove it yourself)")

    def _remove_volumes(self, cell_ids: Callable[[str], bool]) -> list[str]:
        """Remove this state directory's engine volumes (spec.volumes) of the cells
        `cell_ids` says; the names removed. One a container still uses is left (its cell's
        delete removes it after)."""
        from devcell.backends.container.labels import CELL_VOLUME

        wanted = [f"{MANAGED}=true", f"{STATE}={self.owner}", CELL_VOLUME]
        answer = container_observe.list_volumes(wanted)  # over the socket: no SDK
        if answer is None:  # an address only the SDK speaks
            with sdk.engine_calls("listing DevCell's volumes"):
                answer = self.api.volumes(filters={"label": wanted}) or {}
        listed = answer.get("Volumes") or []
        removed = []
        for volume in listed:
            labels = volume.get("Labels") or {}
            if labels.get(STATE) != self.owner or not cell_ids(str(labels.get(CELL_ID) or "")):
                continue
            try:
                with sdk.engine_calls(f"removing volume {volume['Name']}"):
                    self.api.remove_volume(volume["Name"])
            except (BackendNotFound, BackendConflict):
                continue
            removed.append(str(volume["Name"]))
        return removed

    def _make_cell(self, cell: CellRef, runtime_hash: str, *, from_kept: bool) -> Outputs:
        """Create the cell's container (not started). Idempotent: the same spec is a no-op.

        The engine is asked to create first and the labels are listed only when the name is
        taken: every call costs the engine CPU that 20 cells starting at once compete for.
        """
        name = self.container_name(cell)
        if cell.volume_id is not None and not self.store.volume_exists(cell.volume_id):
            raise BackendNotFound(f"volume {cell.volume_id} of cell {cell.name} does not exist")
        if cell.volume_id is not None:
            self.store.ensure_mounted(cell.volume_id)
        policy = self._policy()
        live = self._live_workspace(cell.volume_id)
        kwargs = container_spec.create_kwargs(
            self.layout, name=name, cell_id=cell.id, cell_name=cell.name, spec=cell.spec,
            volume_id=cell.volume_id, runtime_hash=runtime_hash, op_id=cell.op_id, policy=policy,
            live=live, live_owner=None if live is None else live_folder.owner(live))
        container_spec.check_security(self.layout, kwargs, policy)
        if from_kept:  # the root filesystem kept_rootfs committed, when made on this image
            kept = self._kept_image(cell, kwargs["image"])
            if kept is not None:  # what it is made on, said by DevCell, not by the image
                kwargs["image"], kwargs["labels"][BASE_IMAGE], ran = kept
                kwargs["labels"][KEPT_ROOTFS] = "true"
                kwargs["labels"][POST_CREATE] = ran
        self._write_run_dir(cell)
        self._hand_over(cell, container_spec.user_ids(kwargs))
        bridged = kwargs.get("network") == container_spec.BRIDGE_NETWORK
        # A bridge cell is created under the bridge lock, so a delete that removes the
        # network when its last container goes cannot slip in between.
        with _BRIDGE_LOCK if bridged else contextlib.nullcontext():
            if bridged:
                kwargs["network"] = self._ensure_bridge()
            try:
                return self._create(cell, name, kwargs)
            except BackendConflict:
                pass  # the name is taken: by this cell's container, or by a stranger
        existing = self._find(cell)
        if existing is None:
            raise BackendRefused(f"a container named {name} exists but does not carry DevCell's "
                                 "labels for this state directory; refusing to touch it "
                                 "(remove or rename it yourself)")
        if (existing.get("Labels") or {}).get(RUNTIME_HASH) == runtime_hash:
            return {"container": name, "created": False}
        if existing.get("State") in ("running", "paused"):
            raise BackendError(f"cell {cell.name} runs from another spec; stop and delete it "
                               "before creating it again")
        self._remove(existing["Id"], cell)
        with _BRIDGE_LOCK if bridged else contextlib.nullcontext():
            if bridged:
                kwargs["network"] = self._ensure_bridge()
            return self._create(cell, name, kwargs)

    def keep_rootfs(self, cell: CellRef) -> Outputs:
        """Before a recreate: commit the cell's (stopped) container as its kept root
        filesystem when the new container is made on the same image, else drop what was
        kept (container/rootfs.py). Outputs say which, and why."""
        from devcell.backends.container import rootfs

        info = self._find(cell)
        if info is None:
            return {"kept": False, "why": "the cell had no container: its root filesystem "
                                          "starts fresh from the image"}
        image = self.image_info(container_spec.image_of(cell.spec))
        if image is None:
            raise BackendNotFound(f"image {container_spec.image_of(cell.spec)} of cell "
                                  f"{cell.name} is not on the engine")
        with sdk.engine_calls(f"looking up the container of cell {cell.name}"):
            config = self.api.inspect_container(info["Id"]).get("Config") or {}
        ran = _read_private(self.layout.run_dir(cell.id), POST_CREATE_RAN) or ""
        return rootfs.keep(self.api, info, owner=self.owner, cell_id=cell.id,
                           cell_name=cell.name, image=image, container_config=config,
                           post_create=_digest(ran) if ran else "")

    def _kept_image(self, cell: CellRef, image: str) -> tuple[str, str, str] | None:
        """The cell's kept root filesystem made on `image` (its tag), that image's id (which
        the new container's BASE_IMAGE label says it is made on) and the digest of the
        postCreate hooks that succeeded in it; None when none was kept on it."""
        from devcell.backends.container import rootfs

        found = self.image_info(image)
        if found is None:
            return None
        image_id = str(found.get("Id") or "")
        kept = rootfs.kept_for(self.api, owner=self.owner, cell_id=cell.id, image_id=image_id)
        if kept is None:  # one kept on another image: its container is gone now
            rootfs.drop(self.api, owner=self.owner, cell_id=cell.id)
            return None
        return kept[0], image_id, kept[1]

    def engine_create(self, kwargs: dict[str, Any], action: str) -> str:
        """Create a container from `create_kwargs`-shaped arguments (checked by the caller);
        its id. A sidecar's (container/sidecars.py): the SDK's argument mapping is here."""
        with sdk.engine_calls(action):
            from docker.models.containers import _create_container_args

            created = self.api.create_container(**_create_container_args(
                dict(kwargs, version=self.api._version)))
        return str(created["Id"])

    def _create(self, cell: CellRef, name: str, kwargs: dict[str, Any]) -> Outputs:
        with sdk.engine_calls(f"creating container {name} from image {kwargs['image']}"):
            from docker.models.containers import _create_container_args

            created = self.api.create_container(**_create_container_args(
                dict(kwargs, version=self.api._version)))
        container_id: str = created["Id"]
        self._reset_post_create(cell, kept_digest=kwargs["labels"].get(POST_CREATE) or "")
        user = str(cell.spec.get("user") or "")
        if user and container_spec.user_ids(kwargs) is None:
            self._hand_over_named(cell, container_id, user)
        self._created[cell.id] = (container_id, list(kwargs["mounts"]))
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "created container {} ({})", name, container_id[:12])
        return {"container": name, "id": container_id[:12], "created": True}

    def start(self, cell: CellRef) -> Outputs:
        if cell.volume_id is not None and self.store.volume_exists(cell.volume_id):
            # A fork's overlay is gone after a reboot: mounted again before the container
            # binds the directory (unmounted, it is an empty directory beside the files).
            self.store.ensure_mounted(cell.volume_id)
        fresh = self._created.pop(cell.id, None)
        if fresh is not None:  # created by this backend moments ago: ours, and never started
            container_id, mounts = fresh
            self._check_mounts(cell, mounts)
            try:
                with sdk.engine_calls(f"starting cell {cell.name}"):
                    self.api.start(container_id)
                joined = self._start_sidecars(cell, container_id, rejoin=True)
                ran = self._after_start(cell, container_id, first=True)
                return {"container": self.container_name(cell), **joined, **ran}
            except BackendNotFound:
                pass  # removed meanwhile: look it up by its labels
        info = self._find(cell)
        if info is None:
            raise BackendNotFound(f"cell {cell.name} has no container to start")
        state = info.get("State")
        if state not in ("paused", "running"):
            self._check_mounts(cell, info.get("Mounts") or [])
        with sdk.engine_calls(f"starting cell {cell.name}"):
            if state in ("paused", "running"):
                self._thaw(info, cell)
            else:
                self.api.start(info["Id"])
        joined = self._start_sidecars(cell, info["Id"], rejoin=state not in ("paused", "running"))
        ran = {"hooks": 0}
        if state not in ("paused", "running"):
            ran = self._after_start(cell, info["Id"], first=state == "created")
        return {"container": self.container_name(cell), **joined, **ran}

    def _start_sidecars(self, cell: CellRef, container_id: str, *, rejoin: bool) -> Outputs:
        """The sidecars, once the cell's container runs (they join its network namespace);
        before its hooks, so a postCreate hook finds its database up."""
        if not cell.spec.get("sidecars"):
            return {}
        return dict(self._sidecars.start(cell, self.container_name(cell), container_id,
                                         rejoin=rejoin))

    def _after_start(self, cell: CellRef, container_id: str, *, first: bool,
                     rerun: bool = False) -> Outputs:
        """postCreate hooks after a container's first start (then its services may start),
        then postStart hooks after every start. A failed postCreate leaves the container
        running without its services, so the developer can get in and see why: the start
        succeeds and says so in its outputs (the controller keeps the cell not Ready until the
        hooks are run again). A failed postStart stops it (the retry starts it again)."""
        outputs: Outputs = {"hooks": 0}
        if first:
            outputs = self._post_create(cell, container_id, rerun=rerun)
            if outputs.get("postCreate") == "Failed":
                return outputs
        try:
            ran = self._run_hooks(cell, container_id, "postStart")
        except BackendError:
            with sdk.engine_calls(f"stopping cell {cell.name} after its postStart hook failed"):
                self.api.stop(container_id, timeout=5)
            raise
        return dict(outputs, hooks=int(outputs.get("hooks") or 0) + ran)

    def _post_create(self, cell: CellRef, container_id: str, *, rerun: bool = False
                     ) -> Outputs:
        """Run postCreate; on success release the services (the gate in the run directory).
        A runtime made from a kept root filesystem in which these very hooks succeeded has
        its gate already (_reset_post_create): they are not run twice on the same files."""
        run = self.layout.run_dir(cell.id)
        if not rerun and (run / supervisor.GATE).exists():
            return {"hooks": 0, "postCreate": None, "postCreateKept": True}
        try:
            ran = self._run_hooks(cell, container_id, "postCreate")
        except HookFailed as exc:
            return post_create_failed(exc)
        if ran:
            _write_private(run, POST_CREATE_RAN, _post_create_text(cell.spec))
        (run / supervisor.GATE).touch(mode=0o644)
        return {"hooks": ran, "postCreate": "Succeeded" if ran else None}

    def _reset_post_create(self, cell: CellRef, *, kept_digest: str) -> None:
        """A new runtime has not run its postCreate hooks, so its services wait for them,
        unless it is made from a kept root filesystem in which the same hooks succeeded
        (`kept_digest`, what they installed is there): then its gate is open from the start."""
        run = self.layout.run_dir(cell.id)
        text = _post_create_text(cell.spec)
        if text and kept_digest and kept_digest == _digest(text):
            _write_private(run, POST_CREATE_RAN, text)
            (run / supervisor.GATE).touch(mode=0o644)
            return
        (run / supervisor.GATE).unlink(missing_ok=True)
        (run / POST_CREATE_RAN).unlink(missing_ok=True)

    def rerun_hooks(self, cell: CellRef) -> Outputs:
        """postCreate (then postStart) run again in the running container: `devcell cell
        rerun-hooks`. A failure is an outcome here too, not an error: the cell stays up."""
        info = self._find(cell)
        if info is None or info.get("State") != "running":
            raise BackendError(f"cell {cell.name} is not running; start it with "
                               f"`devcell cell start {cell.name}`")
        return self._after_start(cell, info["Id"], first=True, rerun=True)

    def restart_service(self, cell: CellRef, service: str) -> Outputs:
        """The supervisor's --restart, run in the cell: the service's process (or its
        back-off) is ended and started again at once."""
        info = self._find(cell)
        if info is None or info.get("State") != "running":
            raise BackendError(f"cell {cell.name} is not running; start it with "
                               f"`devcell cell start {cell.name}`")
        out = _Tail(HOOK_TAIL)
        code = self._exec(info["Id"], supervisor.restart_argv(service), out.add, out.add,
                          action=f"restarting service {service} of cell {cell.name}",
                          time_limit=30.0)
        if code != 0:
            raise BackendError(f"restarting service {service} of cell {cell.name}: "
                               f"{out.text() or f'status {code}'}")
        return {"service": service, "restarted": True}

    def _own_source(self, source: str) -> bool:
        """Whether a bind source is one of DevCell's directories, judged by the path as written
        (resolving it first would let a link into the state directory pass as DevCell's)."""
        roots = {str(self.layout.state_dir), str(self.layout.state_dir.resolve())}
        return any(source.startswith(root.rstrip("/") + "/") for root in roots)

    def _check_mounts(self, cell: CellRef, mounts: list[dict[str, Any]]) -> None:
        """Re-check every bind mount just before the engine starts the container.

        The engine resolves a bind mount's source again at each start, following symbolic
        links: a directory swapped for a link since create (by this cell through another
        writable mount, or by anyone who can write there) would mount whatever it points to
        now. A source must still resolve to itself, and still be allowed.
        """
        policy = self._policy()
        for mount in mounts:
            if mount.get("Type") != "bind":
                continue
            source = str(mount.get("Source", ""))
            real = os.path.realpath(source)
            if self._own_source(source) and self.layout.contains(Path(real)):
                problem: str | None = None  # DevCell's own (workspace, logs, run directory)
            elif real != source:  # host sources are recorded resolved, at create
                problem = (f"its source {source} now resolves to {real} (a path component was "
                           "replaced by a symbolic link)")
            else:
                problem = security.host_path_problem(source, policy, self.layout.state_dir)
            if problem:
                raise MountRefused(f"refusing to start cell {cell.name}: bind mount of {source}: "
                                   f"{problem}; fix the host path and recreate the cell (delete "
                                   "and apply it again)")
        hosts = [(str(m.get("Source", "")), _read_only(m)) for m in mounts
                 if m.get("Type") == "bind" and not self._own_source(str(m.get("Source", "")))]
        if hosts:
            self._check_shared_mounts(cell, hosts)

    def _check_shared_mounts(self, cell: CellRef, hosts: list[security.HostMount]) -> None:
        """No other DevCell cell on this engine (of any state directory: only listed, never
        touched) may mount an overlapping host path unless both are read-only: a writable
        one could swap a directory of the other's source for a link between the check above
        and the engine's start."""
        with sdk.engine_calls("listing DevCell's containers"):
            listed = self.api.containers(all=True, filters={"label": [f"{MANAGED}=true"]})
        for other in listed:
            labels = other.get("Labels") or {}
            owner = labels.get(CELL_ID)
            if labels.get(STATE) == self.owner and owner == cell.id:
                continue
            theirs = [(str(m.get("Source", "")), _read_only(m)) for m in other.get("Mounts") or []
                      if m.get("Type") == "bind"
                      and not self._own_source(str(m.get("Source", "")))]
            for mine in hosts:
                for their in theirs:
                    name = labels.get(CELL, owner or "?")
                    if labels.get(STATE) != self.owner:
                        name += f" (of state directory {labels.get(STATE_PATH, '?')})"
                    problem = security.shared_mount_problem(mine, their, name)
                    if problem:
                        raise MountRefused(f"refusing to start cell {cell.name}: {problem}")

    def stop(self, cell: CellRef) -> Outputs:
        if cell.spec.get("sidecars"):
            self._sidecars.stop(cell)  # first: their network is the cell container's
        info = self._find(cell)
        if info is None or info.get("State") not in ("running", "paused", "restarting"):
            return {}
        action = f"stopping cell {cell.name}"
        try:
            self._thaw(info, cell)  # a frozen process cannot handle SIGTERM
            # Over the socket first (`cell sleep` stops the container: no SDK), else the SDK.
            if not container_observe.stop(info["Id"], container_spec.STOP_TIMEOUT, action):
                with sdk.engine_calls(action):
                    self.api.stop(info["Id"], timeout=container_spec.STOP_TIMEOUT)
        except BackendNotFound:
            pass  # removed meanwhile: stopped all the same
        (self.layout.run_dir(cell.id) / QUIESCED).unlink(missing_ok=True)
        return {}

    def _remove(self, container_id: str, cell: CellRef) -> None:
        """Over the socket first (`cell sleep` needs no SDK), else through the SDK."""
        action = f"removing the container of cell {cell.name}"
        found = freezer.of_container(container_id)  # a frozen process may not even die
        if found is not None and found.state() is not freezer.State.THAWED:
            found.thaw()
        try:
            if not container_observe.remove(container_id, action):
                with sdk.engine_calls(action):
                    self.api.remove_container(container_id, force=True)
        except BackendNotFound:
            pass

    def delete(self, cell: CellRef) -> Outputs:
        removed = self._sidecars.remove(cell)  # whatever the spec says now: by their labels
        info = self._find(cell)
        if info is not None:
            self._remove(info["Id"], cell)
            networks = (info.get("NetworkSettings") or {}).get("Networks") or {}
            if self.bridge_name() in networks:
                try:
                    self._release_bridge()
                except BackendError as exc:  # the cell is gone; the network can wait
                    logger.bind(backend=self.name, cell=cell.name).warning(
                        "bridge network kept: {}", exc)
        run = self.layout.run_dir(cell.id)
        for name in (supervisor.SCRIPT, supervisor.SECRETS, supervisor.GATE, QUIESCED,
                     POST_CREATE_RAN):
            (run / name).unlink(missing_ok=True)
            (run / f".{name}.tmp").unlink(missing_ok=True)  # a write a kill interrupted
        if run.is_dir() and not any(run.iterdir()):
            run.rmdir()
        return {"sidecars": removed} if removed else {}

    # -- checkpoints -----------------------------------------------------------------------

    def _freeze(self, container_id: str, cell: CellRef) -> str:
        """Freeze a container's processes: through its cgroup freezer (what the engine's
        pause writes, without the engine's round trip: container/freezer.py), else the engine's pause;
        which of the two ("cgroup", "engine")."""
        found = freezer.of_container(container_id)
        if found is not None and found.freeze():
            self._froze[cell.id] = found
            return "cgroup"
        self._pause(container_id, f"freezing cell {cell.name}")
        return "engine"

    def _still_frozen(self, cell: CellRef) -> freezer.Freezer | None:
        """The freezer this instance froze the cell's container through, if its group still
        reads FROZEN (the container is there, and frozen); else None (ask the engine)."""
        found = self._froze.get(cell.id)
        if found is None or found.state() is not freezer.State.FROZEN:
            return None
        return found

    def _thaw(self, info: dict[str, Any], cell: CellRef) -> None:
        """Thaw a container whichever way it was frozen: the engine's pause, or the cgroup
        freezer behind the engine's back (which still lists it running)."""
        self._froze.pop(cell.id, None)
        if info.get("State") == "paused":
            self._unpause(info["Id"], f"unfreezing cell {cell.name}")
        elif info.get("State") in ("running", "restarting"):
            found = freezer.of_container(str(info.get("Id", "")))
            if found is not None and found.state() is not freezer.State.THAWED:
                found.thaw()

    @staticmethod
    def _frozen_behind_the_engine(info: dict[str, Any]) -> bool:
        found = freezer.of_container(str(info.get("Id", "")))
        return found is not None and found.state() is freezer.State.FROZEN

    def _pause(self, container_id: str, action: str) -> None:
        """Freeze a container: over the socket (no SDK on the snapshot path), else the SDK."""
        if not container_observe.pause(container_id, action):
            with sdk.engine_calls(action):
                self.api.pause(container_id)

    def _unpause(self, container_id: str, action: str) -> None:
        if not container_observe.unpause(container_id, action):
            with sdk.engine_calls(action):
                self.api.unpause(container_id)

    def _hooks(self, cell: CellRef, which: str) -> list[list[str]]:
        hooks = (cell.spec.get("hooks") or {}).get(which) or []
        return [list(h) for h in hooks]

    def _run_hooks(self, cell: CellRef, container_id: str, which: str) -> int:
        limit = float((cell.spec.get("hooks") or {}).get("timeoutSeconds", HOOK_TIMEOUT_S))
        for argv in self._hooks(cell, which):
            out = _Tail(HOOK_TAIL)
            code = self._exec(container_id, argv, out.add, out.add,
                              action=f"{which} hook of cell {cell.name}", time_limit=limit)
            if code != 0:
                tail = out.text()
                for value in supervisor.split_env(cell.spec)[1].values():
                    if len(value) >= 4:  # a hook that prints a secret must not record it
                        tail = tail.replace(value, "<redacted>")
                raise HookFailed(f"{which} hook {argv!r} of cell {cell.name} exited with "
                                 f"status {code}" + (f": {tail}" if tail else ""),
                                 which=which, argv=argv, code=code, output=tail)
        return len(self._hooks(cell, which))

    def quiesce(self, cell: CellRef) -> Outputs:
        # No syncfs here: the checkpoint reads the page cache, and makes itself durable with
        # one syncfs before it is renamed into place (workspaces.WorkspaceStore._build).
        info = self._find(cell)
        if info is None or info.get("State") not in ("running", "paused"):
            return {"frozen": False}
        if info.get("State") == "paused":
            return {"frozen": True, "hooks": 0}
        marker = self.layout.run_dir(cell.id) / QUIESCED
        marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        marker.touch()  # before the freeze: a kill from here on leaves the cell to resume
        hooks = self._run_hooks(cell, info["Id"], "preCheckpoint")
        if not cell.spec.get("sidecars"):
            self._freeze(info["Id"], cell)
            return {"frozen": True, "hooks": hooks}
        # The cell's hooks, then each sidecar's (a database's checkpoint); then all frozen
        # together, the cell first (its writes to a sidecar stop before the sidecar's do).
        hooks += self._sidecars.run_hooks(cell, "preCheckpoint")
        self._freeze(info["Id"], cell)
        frozen = self._sidecars.freeze(cell)
        return {"frozen": True, "hooks": hooks, "sidecarsFrozen": frozen}

    def _info(self, checkpoint_id: str, meta: dict[str, Any]) -> CheckpointInfo:
        return CheckpointInfo(ref=str(self.layout.checkpoint(checkpoint_id)),
                              consistency=Consistency.FILESYSTEM,
                              size_bytes=int(meta.get("size_bytes", 0)),
                              files=int(meta.get("files", 0)))

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        existing = self.store.find_checkpoint(checkpoint_id)
        if existing is not None:
            return self._info(checkpoint_id, existing)
        if cell.volume_id is None:
            raise BackendError(f"cell {cell.name} has no workspace volume to checkpoint")
        # Frozen by this instance's quiesce and still so: nothing to ask the engine.
        info = None if self._still_frozen(cell) is not None else self._find(cell)
        # Never copy a workspace that running services may be writing: freeze it for the copy
        # if quiesce did not (the controller always quiesces first; this keeps the promise).
        thaw = (info is not None and info.get("State") == "running"
                and not self._frozen_behind_the_engine(info))
        marker = self.layout.run_dir(cell.id) / QUIESCED
        made_marker = False
        if thaw and not marker.exists():  # a kill while frozen: observed frozen, resumed
            marker.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            marker.touch()
            made_marker = True
        how = self._freeze(info["Id"], cell) if thaw and info is not None else None
        save = _saving_sidecars(self.layout, cell.volume_id, cell.spec)
        # frozen here or before (quiesce, the engine's pause), or not running at all; a
        # container the engine is restarting may run again under the walk
        frozen = info is None or info.get("State") != "restarting"
        try:
            if how is not None and cell.spec.get("sidecars"):
                self._sidecars.freeze(cell)
            meta = self.store.checkpoint(
                checkpoint_id=checkpoint_id, cell_id=cell.id, volume_id=cell.volume_id,
                cell_name=cell.name, extra=save, frozen=frozen)
        finally:
            if how is not None and info is not None:
                if cell.spec.get("sidecars"):
                    self._sidecars.thaw(cell)
                self._thaw(dict(info, State="paused" if how == "engine" else "running"), cell)
            if made_marker:
                marker.unlink(missing_ok=True)
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "checkpoint {}: {} files, {} bytes in {} ms", checkpoint_id, meta["files"],
            meta["size_bytes"], meta.get("copy_ms"))
        return self._info(checkpoint_id, meta)

    def resume(self, cell: CellRef) -> Outputs:
        marker = self.layout.run_dir(cell.id) / QUIESCED
        held = self._still_frozen(cell)
        if (held is not None and not cell.spec.get("sidecars")
                and not self._hooks(cell, "postCheckpoint")):
            # frozen by this instance's quiesce, and its group still reads so: the container
            # is there and running under the freeze; thawed without asking the engine
            self._froze.pop(cell.id, None)
            held.thaw()
            marker.unlink(missing_ok=True)
            return {"hooks": 0}
        info = self._find(cell)
        if info is None:
            marker.unlink(missing_ok=True)
            return {}
        self._thaw(info, cell)
        if cell.spec.get("sidecars"):
            self._sidecars.thaw(cell)
        hooks = 0
        if marker.exists():
            marker.unlink()
            if info.get("State") in ("running", "paused"):
                hooks = self._run_hooks(cell, info["Id"], "postCheckpoint")
                if cell.spec.get("sidecars"):
                    hooks += self._sidecars.run_hooks(cell, "postCheckpoint")
        return {"hooks": hooks}

    def checkpoint_exists(self, checkpoint_id: str) -> bool:
        return self.store.find_checkpoint(checkpoint_id) is not None

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        meta = self.store.find_checkpoint(checkpoint_id)
        return None if meta is None else self._info(checkpoint_id, meta)

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs:
        forks = self.store.checkpoints_in_use().get(checkpoint_id)
        if forks:
            raise BackendRefused(f"checkpoint {checkpoint_id} is the lower layer of fork "
                                 f"volume(s) {', '.join(forks)}; delete those cells first")
        self.store.delete_checkpoint(checkpoint_id)
        return {"checkpoint": checkpoint_id}

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        return self.store.checkpoint_files(checkpoint_id)

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path | None:
        path = self.layout.checkpoint_sidecars(checkpoint_id)
        return path if path.is_dir() and not path.is_symlink() else None

    def release_checkpoint_files(self, checkpoint_id: str) -> None:
        self.store.release_view(checkpoint_id)

    def import_checkpoint(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                          fill: Fill) -> CheckpointInfo:
        meta = self.store.import_checkpoint(checkpoint_id=checkpoint_id, cell_id=cell_id,
                                            fill=fill, sidecars=True)
        logger.bind(backend=self.name, cell=cell_name).info(
            "checkpoint {} imported: {} files, {} bytes", checkpoint_id, meta["files"],
            meta["size_bytes"])
        return self._info(checkpoint_id, meta)

    def restore_workspace(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        """Replace the cell's workspace by the checkpoint's tree (Restoring): refused while
        its container runs, since its processes would see the tree change under them."""
        from devcell.backends.container import workspace_restore

        if cell.volume_id is None:
            raise BackendError(f"cell {cell.name} has no workspace volume to restore into")
        info = self._find(cell)
        if info is not None and info.get("State") in ("running", "paused", "restarting"):
            raise BackendRefused(f"cell {cell.name} is running; its workspace is restored "
                                 "only while it is stopped")
        made = workspace_restore.restore(self.store, cell.volume_id, checkpoint_id)
        from devcell.backends.container import sidecar_data

        restored = sidecar_data.restore(self.layout, cell.volume_id, checkpoint_id)
        logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-").info(
            "workspace restored from {} ({}, {} files)", checkpoint_id, made.how, made.files)
        return {"volume": cell.volume_id, "restoredFrom": checkpoint_id, "files": made.files,
                "bytes": made.bytes, "storage": made.storage, "how": made.how,
                **({"sidecars": ",".join(restored)} if restored else {})}

    def workspace_changes(self, volume_id: str, checkpoint_id: str | None) -> Changes:
        """What the workspace holds that the checkpoint does not (paths, by name)."""
        from devcell.backends.container import workspace_restore

        if not self.store.volume_exists(volume_id):
            return Changes()
        self.store.ensure_mounted(volume_id)
        saved = (self.store.tree_of(checkpoint_id)
                 if checkpoint_id is not None and self.store.find_checkpoint(checkpoint_id)
                 else None)
        rewritten = (frozenset(self.store.rewritten_since(volume_id, checkpoint_id))
                     if saved is not None and checkpoint_id is not None else frozenset())
        return workspace_restore.changes(self.store.workspace_dir(volume_id), saved, rewritten)

    def exclusive_bytes(self, kind: OwnedKind, resource_id: str) -> int:
        """Bytes removing a volume or checkpoint would free (Measuring; `devcell gc`)."""
        from devcell.backends.host import usage

        if kind is OwnedKind.VOLUME:
            return usage.exclusive_bytes(self.layout.volume(resource_id))
        if kind is OwnedKind.CHECKPOINT:  # a tree other checkpoints name is not freed
            return sum(usage.exclusive_bytes(path)
                       for path in self.store.freed_by_deleting(resource_id))
        return 0

    # -- exec and logs (beyond the Backend protocol: `devcell exec` and `devcell logs`) -----

    _STDERR = 2
    """Stream number of standard error in the engine's multiplexed (non-terminal) stream."""
    _RESIZE_TICK_S = 0.1
    _RESIZE_TRIES = 20

    def _exec(self, container_id: str, argv: list[str], out: Callable[[bytes], object],
              err: Callable[[bytes], object], *, action: str, stdin: BinaryIO | None = None,
              terminal: Terminal | None = None, time_limit: float | None = None,
              options: ExecOptions | None = None, wrap: bool = True) -> int:
        """Run `argv` through the supervisor's --exec (the cell's environment, secrets
        included) on the engine's hijacked connection; its exit status.

        The output is read on this thread; `stdin` is copied on a daemon thread (it may block
        on a terminal long after the command ended) and `terminal`'s size on another. Past
        `time_limit` seconds the command and everything it started are killed and the call
        raises: a hook the cell wrote must not hold a host command forever. `options` adds
        environment, a working directory and a user (the engine's own exec fields), and a
        hang-up that kills the command as the time limit does.
        """
        tty = terminal is not None
        extra: dict[str, Any] = {}
        if options is not None:
            if options.env:
                extra["environment"] = [f"{name}={value}" for name, value in options.env]
            if options.workdir:
                extra["workdir"] = options.workdir
            if options.user:
                extra["user"] = options.user
        with sdk.engine_calls(action):
            exec_id = self.api.exec_create(container_id,
                                           supervisor.exec_argv(argv) if wrap else argv,
                                           stdin=stdin is not None, stdout=True, stderr=True,
                                           tty=tty, **extra)["Id"]
            conn = self.api.exec_start(exec_id, socket=True, tty=tty)
        reader, raw = self._hijacked(conn)
        done = threading.Event()
        window = None
        expired = threading.Event()
        timer = None
        if time_limit is not None:
            timer = threading.Timer(time_limit, self._expire, args=(exec_id, raw, expired))
            timer.daemon = True
            timer.start()
        if options is not None and options.hang_up is not None:
            threading.Thread(target=self._end_on_hang_up, daemon=True,
                             args=(options.hang_up, done, exec_id, raw),
                             name="devcell-exec-hang-up").start()
        try:
            if stdin is not None:
                threading.Thread(target=self._feed, args=(stdin, raw), daemon=True,
                                 name="devcell-exec-stdin").start()
            if terminal is not None:
                window = threading.Thread(target=self._follow_window,
                                          args=(exec_id, terminal, done), daemon=True,
                                          name="devcell-exec-window")
                window.start()
            for stream, data in self._frames(reader, tty=tty, action=action):
                (err if stream == self._STDERR else out)(data)
        finally:
            done.set()
            if terminal is not None:
                terminal.resized.set()  # wake the window thread: it sees `done` and ends
            if window is not None:
                window.join(timeout=10)  # the client is not shared with it past this point
            if timer is not None:
                timer.cancel()
            self._hang_up(conn, raw)
        if expired.is_set():
            raise HookFailed(f"{action}: {argv!r} did not finish within {time_limit:g} s "
                             "(spec.hooks.timeoutSeconds); it was killed", which=action,
                             argv=argv, code=None, output="")
        return self._exit_code(exec_id, action)

    def _end_on_hang_up(self, hang_up: threading.Event, done: threading.Event, exec_id: str,
                        raw: Any) -> None:
        while not done.is_set():
            if hang_up.wait(0.2):
                if not done.is_set():
                    self._kill(exec_id, raw)
                return

    def _expire(self, exec_id: str, raw: Any, expired: threading.Event) -> None:
        """Kill a command past its time limit, with what it started, and end its stream."""
        expired.set()
        self._kill(exec_id, raw)

    def _kill(self, exec_id: str, raw: Any) -> None:
        """Kill the command and what it started, and wake the thread reading its output."""
        from devcell.backends.host import proctree

        try:
            pid = int(self.api.exec_inspect(exec_id).get("Pid") or 0)
        except ValueError:
            pid = 0
        except sdk.sdk_errors():
            pid = 0
        if pid > 0:
            proctree.kill_tree(pid)
        self._wake(raw)

    @staticmethod
    def _wake(raw: Any) -> None:
        """End the output the reading thread waits for, from another thread (the time limit's
        timer, a hang-up): the socket is shut down, never closed. The reader then sees the end
        of the stream and closes the connection itself; closing it under the reader made its
        next read fail with `ValueError: I/O operation on closed file`."""
        try:
            raw.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

    @staticmethod
    def _hijacked(conn: Any) -> tuple[Any, Any]:
        """The reader and the socket of an exec's hijacked connection.

        Read through http.client's buffered reader, not the raw socket docker-py hands back:
        output that arrived with the 101 response's headers already sits in that buffer and
        would be lost (docker/docker-py#3332: empty output at random).
        """
        response = getattr(conn, "_response", None)
        reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        if reader is None:
            reader = conn.makefile("rb") if hasattr(conn, "makefile") else io.BufferedReader(conn)
        raw = getattr(conn, "_sock", conn)
        raw.settimeout(None)  # the client's timeout must not end a quiet interactive session
        return reader, raw

    @staticmethod
    def _frames(reader: Any, *, tty: bool, action: str) -> Iterator[tuple[int, bytes]]:
        """(stream, bytes) as the engine sends them: raw bytes from a terminal, otherwise
        frames of an 8-byte header (stream number, 3 zero bytes, big-endian size) and data."""
        try:
            if tty:
                while chunk := reader.read1(65536):
                    yield 1, chunk
                return
            while len(header := reader.read(8)) == 8:
                size = int.from_bytes(header[4:], "big")
                data = reader.read(size) if size else b""
                if len(data) < size:
                    break
                if data:
                    yield header[0], data
        except OSError as exc:
            raise BackendError(f"{action}: the connection to the Docker engine broke ({exc})"
                               ) from None

    @staticmethod
    def _feed(source: BinaryIO, raw: Any) -> None:
        """Copy `source` to the command's stdin, then half-close: end of input in the cell.

        A file descriptor is read with os.read, so a terminal's keystrokes and a pipe's
        chunks go as they come instead of waiting for a full buffer.
        """
        try:
            fd: int | None = source.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        try:
            while chunk := (os.read(fd, 65536) if fd is not None else source.read(65536)):
                raw.sendall(chunk)
            raw.shutdown(_socket.SHUT_WR)
        except (OSError, ValueError):
            pass  # the command ended, or we hung up, first: the rest of the input is not wanted

    def _follow_window(self, exec_id: str, terminal: Terminal, done: threading.Event) -> None:
        """Keep the cell's terminal the size of the caller's: at start, then on each resize.

        Best effort: a resize refused (the process not started yet) is tried again a tick
        later, a few times; a wrong size is no reason to end the session.
        """
        pending, tries = True, 0
        while not done.is_set():
            if terminal.resized.is_set():
                terminal.resized.clear()
                pending, tries = True, 0
            if pending and not done.is_set():
                size = terminal.size()
                try:
                    if size is not None:
                        self.api.exec_resize(exec_id, height=size[0], width=size[1])
                    pending = False
                except sdk.sdk_errors():
                    tries += 1
                    pending = tries < self._RESIZE_TRIES
            terminal.resized.wait(self._RESIZE_TICK_S if pending else None)

    @staticmethod
    def _hang_up(conn: Any, raw: Any) -> None:
        """Close the hijacked connection; the shutdown wakes a feeder blocked in sendall."""
        try:
            raw.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        for closable in (getattr(conn, "_response", None), conn, raw):  # outermost first
            try:
                if closable is not None:
                    closable.close()
            except (OSError, ValueError):
                pass

    def _exit_code(self, exec_id: str, action: str) -> int:
        """The command's exit status; the engine may record it a moment after the output ends."""
        deadline = time.monotonic() + 5
        with sdk.engine_calls(action):
            info = self.api.exec_inspect(exec_id)
            while info.get("Running") and time.monotonic() < deadline:
                time.sleep(0.02)
                info = self.api.exec_inspect(exec_id)
        code = info.get("ExitCode")
        return int(code) if code is not None else 1

    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Terminal | None = None,
             options: ExecOptions | None = None) -> int:
        """Run `argv` in the running cell with its environment; its exit status.

        `stdin` feeds the command (its end closes the command's input); `terminal` runs it on
        a pseudo-terminal sized like the caller's window (both streams then go to `stdout`).
        """
        if not argv:
            raise BackendError("nothing to run: give a command after --")
        user = options.user if options is not None else None
        if user and container_spec.writes_host(cell.spec):
            ids = container_spec.user_ids({"user": user})
            if ids is None or 0 in ids:  # a name could map to root
                raise BackendRefused(
                    f"cell {cell.name} writes a host folder (a writable mount, or its "
                    f"workspace bound live): --user {names.printable(user)} must be a numeric "
                    "uid[:gid] other than root (root could leave setuid-root programs there)")
            assert options is not None
            import dataclasses  # here only: snapshot create and sleep load this module

            options = dataclasses.replace(options, user=container_spec.host_safe_user(user))
        info = self._find(cell)
        if info is None or info.get("State") != "running":
            state = "absent" if info is None else info.get("State")
            raise BackendError(f"cell {cell.name} is not running (container {state}); "
                               f"start it with `devcell cell start {cell.name}`")

        def write(stream: BinaryIO) -> Callable[[bytes], object]:
            def emit(data: bytes) -> None:
                try:
                    stream.write(data)
                    stream.flush()
                except BrokenPipeError:
                    raise  # a reader gone: the CLI's edge ends quietly
                except OSError as exc:  # this process's output, not the state's disk
                    raise DevCellError(f"exec in cell {cell.name}: its output could not be "
                                       f"written here ({exc.strerror or exc})") from None
            return emit

        return self._exec(info["Id"], argv, write(stdout), write(stderr),
                          action=f"exec in cell {cell.name}", stdin=stdin, terminal=terminal,
                          options=options)

    def open_port(self, cell: CellRef, port: int) -> socket.socket:
        """A connection to `port` on the container's loopback, made inside its network
        namespace (host/netns.py)."""
        from devcell.backends.host import netns

        return self._in_namespace(cell, "net", lambda fd: netns.connect(fd, port))

    def listen_port(self, cell: CellRef, address: str, port: int) -> socket.socket:
        """A socket listening on `address:port` inside the container's network namespace."""
        from devcell.backends.host import netns

        return self._in_namespace(cell, "net", lambda fd: netns.listen(fd, address, port))

    def open_root(self, cell: CellRef) -> CellRoot:
        """The container's `/` in its own mount namespace (/proc/PID/root of its init), so a
        path is resolved as the cell resolves it, the workspace volume included."""
        from devcell.backends.interactive import CellRoot

        info = self._find(cell)
        fd = self._in_namespace(cell, "root", os.dup, info=info)
        user = str(((container_observe.inspect(self.layout.state_dir, info["Id"]) or {})
                    .get("Config") or {}).get("User") or "") if info else ""
        owner = None
        if user:
            from devcell.backends.host import passwd, rooted

            def text(path: str) -> str | None:
                data = rooted.read_regular(fd, path, passwd.MAX_BYTES)
                return None if data is None else data.decode(errors="replace")

            owner = passwd.ids(user, text("/etc/passwd"), text("/etc/group"))
            if owner is None:  # a name the cell no longer knows: make nothing as root
                owner = container_spec.HOST_MOUNT_USER
            elif owner[0] == 0:
                owner = None
        return CellRoot(fd, owner, container_spec.mount_path(cell.spec))

    def _in_namespace(self, cell: CellRef, entry: str, use: Callable[[int], Any], *,
                      info: dict[str, Any] | None = None) -> Any:
        """`use(fd)` on `/proc/PID/<entry>` of the running container's init, opened and then
        checked against a second look at the container: a restart in between (a new process
        under a reused pid) is refused, never entered."""
        info = info if info is not None else self._find(cell)
        if info is None or info.get("State") != "running":
            raise BackendError(f"cell {cell.name} is not running; start it with "
                               f"`devcell cell start {cell.name}`")
        pid = self._init_pid(info["Id"])
        path = f"/proc/{pid}/ns/net" if entry == "net" else f"/proc/{pid}/root"
        flags = os.O_RDONLY if entry == "net" else os.O_PATH | os.O_DIRECTORY
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except OSError as exc:
            what = "network" if entry == "net" else "files"
            raise BackendError(f"cannot open the {what} of cell {cell.name}: "
                               f"{exc.strerror}") from None
        try:
            if self._init_pid(info["Id"]) != pid:
                raise BackendError(f"cell {cell.name} restarted while it was being opened; "
                                   "try again")
            return use(fd)
        finally:
            os.close(fd)

    def _init_pid(self, container_id: str) -> int:
        details = container_observe.inspect(self.layout.state_dir, container_id)
        pid = (details.get("State") or {}).get("Pid")
        if not isinstance(pid, int) or pid <= 0:
            raise BackendError("the cell's container has no running process")
        return pid

    def log_paths(self, cell: CellRef) -> dict[str, Path]:
        """Each service's log file (they live with the workspace volume, on the host)."""
        if cell.volume_id is None:
            return {}
        logs = self.layout.logs(cell.volume_id)
        names = supervisor.service_names(cell.spec)
        known = {p.stem for p in logs.glob("*.log")} if logs.is_dir() else set()
        return {name: logs / f"{name}.log" for name in sorted(set(names) | known)}

    def log_sources(self, cell: CellRef) -> log_source.HostLogs:
        """The log files of `log_paths`, each opened without following links when first read."""
        return log_source.HostLogs(self.log_paths(cell))

    def sidecar_logs(self, cell: CellRef, sidecar: str, *, tail: int | None,
                     since: int | None, timestamps: bool, follow: bool) -> Iterator[bytes]:
        """The sidecar container's output as the engine keeps it (json-file, at most 2x1 MiB:
        sidecars.create_kwargs), in the pieces the engine sends (its frames, at most 16 KiB
        each): the sidecar wrote it, so the caller escapes it."""
        found = self._sidecars._by_name(cell.id).get(sidecar)
        if found is None:
            raise BackendNotFound(f"cell {cell.name} has no sidecar container {sidecar!r} now (it is "
                           "made when the cell is created; see devcell describe cell)")
        container_id = str(found.get("Id", ""))
        with sdk.engine_calls(f"reading the logs of sidecar {sidecar} of cell {cell.name}"):
            stream = self.api.logs(container_id, stdout=True, stderr=True, stream=True,
                                   follow=follow, timestamps=timestamps,
                                   tail="all" if tail is None else tail,
                                   **({"since": since} if since is not None else {}))
            yield from stream

    # -- images ----------------------------------------------------------------------------

    def build_tag(self, cell: CellRef, build: dict[str, Any]) -> str:
        from devcell.backends.container import build_digest_cache

        if not _BUILD_NAME.fullmatch(cell.name):
            raise BackendRefused(f"refusing cell name {cell.name!r}: not a DNS-1123 label")
        from devcell.backends.container import build_tags

        def compute(build: dict[str, Any]) -> str:  # only on a miss: the SDK is imported then
            from devcell.backends.container import build as container_build

            return container_build.digest(build)

        cache = build_digest_cache.DigestCache(self.layout.state_dir)
        digest = cache.digest(cell.name, build, compute, cell_id=cell.id)
        return build_tags.tag_for(self.owner, cell.name, digest)

    def forget_cell_caches(self, cell: CellRef) -> None:
        from devcell.backends.container import build_digest_cache

        if _CELL_NAME.fullmatch(cell.name):  # any other name was never cached
            build_digest_cache.DigestCache(self.layout.state_dir).forget(cell.name)
            build_digest_cache.DigestCache(self.layout.state_dir).forget(cell.name + "__base")
            from devcell.backends.features import context as feature_context

            feature_context.forget(self.layout.state_dir, cell.name)
        from devcell.backends.container import rootfs

        if rootfs.present(self.owner, cell.id):  # no SDK unless one was kept
            rootfs.drop(self.api, owner=self.owner, cell_id=cell.id)  # after its container
        if cell.spec.get("volumes"):  # the cell goes for good: its engine volumes too
            self._remove_volumes(lambda owner: owner == cell.id)

    def prune_cell_caches(self, live_cell_ids: frozenset[str]) -> list[str]:
        """Digest caches, and kept root filesystems, of cells the database no longer has
        (a delete that died between removing the container and dropping its kept image, a
        drop refused while a container still used it); and the Dev Container Features no
        build named for 30 days (backends/features/fetch.py)."""
        from devcell.backends.container import build_digest_cache, rootfs

        dropped = build_digest_cache.DigestCache(self.layout.state_dir).prune(live_cell_ids)
        from devcell.backends.features import fetch as features

        dropped += features.Store(self.layout.state_dir).prune()  # unused for 30 days
        # The engine volumes (spec.volumes) of cells gone: caches, nothing of the user's.
        volumes = self._remove_volumes(lambda owner: owner not in live_cell_ids)
        try:
            kept = rootfs.kept_cell_ids(self.owner)
        except BackendError as exc:
            logger.bind(backend=self.name).warning("kept root filesystems not swept: {}", exc)
            return dropped + volumes
        for cell_id in sorted((kept or set()) - live_cell_ids):
            if rootfs.drop(self.api, owner=self.owner, cell_id=cell_id):
                dropped.append(f"kept root filesystem of {cell_id}")
        return dropped + volumes

    def build_image(self, cell: CellRef, build: dict[str, Any], tag: str) -> Outputs:
        """Build the cell's image (see container_build); recorded as the build-image step."""
        from devcell.backends.container import build as container_build

        idle = self._images_settings().build_idle_timeout
        image_id = container_build.build(self.api, cell_name=cell.name, owner=self.owner,
                                         build_spec=build, tag=tag, idle_timeout=idle)
        removed = container_build.drop_superseded(self.api, cell_name=cell.name,
                                                  cell_id=cell.id, owner=self.owner, keep=tag)
        return {"image": tag, "id": image_id[:19], "removed": len(removed)}

    def delete_built_images(self, cell: CellRef) -> Outputs:
        from devcell.backends.container import build as container_build

        removed = container_build.drop_superseded(self.api, cell_name=cell.name,
                                                  cell_id=cell.id, owner=self.owner, keep=None)
        return {"removed": len(removed)}

    def image_user(self, image: str) -> str | None:
        """The user an image on the engine runs as (its Config.User; None: unset, or the
        engine cannot say): what an image DevCell builds on it is handed back to."""
        from devcell.backends.container import observe

        user = (observe.image_config(image) or {}).get("User")
        return user if isinstance(user, str) and user else None

    def image_exists(self, image: str) -> bool:
        try:
            with sdk.engine_calls(f"looking up image {image}"):
                self.api.inspect_image(image)
        except BackendNotFound:
            return False
        return True

    def image_state(self, image: str, *, check_registry: bool) -> ImageState:
        """What the engine holds under `image`; with `check_registry`, also the digest its
        registry serves now (one manifest request, no download). A registry that cannot
        answer leaves `current` None and says why in `check_error`."""
        from devcell.backends.container import images

        try:
            with sdk.engine_calls(f"looking up image {image}"):
                local = self.api.inspect_image(image)
        except BackendNotFound:
            local = None
        state = ImageState(present=local is not None,
                           image_id=str(local["Id"]) if local is not None else None)
        if not check_registry:
            return state
        from devcell.backends.container import pull as container_pull  # imports the SDK

        try:
            self.api.reload_config()  # a `docker login` since this client was made counts
            descriptor = container_pull.distribution(
                self.api, image, registry=images.registry_of(image),
                idle_timeout=self._images_settings().pull_idle_timeout,
            )["Descriptor"]
        except ImagePullFailed as exc:  # the registry went silent
            return ImageState(state.present, state.image_id, check_error=str(exc))
        except sdk.sdk_errors() as exc:
            problem = images.pull_failed(image, _explanation(exc), _status(exc))
            return ImageState(state.present, state.image_id, check_error=str(problem))
        remote = str(descriptor.get("digest") or "")
        digests = (local or {}).get("RepoDigests") or []
        current = local is not None and any(str(d).endswith("@" + remote) for d in digests)
        return ImageState(state.present, state.image_id, remote_digest=remote or None,
                          current=current)

    def pull_image(self, cell: CellRef, image: str) -> Outputs:
        """Pull `image` through the engine with the client's credentials (DOCKER_CONFIG or
        ~/.docker/config.json, credential helpers: the SDK's own lookup), one progress bar per
        layer, and record it as pulled by DevCell."""
        from devcell.backends.container import images, pull_progress

        log = logger.bind(backend=self.name, cell=cell.name, op=cell.op_id or "-")
        repository, tag = _split_reference(image)
        log.info("pulling image {}", image)
        started = time.monotonic()
        digest = None
        before = self.image_info(image)
        from devcell.backends.container import pull as container_pull  # imports the SDK

        try:
            self.api.reload_config()
            with pull_progress.LayerBars(image) as bars:
                for event in container_pull.events(
                        self.api, repository, tag, image=image,
                        registry=images.registry_of(image),
                        idle_timeout=self._images_settings().pull_idle_timeout):
                    if "error" in event or "errorDetail" in event:
                        detail = event.get("errorDetail") or {}
                        raise images.pull_failed(image, str(detail.get("message")
                                                            or event.get("error")), None)
                    status = str(event.get("status") or "")
                    if status.startswith("Digest: "):
                        digest = status[len("Digest: "):].strip()
                    bars.feed(event)
            with sdk.engine_calls(f"looking up image {image}"):
                info = self.api.inspect_image(image)
        except sdk.sdk_errors() as exc:
            if sdk.is_connection_error(exc):
                raise sdk.unreachable(exc) from None
            raise images.pull_failed(image, _explanation(exc), _status(exc)) from None
        image_id = str(info["Id"])
        record = images.PullRecord(self.layout.state_dir)
        fetched = before is None or str(before["Id"]) != image_id
        if fetched or image in record.load():
            # An image already on the engine that this pull left as it was (`Always` of an
            # image someone else pulled) is theirs: never recorded, so never pruned.
            record.add(images.PulledImage(image=image, id=image_id, digest=digest,
                                          pulledAt=_utc_now(), cells=[cell.name]))
        seconds = time.monotonic() - started
        log.info("pulled image {} ({}, {:.1f} s, {} bytes downloaded)", image, image_id[:19],
                 seconds, bars.downloaded)
        return {"image": image, "id": image_id, "digest": digest, "changed": fetched,
                "downloaded": bars.downloaded, "size": int(info.get("Size") or 0)}

    def image_info(self, image: str) -> dict[str, Any] | None:
        """The engine's inspection of `image` (id, size, tags), or None when it has none."""
        try:
            with sdk.engine_calls(f"looking up image {image}"):
                info: dict[str, Any] = self.api.inspect_image(image)
        except BackendNotFound:
            return None
        return info

    def labelled_images(self) -> list[dict[str, Any]]:
        """Images labelled as this state directory's builds (`dev.devcell.state-dir`, the one
        label a build gives, see container_build), as the engine lists them (Id, RepoTags,
        Size, Created); which of their tags are DevCell's is the caller's to judge."""
        with sdk.engine_calls("listing DevCell's images"):
            listed: list[dict[str, Any]] = self.api.images(
                filters={"label": [f"{STATE}={self.owner}"]})
        return [i for i in listed if (i.get("Labels") or {}).get(STATE) == self.owner]

    def containers_using(self, image_id: str) -> list[str]:
        """Names of every container on the engine (anyone's) made from image `image_id`."""
        with sdk.engine_calls(f"listing the containers of image {image_id[:19]}"):
            listed = self.api.containers(all=True, filters={"ancestor": image_id})
        # A container made from a kept root filesystem (container/rootfs.py) uses its base.
        return [(c.get("Names") or ["?"])[0].lstrip("/") for c in listed
                if c.get("ImageID") == image_id or container_spec.base_of(c) == image_id]

    def untag_image(self, image: str) -> None:
        """Remove the engine's tag `image` (never by force: the engine refuses while any
        container uses it); the image's data goes with its last tag."""
        with sdk.engine_calls(f"removing image {image}"):
            self.api.remove_image(image, force=False, noprune=False)

    def build_base_image(self, *, force: bool = False) -> str:
        """Import `devcell/busybox:latest` from the host's busybox-static; its image id."""
        from devcell.backends.container import base_image

        image = base_image.BASE_IMAGE
        if not force and self.image_exists(image):
            with sdk.engine_calls(f"looking up image {image}"):
                return str(self.api.inspect_image(image)["Id"])
        repository, _, tag = image.rpartition(":")
        data = base_image.rootfs_tar()
        with sdk.engine_calls(f"importing image {image}"):
            self.api.import_image_from_data(data, repository=repository, tag=tag,
                                            changes=['CMD ["/bin/sh"]', "WORKDIR /workspace"])
            return str(self.api.inspect_image(image)["Id"])

    def build_node_tools_image(self, *, force: bool = False) -> str:
        """Import `devcell/nodetools:2` (base_image.node_tools_tar: what the jobs on a
        cluster's nodes run); its image id."""
        from devcell.backends.container import base_image

        image = base_image.NODE_TOOLS_IMAGE
        if not force and self.image_exists(image):
            with sdk.engine_calls(f"looking up image {image}"):
                return str(self.api.inspect_image(image)["Id"])
        repository, _, tag = image.rpartition(":")
        data = base_image.node_tools_tar()
        with sdk.engine_calls(f"importing image {image}"):
            self.api.import_image_from_data(data, repository=repository, tag=tag,
                                            changes=['CMD ["/bin/sh"]'])
            return str(self.api.inspect_image(image)["Id"])


def export_image(image: str, into: BinaryIO) -> str:
    """Write the root filesystem of the local image `image` (as a tar stream) into `into`;
    the image's id. For the vm backend, which turns it into a disk: one `image:` for both
    backends, never pulled (ImageNotFound with the fix when the engine lacks it). A container
    is created from the image only to export it (never started), labelled as DevCell's and
    removed again."""
    client = sdk.connect()
    try:
        with sdk.engine_calls(f"exporting image {image}"):
            image_id = str(client.api.inspect_image(image)["Id"])
            made = client.api.create_container(image_id, command=["/bin/true"],
                                               labels={"dev.devcell.managed": "true",
                                                       "dev.devcell.purpose": "image-export"})
        try:
            with sdk.engine_calls(f"exporting image {image}"):
                for chunk in client.api.export(made["Id"], chunk_size=1 << 20):
                    into.write(chunk)
        finally:
            with sdk.engine_calls(f"removing the export container of {image}"):
                client.api.remove_container(made["Id"], force=True)
        return image_id
    finally:
        client.close()


def image_id(image: str) -> str:
    """The id of the local image `image` (ImageNotFound when the engine lacks it)."""
    client = sdk.connect()
    try:
        with sdk.engine_calls(f"looking up image {image}"):
            return str(client.api.inspect_image(image)["Id"])
    finally:
        client.close()


def _post_create_text(spec: dict[str, Any]) -> str:
    """The cell's postCreate hooks as canonical JSON ("" when it has none)."""
    hooks = (spec.get("hooks") or {}).get("postCreate")
    return json.dumps(hooks, sort_keys=True, separators=(",", ":")) if hooks else ""


def _digest(text: str) -> str:
    """Of hook text (commands, never secret values: those are spec.env's)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _write_private(directory: Path, name: str, text: str) -> None:
    tmp = directory / f".{name}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.rename(tmp, directory / name)


def _read_private(directory: Path, name: str) -> str | None:
    """A small file DevCell wrote in the cell's run directory (never a link), or None."""
    try:
        fd = safeio.open_regular(directory, name)
    except (FileNotFoundError, safeio.UnsafeFile):
        return None
    try:
        return safeio.read_some(fd, 1 << 20).decode("utf-8", "replace")
    finally:
        os.close(fd)
