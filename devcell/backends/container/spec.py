"""A Cell spec turned into the Docker engine's create arguments, under DevCell's security rules.

Plain data only (no docker import): `create_kwargs()` builds the keyword arguments for
`containers.create`, and `check_security()` re-checks the finished arguments just before they
reach the engine, so no code path can slip a privileged container past it:

- never privileged; every capability dropped, then only a small subset of Docker's defaults
  given back (no capability Docker would not grant anyway); `no-new-privileges`; no host
  device: unless spec.security asks for more and DevCell's configuration allows it
  (`devcell.privileges`);
- no host PID, IPC or user namespace; network `none`, `host` or DevCell's bridge network
  (published ports on 127.0.0.1 unless the manifest names another address);
- bind mounts only of directories inside the state directory (symbolic links resolved), and
  of host paths DevCell's configuration allows (`devcell.security`, `devcell.config`);
- a cell with a writable host mount runs as HOST_MOUNT_USER, never as root: without a user
  namespace the cell's root is the host's root, and a `chmod 4755` of its own copy of a shell
  would leave a setuid-root program in the host directory (the engine's bind mounts cannot be
  made nosuid, and nosuid would only protect the cell's view of them, not the host's); a
  workspace that is a host folder bound live is such a mount, and its cell runs as the
  folder's owner when that is not root (what it writes is the developer's, as on the host).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell import privileges, security
from devcell.backends import limits, supervisor
from devcell.backends.container.labels import (
    BASE_IMAGE,
    CELL,
    CELL_ID,
    KEPT_ROOTFS,
    MANAGED,
    OPERATION,
    POST_CREATE,
    RUNTIME_HASH,
    SIDECAR,
    SIDECAR_OF,
    STATE,
    STATE_PATH,
    VOLUME,
)
from devcell.backends.container.layout import Layout
from devcell.backends.host import live_folder
from devcell.backends.host.ids import state_hash
from devcell.errors import BackendRefused
from devcell.manifests import quantities
from devcell.manifests.model import field_path

if TYPE_CHECKING:
    from devcell.config import SecurityPolicy


def base_of(info: dict[str, Any]) -> str:
    """The image a container's root filesystem is made on: its own image, or, for one made
    from a kept root filesystem (container/rootfs.py), the image that was kept on (the
    inherited BASE_IMAGE label)."""
    labels = info.get("Labels") or (info.get("Config") or {}).get("Labels") or {}
    return str(labels.get(BASE_IMAGE) or info.get("ImageID") or info.get("Image") or "")


BRIDGE_NETWORK = "devcell-bridge"
STOP_TIMEOUT = 5
ALLOWED_CAPS = privileges.DEFAULT_CAPABILITIES
"""Given back after dropping ALL (more only as spec.security asks and the configuration
allows)."""
HOST_MOUNT_USER = (65534, 65534)
"""uid and gid (nobody:nogroup) of a cell with a writable host mount: what it writes there is
owned by nobody, so a setuid bit it sets gives nothing."""
_IMAGE = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._/:@-]{0,254}")


def memory_bytes(text: str) -> int:
    """The engine's mem_limit; validation refused anything else already (a record written
    before a rule existed still gets a clear refusal here, never a late engine error)."""
    try:
        value = quantities.memory_bytes(text)
    except ValueError as exc:
        raise BackendRefused(str(exc)) from None
    minimum = limits.of("container").min_memory_bytes
    if value < minimum:
        raise BackendRefused(f"memory limit {text} is below the engine's minimum of "
                             f"{quantities.show_bytes(minimum)}")
    return value


def mount_path(spec: dict[str, Any]) -> str:
    path = (spec.get("workspace") or {}).get("mountPath", "/workspace")
    problem = security.mount_path_problem(path) if isinstance(path, str) else "must be a string"
    if problem:
        raise BackendRefused(f"workspace.mountPath: {problem}")
    return str(path)


def image_of(spec: dict[str, Any]) -> str:
    image = spec.get("image")
    if not isinstance(image, str) or not _IMAGE.fullmatch(image):
        raise BackendRefused(f"invalid or missing image {image!r} (the container backend "
                             "needs spec.image, e.g. devcell/busybox:latest)")
    return image


def _bind(source: Path, target: str, *, read_only: bool) -> dict[str, Any]:
    return {"Type": "bind", "Source": str(source), "Target": target, "ReadOnly": read_only}


def _network(spec: dict[str, Any]) -> dict[str, Any]:
    network = spec.get("network") or {}
    mode = network.get("mode", "none")
    # The sidecars' ports too: they share the cell container's network namespace, so the
    # engine publishes them through it.
    ports = [port for _, port in security.port_entries(spec)]
    if mode in ("none", "host"):
        if ports:
            raise BackendRefused(f"network.ports need network.mode bridge (mode is {mode})")
        return {"network_mode": mode}
    if mode != "bridge":
        raise BackendRefused(f"unknown network.mode {mode!r} (none, host or bridge)")
    # One container port may be published on several host ports (`-p 8080:80 -p 8081:80`):
    # docker-py takes a list of bindings per port; a dict of one binding each kept the last.
    published: dict[str, list[tuple[str, int]]] = {}
    for port in ports:
        inside = int(port["containerPort"])
        published.setdefault(f"{inside}/tcp", []).append(
            (str(port.get("hostIP", "127.0.0.1")), int(port.get("hostPort", inside))))
    return {"network": BRIDGE_NETWORK, "ports": published}


def writes_host(spec: dict[str, Any]) -> bool:
    """Whether the cell has a writable host mount or its workspace is a host folder bound
    live (so it must not run as root)."""
    return (any(not m.get("readOnly", False) for m in spec.get("mounts") or [])
            or live_folder.of_spec(spec) is not None)


def user_ids(kwargs: dict[str, Any]) -> tuple[int, int] | None:
    """(uid, gid) the container runs as when create arguments name numeric ids, else None
    (the image's user: root for every image DevCell knows)."""
    user = str(kwargs.get("user") or "")
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        return None
    return int(uid), int(gid or uid)


def host_safe_user(user: str) -> str:
    """A numeric `user` as the engine is given it in a cell that writes a host folder: a uid
    alone makes the engine run with gid 0 (root's group) when the image has no such user, and
    a setgid program the cell leaves there would then be setgid-root on the host; so the gid
    DevCell means (user_ids: the uid's own) is always written out."""
    ids = user_ids({"user": user})
    return user if ids is None else "{}:{}".format(*ids)


def labels(layout: Layout, *, cell_id: str, cell_name: str, volume_id: str | None,
           runtime_hash: str, op_id: str | None = None) -> dict[str, str]:
    """Every DevCell label a container carries, each set here: a container inherits its
    image's labels, and an image is the cell's to write (a hostile Dockerfile's LABEL
    dev.devcell.base-image or dev.devcell.volume would otherwise steer drift checks and the
    service-state folder). Those DevCell has no value for are set empty, which hides the
    image's; create sets BASE_IMAGE and KEPT_ROOTFS when it makes the container from a
    kept root filesystem."""
    out = dict.fromkeys((VOLUME, OPERATION, BASE_IMAGE, KEPT_ROOTFS, POST_CREATE,
                         SIDECAR_OF, SIDECAR), "")
    out |= {MANAGED: "true", STATE: state_hash(layout.state_dir),
            STATE_PATH: str(layout.state_dir.resolve()), CELL_ID: cell_id, CELL: cell_name,
            RUNTIME_HASH: runtime_hash}
    if volume_id:
        out[VOLUME] = volume_id
    if op_id:
        out[OPERATION] = op_id  # which operation made it: a restart can match it to its record
    return out


def _policy_or_default(policy: SecurityPolicy | None) -> SecurityPolicy:
    """`policy`, or the configuration's defaults (imported here: observing and checkpointing
    cells read this module's labels and never a policy)."""
    if policy is not None:
        return policy
    from devcell.config import SecurityPolicy

    return SecurityPolicy()


def create_kwargs(layout: Layout, *, name: str, cell_id: str, cell_name: str,
                  spec: dict[str, Any], volume_id: str | None, runtime_hash: str,
                  op_id: str | None = None, policy: SecurityPolicy | None = None,
                  live: Path | None = None, live_owner: tuple[int, int] | None = None
                  ) -> dict[str, Any]:
    """`live`: the host folder that is the workspace (a LIVE volume's, resolved and judged
    again by the caller), bound instead of the volume's own directory; `live_owner`: its
    owner, whom the cell runs as when spec.user does not say (never root)."""
    policy = _policy_or_default(policy)
    # A workspace source was used when the volume was made (a live folder is judged again
    # by the caller, and below as a bind mount): one moved away since is no reason to refuse.
    broken = [f"{security.spec_field(path)}: {message}"
              for path, message in security.cell_problems(spec, policy, layout.state_dir)
              if path[:2] != ("workspace", "source")]
    # Admission refused these already; a record from before a limit existed meets it here.
    broken += [f"{field_path(path)}: {message}"
               for path, message in limits.cell_problems(spec, "container")]
    if broken:
        raise BackendRefused("refusing to create the container: " + "; ".join(broken))
    plain, _ = supervisor.split_env(spec)
    mounts = [_bind(layout.run_dir(cell_id), security.RUN_DIR, read_only=True)]
    if volume_id is not None:
        workspace = live if live is not None else layout.workspace(volume_id)
        mounts += [_bind(workspace, mount_path(spec), read_only=False),
                   _bind(layout.logs(volume_id), security.SERVICE_LOG_DIR, read_only=False)]
    for mount in spec.get("mounts") or []:  # resolved now: a later symlink swap changes nothing
        mounts.append(_bind(Path(os.path.realpath(mount["hostPath"])), mount["mountPath"],
                            read_only=bool(mount.get("readOnly", False))))
    for volume in spec.get("volumes") or []:  # the engine's volumes, made labelled by create
        mounts.append({"Type": "volume", "Source": volume_name(layout, cell_id, volume["name"]),
                       "Target": volume["mountPath"], "ReadOnly": False})
    kwargs: dict[str, Any] = {
        "image": image_of(spec),
        "command": ["/bin/sh", f"{security.RUN_DIR}/{supervisor.SCRIPT}"],
        "name": name,
        "hostname": cell_name,
        "labels": labels(layout, cell_id=cell_id, cell_name=cell_name, volume_id=volume_id,
                         runtime_hash=runtime_hash, op_id=op_id),
        "environment": plain,
        "mounts": mounts,
        "init": True,  # the engine's init is PID 1 (spec.security.init), the supervisor below
        **privileges.engine_arguments(spec),
        "stop_signal": "SIGTERM",
        "pids_limit": 4096,
        "detach": True,
        "log_config": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}},
        **_network(spec),
    }
    if volume_id is not None:
        kwargs["working_dir"] = mount_path(spec)
    if spec.get("user"):
        # with a writable host mount: checked non-root below, its gid written out
        user = str(spec["user"])
        kwargs["user"] = host_safe_user(user) if writes_host(spec) else user
    elif live_owner is not None and 0 not in live_owner:
        kwargs["user"] = "{}:{}".format(*live_owner)  # what it writes is the developer's
    elif writes_host(spec):
        kwargs["user"] = "{}:{}".format(*HOST_MOUNT_USER)
    resources = spec.get("resources") or {}
    if "cpus" in resources:
        kwargs["nano_cpus"] = int(float(resources["cpus"]) * 1e9)
    if "memory" in resources:
        kwargs["mem_limit"] = memory_bytes(str(resources["memory"]))
    return kwargs


def volume_name(layout: Layout, cell_id: str, name: str) -> str:
    """The engine's name of a cell's volume `name` (spec.volumes): this state directory's,
    this cell's (ids and names that passed their checks: no other can be made here)."""
    if not _VOLUME_PART.fullmatch(cell_id) or not _VOLUME_PART.fullmatch(name):
        raise BackendRefused(f"refusing volume {name!r} of cell id {cell_id!r}")
    return f"{VOLUME_PREFIX}{state_hash(layout.state_dir)}-{cell_id}-{name}"


VOLUME_PREFIX = "devcell-"
_VOLUME_PART = re.compile(r"[a-z0-9][a-z0-9_-]{0,127}")


def check_security(layout: Layout, kwargs: dict[str, Any],
                   policy: SecurityPolicy | None = None, *, joins: str | None = None) -> None:
    """Refuse arguments that break DevCell's rules; the last check before the engine.
    `joins`: the id of the cell container a sidecar shares the network namespace of (the
    only `container:` network mode allowed)."""
    policy = _policy_or_default(policy)
    problems = list(privileges.engine_problems(kwargs, policy))
    for key in ("pid_mode", "ipc_mode", "userns_mode", "uts_mode", "volumes",
                "volumes_from", "device_requests", "sysctls", "cgroupns"):
        if kwargs.get(key):
            problems.append(f"{key} is not allowed")
    allowed_modes: tuple[str | None, ...] = (
        (None, "none", "host") if policy.allow_host_network else (None, "none"))
    if joins is not None:
        allowed_modes = (f"container:{joins}",)
    if kwargs.get("network_mode") not in allowed_modes:
        problems.append(f"network mode {kwargs.get('network_mode')} is not allowed")
    ids = user_ids(kwargs)
    for mount in kwargs.get("mounts") or []:
        source = Path(mount.get("Source", ""))
        if mount.get("Type") == "volume" and str(source).startswith(
                f"{VOLUME_PREFIX}{state_hash(layout.state_dir)}-"):
            continue  # a cell's own volume (spec.volumes), made by DevCell with its labels
        if mount.get("Type") != "bind" or not source.is_absolute():
            problems.append(f"mount of {source} is not a bind mount of an absolute path")
        elif not layout.contains(source):
            if not mount.get("ReadOnly") and (ids is None or 0 in ids):
                problems.append(f"writable mount of {source}: the cell must not run as root "
                                "(it could leave setuid-root programs on the host)")
            if not mount.get("ReadOnly") and \
                    privileges.NO_NEW_PRIVILEGES not in (kwargs.get("security_opt") or []):
                problems.append(f"writable mount of {source}: no-new-privileges must stay set "
                                "(a setuid program would make the cell root)")
            refused = security.host_path_problem(str(source), policy, layout.state_dir)
            if refused:
                problems.append(f"mount of {source}: {refused}")
    if problems:
        raise BackendRefused("refusing to create the container: " + "; ".join(problems))
