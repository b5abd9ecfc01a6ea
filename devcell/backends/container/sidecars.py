"""A cell's sidecars on the engine: containers that live and die with the cell's container.

Each sidecar of spec.sidecars is a container sharing the cell container's network namespace
(`network_mode: container:<id>`, as a Pod's containers share theirs), so the cell reaches it
on 127.0.0.1 and its ports are published through the cell's container. It is made after the
cell's container and started after it; stopped and removed before it (sleep, stop,
recreate, delete); frozen and thawed with it for a checkpoint, its own preCheckpoint hooks
run first. Its data volume is a directory of the cell's workspace volume
(container/sidecar_data.py).

A sidecar carries DevCell's ownership labels as the cell's container does, with SIDECAR_OF
(the cell's id) and SIDECAR (its name) instead of CELL_ID, which it carries empty: every
lookup of a cell's one container by CELL_ID never sees it. It runs under the same rules as
the cell (every capability dropped but DevCell's few, no-new-privileges, no host mount:
check_security checks its arguments too).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from devcell.backends.container import freezer, sdk, sidecar_data
from devcell.backends.container import observe as container_observe
from devcell.backends.container import spec as container_spec
from devcell.backends.container.labels import (
    BASE_IMAGE,
    CELL,
    CELL_ID,
    KEPT_ROOTFS,
    MANAGED,
    OPERATION,
    RUNTIME_HASH,
    SIDECAR,
    SIDECAR_OF,
    STATE,
    STATE_PATH,
    VOLUME,
)
from devcell.backends.container.layout import Layout
from devcell.backends.host.ids import safe_id, state_hash
from devcell.errors import BackendConflict, BackendNotFound, BackendRefused, HookFailed
from devcell.log import logger

if TYPE_CHECKING:
    from devcell.backends.base import CellRef, Outputs
    from devcell.config import SecurityPolicy

RESTART_POLICIES = {"Always": "unless-stopped", "OnFailure": "on-failure", "Never": "no"}
"""spec.sidecars[].restart as the engine's restart policy (unless-stopped: a sidecar DevCell
stopped with its cell stays stopped across an engine restart, as the cell does)."""
HOOK_TAIL = 4096


def of_spec(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in spec.get("sidecars") or [] if isinstance(s, dict)]


def container_name(cell_container: str, sidecar: str) -> str:
    """The sidecar's container name: the cell container's, then the sidecar's name."""
    return f"{cell_container}-{safe_id('sidecar', sidecar)}"


def labels(layout: Layout, *, cell_id: str, cell_name: str, sidecar: str,
           op_id: str | None) -> dict[str, str]:
    """Every DevCell label a sidecar carries, each set here (an image's own LABEL of the same
    name is hidden: CELL_ID empty, so no image can pass a sidecar off as a cell)."""
    out = dict.fromkeys((CELL_ID, VOLUME, RUNTIME_HASH, BASE_IMAGE, KEPT_ROOTFS, OPERATION), "")
    out |= {MANAGED: "true", STATE: state_hash(layout.state_dir),
            STATE_PATH: str(layout.state_dir.resolve()), CELL: cell_name,
            SIDECAR_OF: safe_id("cell", cell_id), SIDECAR: safe_id("sidecar", sidecar)}
    if op_id:
        out[OPERATION] = op_id
    return out


def create_kwargs(layout: Layout, *, name: str, cell_id: str, cell_name: str,
                  sidecar: dict[str, Any], joins: str, data: Path | None,
                  op_id: str | None = None) -> dict[str, Any]:
    """The engine's create arguments of one sidecar joining container `joins`."""
    mounts = []
    mount_path = (sidecar.get("volume") or {}).get("mountPath")
    if data is not None and isinstance(mount_path, str):
        mounts.append({"Type": "bind", "Source": str(data), "Target": mount_path,
                       "ReadOnly": False})
    kwargs: dict[str, Any] = {
        "image": container_spec.image_of(sidecar),
        "name": name,
        "labels": labels(layout, cell_id=cell_id, cell_name=cell_name,
                         sidecar=str(sidecar["name"]), op_id=op_id),
        "environment": {str(v["name"]): str(v["value"]) for v in sidecar.get("env") or []
                        if not v.get("secret")},
        "mounts": mounts,
        "network_mode": f"container:{joins}",
        "init": True,  # a shell loop as PID 1 would ignore the SIGTERM of a stop
        "privileged": False,
        "cap_drop": ["ALL"],
        "cap_add": list(container_spec.ALLOWED_CAPS),
        "security_opt": ["no-new-privileges"],
        "pids_limit": 4096,
        "detach": True,
        "restart_policy": {"Name": RESTART_POLICIES.get(str(sidecar.get("restart")),
                                                        "unless-stopped")},
        "log_config": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
    }
    if sidecar.get("command"):
        kwargs["command"] = [str(word) for word in sidecar["command"]]
    resources = sidecar.get("resources") or {}
    if "cpus" in resources:
        kwargs["nano_cpus"] = int(float(resources["cpus"]) * 1e9)
    if "memory" in resources:
        kwargs["mem_limit"] = container_spec.memory_bytes(str(resources["memory"]))
    return kwargs


class Engine(Protocol):
    """What of the container backend the sidecars use (its client, policy, exec)."""

    layout: Layout
    owner: str

    @property
    def api(self) -> Any: ...

    def _policy(self) -> SecurityPolicy: ...

    def engine_create(self, kwargs: dict[str, Any], action: str) -> str: ...

    def _exec(self, container_id: str, argv: list[str], out: Callable[[bytes], object],
              err: Callable[[bytes], object], *, action: str,
              time_limit: float | None = None, wrap: bool = True) -> int: ...


class Sidecars:
    """The engine's side of a cell's sidecars, for the container backend (its client, its
    freeze and exec): every call is idempotent, as the backend's own are."""

    def __init__(self, backend: Engine) -> None:
        self.backend = backend
        self.layout = backend.layout

    def listed(self, cell_id: str) -> list[dict[str, Any]]:
        """The cell's sidecar containers, as the engine lists them (by their labels only)."""
        safe_id("cell", cell_id)
        found = container_observe.list_labelled(self.layout.state_dir,
                                                labels={SIDECAR_OF: cell_id})
        if found is None:  # an address only the SDK speaks
            with sdk.engine_calls("listing the sidecars of a cell"):
                found = self.backend.api.containers(all=True, filters={"label": [
                    f"{MANAGED}=true", f"{STATE}={self.backend.owner}", f"{SIDECAR_OF}={cell_id}"]})
        return [c for c in found if (c.get("Labels") or {}).get(STATE) == self.backend.owner
                and (c.get("Labels") or {}).get(SIDECAR_OF) == cell_id]

    def _by_name(self, cell_id: str) -> dict[str, dict[str, Any]]:
        return {str((c.get("Labels") or {}).get(SIDECAR)): c for c in self.listed(cell_id)}

    def create(self, cell: CellRef, cell_container: str, joins: str) -> Outputs:
        """Make every sidecar of the spec (not started), joining container `joins`; one left
        from an earlier container of the cell (another namespace to join, another spec) is
        made again, and one the spec no longer names is removed."""
        wanted = of_spec(cell.spec)
        if not wanted:
            self.remove(cell)
            return {}
        existing = self._by_name(cell.id)
        for stale, info in existing.items():
            if stale not in {str(s["name"]) for s in wanted}:
                self._remove(info["Id"], cell, stale)
        made = []
        for sidecar in wanted:
            name = str(sidecar["name"])
            have = existing.get(name)
            if have is not None:
                mode = (have.get("HostConfig") or {}).get("NetworkMode")
                if mode == f"container:{joins}":
                    continue
                self._remove(have["Id"], cell, name)
            self._create(cell, sidecar, cell_container, joins)
            made.append(name)
        return {"sidecars": ",".join(made)} if made else {}

    def _create(self, cell: CellRef, sidecar: dict[str, Any], cell_container: str,
                joins: str) -> str:
        name = container_name(cell_container, str(sidecar["name"]))
        data = None
        if sidecar.get("volume") and cell.volume_id is not None:
            data = sidecar_data.ensure(self.layout, cell.volume_id, str(sidecar["name"]))
        kwargs = create_kwargs(self.layout, name=name, cell_id=cell.id, cell_name=cell.name,
                               sidecar=sidecar, joins=joins, data=data, op_id=cell.op_id)
        container_spec.check_security(self.layout, kwargs, self.backend._policy(), joins=joins)
        action = f"creating sidecar {sidecar['name']} of cell {cell.name} from image " \
                 f"{kwargs['image']}"
        try:
            created = self.backend.engine_create(kwargs, action)
        except BackendConflict:
            raise BackendRefused(f"a container named {name} exists but is not sidecar "
                                 f"{sidecar['name']} of cell {cell.name} in this state "
                                 "directory; refusing to touch it (remove or rename it "
                                 "yourself)") from None
        logger.bind(backend="container", cell=cell.name, op=cell.op_id or "-").info(
            "created sidecar {} ({})", name, created[:12])
        return created

    def start(self, cell: CellRef, cell_container: str, joins: str, *,
              rejoin: bool) -> Outputs:
        """Start every sidecar after the cell's container (`joins`): made when missing;
        `rejoin` (the cell's container was just started, so its network namespace is new):
        one still running from before is restarted into it."""
        wanted = of_spec(cell.spec)
        if not wanted:
            return {}
        self.create(cell, cell_container, joins)
        existing = self._by_name(cell.id)
        started = []
        for sidecar in wanted:
            name = str(sidecar["name"])
            info = existing.get(name)
            if info is None:
                raise BackendNotFound(f"sidecar {name} of cell {cell.name} was not made")
            state = info.get("State")
            action = f"starting sidecar {name} of cell {cell.name}"
            with sdk.engine_calls(action):
                if state == "paused":
                    self.backend.api.unpause(info["Id"])
                    state = "running"
                if state in ("running", "restarting") and rejoin:
                    self.backend.api.restart(info["Id"], timeout=container_spec.STOP_TIMEOUT)
                elif state not in ("running", "restarting"):
                    self.backend.api.start(info["Id"])
                else:
                    self._thaw(info)
                    continue
            started.append(name)
        return {"sidecars": ",".join(started)} if started else {}

    def stop(self, cell: CellRef) -> None:
        """Stop every sidecar (before the cell's container: their network goes with it)."""
        for name, info in self._by_name(cell.id).items():
            if info.get("State") not in ("running", "paused", "restarting"):
                continue
            self._thaw(info)
            action = f"stopping sidecar {name} of cell {cell.name}"
            try:
                if not container_observe.stop(info["Id"], container_spec.STOP_TIMEOUT, action):
                    with sdk.engine_calls(action):
                        self.backend.api.stop(info["Id"], timeout=container_spec.STOP_TIMEOUT)
            except BackendNotFound:
                pass

    def remove(self, cell: CellRef) -> int:
        """Remove every sidecar of the cell; how many there were."""
        found = self._by_name(cell.id)
        for name, info in found.items():
            self._remove(info["Id"], cell, name)
        return len(found)

    def _remove(self, container_id: str, cell: CellRef, name: str) -> None:
        action = f"removing sidecar {name} of cell {cell.name}"
        found = freezer.of_container(container_id)
        if found is not None and found.state() is not freezer.State.THAWED:
            found.thaw()
        try:
            if not container_observe.remove(container_id, action):
                with sdk.engine_calls(action):
                    self.backend.api.remove_container(container_id, force=True)
        except BackendNotFound:
            pass

    def freeze(self, cell: CellRef) -> int:
        """Freeze every running sidecar (a checkpoint: with the cell); how many."""
        frozen = 0
        for name, info in self._by_name(cell.id).items():
            if info.get("State") != "running":
                continue
            found = freezer.of_container(str(info["Id"]))
            if found is None or not found.freeze():
                if not container_observe.pause(info["Id"], f"freezing sidecar {name}"):
                    with sdk.engine_calls(f"freezing sidecar {name}"):
                        self.backend.api.pause(info["Id"])
            frozen += 1
        return frozen

    def thaw(self, cell: CellRef) -> None:
        for info in self._by_name(cell.id).values():
            self._thaw(info)

    def _thaw(self, info: dict[str, Any]) -> None:
        if info.get("State") == "paused":
            if not container_observe.unpause(info["Id"], "unfreezing a sidecar"):
                with sdk.engine_calls("unfreezing a sidecar"):
                    self.backend.api.unpause(info["Id"])
        elif info.get("State") in ("running", "restarting"):
            found = freezer.of_container(str(info.get("Id", "")))
            if found is not None and found.state() is not freezer.State.THAWED:
                found.thaw()

    def run_hooks(self, cell: CellRef, which: str) -> int:
        """Each running sidecar's `which` hooks (preCheckpoint, postCheckpoint), run in the
        sidecar (its image's environment, no shell unless asked) under the cell's hook time
        limit; a failing one raises HookFailed naming the sidecar."""
        limit = float((cell.spec.get("hooks") or {}).get("timeoutSeconds", 60))
        running = {name: info for name, info in self._by_name(cell.id).items()
                   if info.get("State") == "running"}
        ran = 0
        for sidecar in of_spec(cell.spec):
            name = str(sidecar["name"])
            hooks = [list(h) for h in (sidecar.get("hooks") or {}).get(which) or []]
            if not hooks or name not in running:
                continue
            for argv in hooks:
                out = bytearray()

                def keep(chunk: bytes, out: bytearray = out) -> None:
                    out.extend(chunk)
                    del out[:-HOOK_TAIL]

                code = self.backend._exec(
                    running[name]["Id"], argv, keep, keep, wrap=False, time_limit=limit,
                    action=f"{which} hook of sidecar {name} of cell {cell.name}")
                if code != 0:
                    tail = bytes(out).decode(errors="replace").strip()
                    raise HookFailed(f"{which} hook {argv!r} of sidecar {name} of cell "
                                     f"{cell.name} exited with status {code}"
                                     + (f": {tail}" if tail else ""),
                                     which=which, argv=argv, code=code, output=tail)
                ran += 1
        return ran

