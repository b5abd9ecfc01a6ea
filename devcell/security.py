"""DevCell's security rules for a Cell spec, checked where the user can fix them: at validation.

One set of rules, used twice: `devcell apply` (and the GitOps daemon) refuse a manifest that
breaks them, naming file, line and field; the container backend checks them again just before
the engine call, so a rule cannot be skipped by a path that bypassed validation (a
configuration tightened after the cell was applied, a record written by an older version).

Defaults: no host bind mounts, no host network, ports published on loopback only, no
privileges beyond a few capabilities (devcell.privileges: spec.security). DevCell's
configuration (`devcell.config`) is the only way to widen them.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell.manifests.model import field_path

if TYPE_CHECKING:
    from devcell.config import SecurityPolicy  # annotations only

FieldPath = tuple[str | int, ...]
RUN_DIR = "/devcell"
"""Where a cell's DevCell-owned run directory (supervisor, secrets) is mounted, read-only."""
SERVICE_LOG_DIR = "/var/log/devcell"
"""Where a cell's service logs are mounted. Both are defined here, not by the container
backend that mounts them, because the rules below reserve them and this module sits below
the backends: a backend may read the rules, the rules may not import a backend."""
RESERVED_MOUNT_PATHS = ("/", "/proc", "/sys", "/dev", "/etc", "/bin", "/sbin", "/usr", "/lib",
                        "/lib64", "/boot", RUN_DIR, SERVICE_LOG_DIR)
"""Paths inside a cell that no mount may hide or overwrite (a mount at or below one)."""
LOCAL_TREE = "/usr/local"
"""Below /usr, the one tree a mount may go into (not at): the image's own additions, where
dev containers mount tool state (/usr/local/share/...); the system's /usr/bin and /usr/lib
stay whole."""


def is_normalised_absolute(path: str) -> bool:
    """Absolute, no `.`/`..`/`//`/trailing slash, and nothing Docker's mount syntax splits on."""
    return (path.startswith("/") and posixpath.normpath(path) == path and "\x00" not in path
            and ":" not in path and "," not in path and "\n" not in path)


def _inside(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root.rstrip("/") + "/")


def _overlap(a: str, b: str) -> bool:
    return _inside(a, b) or _inside(b, a)


def mount_path_problem(path: str) -> str | None:
    if not is_normalised_absolute(path):
        return f"{path!r} must be a normalised absolute path (no '..', '//', ':' or ',')"
    # At or below a reserved path hides it; above one (/var holds /var/log/devcell) makes the
    # engine create the reserved path inside the mounted directory.
    hidden = next((r for r in RESERVED_MOUNT_PATHS
                   if path == r or (r != "/" and _overlap(path, r))
                   and not (r == "/usr" and _inside(path, LOCAL_TREE) and path != LOCAL_TREE)),
                  None)
    if hidden is not None:
        return (f"{path} would hide or overwrite {hidden}, a system directory of the cell; "
                "choose a path such as /workspace or /src")
    return None


def host_path_problem(host_path: str, policy: SecurityPolicy, state_dir: Path) -> str | None:
    """Why the host directory may not be bind-mounted, or None when the policy allows it.

    The engine resolves a bind mount's source again at every container start, so the
    container backend re-checks this before each start, not only at create.
    """
    if not is_normalised_absolute(host_path):
        return f"{host_path!r} must be a normalised absolute path (no '..', '//', ':' or ',')"
    resolved = os.path.realpath(host_path)  # symbolic links cannot step outside an allowed root
    state = os.path.realpath(state_dir)
    if _overlap(resolved, state):
        return (f"{host_path} would expose DevCell's state directory {state_dir} (every cell's "
                "workspace and secrets) inside the cell")
    allowed = [os.path.realpath(p) for p in policy.allowed_host_paths]
    if not any(_inside(resolved, root) for root in allowed):
        shown = f" (resolves to {resolved})" if resolved != host_path else ""
        if not allowed:
            return (f"host bind mounts are off by default: {host_path}{shown} is not allowed; "
                    f"an administrator can allow it in security.allowedHostPaths of "
                    f"{policy.source}")
        return (f"{host_path}{shown} is outside the host paths DevCell's configuration allows "
                f"({', '.join(policy.allowed_host_paths)}; security.allowedHostPaths in "
                f"{policy.source})")
    if not os.path.exists(resolved):
        return f"{host_path} does not exist on this host"
    return None


def build_context_problems(build: dict[str, Any], manifest_dir: str, policy: SecurityPolicy,
                           state_dir: Path) -> Iterator[tuple[FieldPath, str]]:
    """Where a build context may lead: inside the manifest's directory tree (after resolving
    symbolic links, so a link cannot step out) or under security.allowedBuildRoots.

    A build sends every file of its context to the engine, which writes them into an image
    any cell of it can read: a manifest from a GitOps directory must not reach a host
    directory (a home, ~/.ssh) by `context: ../..` or a link. The Dockerfile, sent beside the
    context, may lie where a context may (inside the context, or outside it as `docker build -f
    ../Dockerfile` allows). The state directory is never a context.
    """
    context = str(build.get("context", ""))
    resolved = os.path.realpath(context)
    home = os.path.realpath(manifest_dir)
    roots = [home, *(os.path.realpath(r) for r in policy.allowed_build_roots)]
    shown = f" (resolves to {resolved})" if resolved != context else ""
    if not any(_inside(resolved, root) for root in roots):
        yield ("build", "context"), (
            f"{context}{shown} lies outside the manifest's directory {manifest_dir}; a build "
            "context may not reach outside its manifest's tree unless security."
            f"allowedBuildRoots in {policy.source} lists a directory above it")
        return
    if _overlap(resolved, os.path.realpath(state_dir)):
        yield ("build", "context"), (f"{context}{shown} would send DevCell's state directory "
                                     "(every cell's workspace and secrets) to the engine")
        return
    if not os.path.isdir(resolved):
        yield ("build", "context"), f"{context} is not a directory on this host"
        return
    dockerfile = os.path.join(resolved, str(build.get("dockerfile", "Dockerfile")))
    real = os.path.realpath(dockerfile)
    # Outside the context (docker build -f ../Dockerfile) the engine is sent its text beside
    # the context's files: it may lie where a context may, never in the state directory.
    if real == resolved or not any(_inside(real, root) for root in roots):
        yield ("build", "dockerfile"), (
            f"{build.get('dockerfile')} (resolves to {real}) lies outside the build context "
            f"{context} and outside the manifest's directory {manifest_dir}; a Dockerfile may "
            "lie where a build context may (security.allowedBuildRoots in "
            f"{policy.source} lists directories above the manifest's)")
    elif _inside(real, os.path.realpath(state_dir)):
        yield ("build", "dockerfile"), f"{build.get('dockerfile')} lies in DevCell's state directory"
    elif not os.path.isfile(real):
        yield ("build", "dockerfile"), f"{dockerfile} is not a file on this host"


def feature_folder_problem(folder: str, manifest_dir: str, policy: SecurityPolicy,
                           state_dir: Path) -> str | None:
    """Why a local feature folder (spec.features[].ref) may not be used: the rules of a
    build context (build_context_problems), as its files are sent to the engine the same
    way."""
    resolved = os.path.realpath(folder)
    roots = [os.path.realpath(manifest_dir),
             *(os.path.realpath(r) for r in policy.allowed_build_roots)]
    shown = f" (resolves to {resolved})" if resolved != folder else ""
    if not any(_inside(resolved, root) for root in roots):
        return (f"the feature folder {folder}{shown} lies outside the manifest's directory "
                f"{manifest_dir}; it may not unless security.allowedBuildRoots in "
                f"{policy.source} lists a directory above it")
    if _overlap(resolved, os.path.realpath(state_dir)):
        return f"the feature folder {folder}{shown} would send DevCell's state directory"
    if not os.path.isdir(resolved):
        return f"the feature folder {folder} is not a directory on this host"
    return None


def publish_address_problem(address: str, policy: SecurityPolicy) -> str | None:
    """Why a port may not be published on `address` under `policy` (None: it may)."""
    return _address_problem(address, policy)


def _address_problem(address: str, policy: SecurityPolicy) -> str | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address!r} is not an IP address (e.g. 127.0.0.1)"
    if ip.is_loopback:
        return None
    allowed = set()
    for text in policy.allowed_publish_addresses:
        try:
            allowed.add(ipaddress.ip_address(text))
        except ValueError:
            continue
    if ip in allowed:
        return None
    return (f"publishing on {address} would expose the port beyond this machine; ports are "
            f"published on loopback unless security.allowedPublishAddresses in {policy.source} "
            f"lists the address")


GIT_SCHEMES = ("file", "ssh", "https", "http", "git")
_GIT_USER = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""The user of an ssh or git URL (`ssh://git@host/...`): a name, never a secret's shape."""


def _source_path_problems(key: str, path: str, is_kind: Callable[[str], bool], kind: str,
                          policy: SecurityPolicy, state_dir: Path
                          ) -> Iterator[tuple[FieldPath, str]]:
    """A source read from (or, for hostPath, bound from) this host: a normalised absolute
    path the host-path rules allow, judged where it leads, and of the kind it must be."""
    where: FieldPath = ("workspace", "source", key, "path")
    if "//" in path or os.path.normpath(path) != path.rstrip("/") and path != "/":
        yield where, f"{path!r} must be a normalised absolute path"
        return
    problem = host_path_problem(path.rstrip("/") or "/", policy, state_dir)
    if problem:
        yield where, problem
    elif not is_kind(os.path.realpath(path)):
        yield where, f"{path} is not {kind} on this host"


def _workspace_source_problems(workspace: dict[str, Any], policy: SecurityPolicy,
                               state_dir: Path) -> Iterator[tuple[FieldPath, str]]:
    """A directory, live folder or archive source: a path the host-path rules allow. A
    git source: a remote URL without a password in it (a credential never lands in a
    manifest, the database or a log: git's credential helpers or ssh keys carry it), or a
    repository on this host that the host-path rules allow (a clone reads it as DevCell)."""
    source = workspace.get("source") or {}
    if source and workspace.get("from") is not None:
        yield (("workspace", "source"), "a fork keeps its snapshot's workspace: give "
               "workspace.from or workspace.source, not both")
    for key, is_kind, kind in (("directory", os.path.isdir, "a directory"),
                               ("hostPath", os.path.isdir, "a directory"),
                               ("archive", os.path.isfile, "a file")):
        if source.get(key) is not None:
            yield from _source_path_problems(key, str(source[key].get("path", "")), is_kind,
                                             kind, policy, state_dir)
            return
    git = source.get("git")
    if git is None:
        return
    yield from git_url_problems(str(git.get("url", "")), ("workspace", "source", "git", "url"),
                                policy, state_dir)


def git_url_problems(url: str, where: FieldPath, policy: SecurityPolicy, state_dir: Path
                     ) -> Iterator[tuple[FieldPath, str]]:
    """A URL git clones from (a workspace's source, a cell's dotfiles): a remote without a
    password in it, or a repository on this host that the host-path rules allow."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        path = url
    elif scheme not in GIT_SCHEMES:
        yield where, (f"{scheme}:// is not a git transport DevCell clones from (use "
                      f"{', '.join(s + '://' for s in GIT_SCHEMES)} or an absolute path)")
        return
    elif scheme == "file":
        path = rest
    else:
        user, at, _ = rest.rpartition("@")
        if at and (scheme in ("http", "https") or not _GIT_USER.fullmatch(user)):
            yield where, ("the URL holds credentials (a user and password or a token); remove "
                          "them and let git's credential helper or an ssh key provide them "
                          "(a credential never belongs in a manifest)")
        return
    if not path.startswith("/") or ":" in path or "//" in path:
        # Not echoed: `user:token@host:repo` is a credential pasted in the wrong shape.
        yield where, ("neither a URL DevCell clones from (" + ", ".join(
            s + "://" for s in GIT_SCHEMES) + ") nor a normalised absolute path on this "
            "host; write an scp-like address host:path as ssh://host/path")
        return
    problem = host_path_problem(path.rstrip("/") or "/", policy, state_dir)
    if problem:
        yield where, problem


def cell_problems(spec: dict[str, Any], policy: SecurityPolicy, state_dir: Path
                  ) -> Iterator[tuple[FieldPath, str]]:
    """Every rule a Cell spec breaks, as (field path under spec, message)."""
    workspace = (spec.get("workspace") or {}).get("mountPath", "/workspace")
    problem = mount_path_problem(workspace)
    if problem:
        yield ("workspace", "mountPath"), problem
    yield from _workspace_source_problems(spec.get("workspace") or {}, policy, state_dir)
    dotfiles = (spec.get("dotfiles") or {}).get("git")
    if dotfiles is not None:
        yield from git_url_problems(str(dotfiles.get("url", "")), ("dotfiles", "git", "url"),
                                    policy, state_dir)
    target = str((spec.get("dotfiles") or {}).get("targetPath") or "")
    if target:
        yield from _dotfiles_target_problems(target, spec)
    taken: list[tuple[str, FieldPath]] = [(workspace, ("workspace", "mountPath"))]
    hosts: list[tuple[int, str]] = []
    live = ((spec.get("workspace") or {}).get("source") or {}).get("hostPath")
    folder = os.path.realpath(str(live.get("path", ""))) if live else None
    for i, mount in enumerate(spec.get("mounts") or []):
        inside = mount.get("mountPath", "")
        problem = mount_path_problem(inside)
        if problem:
            yield ("mounts", i, "mountPath"), problem
        else:
            clash = next(((other, where) for other, where in taken if _overlap(inside, other)),
                         None)
            if clash is not None:
                yield (("mounts", i, "mountPath"),
                       f"{inside} overlaps {clash[0]} ({spec_field(clash[1])}); mounts may not "
                       "nest or repeat")
            taken.append((inside, ("mounts", i, "mountPath")))
        host = mount.get("hostPath", "")
        problem = host_path_problem(host, policy, state_dir)
        if problem:
            yield ("mounts", i, "hostPath"), problem
        else:
            # Nested host paths let a writable mount swap a directory of the other one for a
            # symbolic link, which the engine would follow on the next start.
            resolved = os.path.realpath(host)
            if folder is not None and _overlap(resolved, folder):
                yield (("mounts", i, "hostPath"),
                       f"{host} overlaps spec.workspace.source.hostPath.path, the workspace "
                       "folder; host paths of one cell may not nest or repeat")
            clash_at = next((j for j, other in hosts if _overlap(resolved, other)), None)
            if clash_at is not None:
                yield (("mounts", i, "hostPath"),
                       f"{host} overlaps spec.mounts[{clash_at}].hostPath; host paths of one "
                       "cell may not nest or repeat")
            hosts.append((i, resolved))
    yield from _volume_problems(spec, taken)
    if (spec.get("hooks") or {}).get("hostInitialize") and not policy.allow_host_commands:
        yield (("hooks", "hostInitialize"),
               "commands on the host run as the user DevCell runs as, with everything that "
               "user can reach, and are off by default; an administrator can allow them with "
               f"security.allowHostCommands: true in {policy.source}")
    from devcell import privileges  # a Cell's rules only (snapshot create reads this module)

    yield from privileges.cell_problems(spec, policy)
    options = (spec.get("security") or {}).get("securityOpt") or []
    written = host_written(spec)
    if privileges.LIFT_NO_NEW_PRIVILEGES in options and written:
        yield (("security", "securityOpt", options.index(privileges.LIFT_NO_NEW_PRIVILEGES)),
               f"{privileges.LIFT_NO_NEW_PRIVILEGES} cannot go with a host folder the cell "
               f"writes ({', '.join(written)}): such a cell runs as a user other than root so "
               "that nothing it leaves there is a set-user-ID root program on the host, and "
               "without no-new-privileges a setuid program (sudo) would make it root; mount "
               "the folders read-only or leave the option out")
    network = spec.get("network") or {}
    mode = network.get("mode", "none")
    if mode == "host" and not policy.allow_host_network:
        yield (("network", "mode"),
               "host networking shares the host's network namespace and is off by default; an "
               f"administrator can allow it with security.allowHostNetwork: true in "
               f"{policy.source}")
    lists: list[tuple[FieldPath, list[dict[str, Any]]]] = [
        (("network", "ports"), network.get("ports") or [])]
    lists += [(("sidecars", i, "ports"), sidecar.get("ports") or [])
              for i, sidecar in enumerate(spec.get("sidecars") or [])]
    bound: list[tuple[str, int, FieldPath]] = []
    for where, ports in lists:
        if ports and mode != "bridge":
            yield (where, "ports are published only with network.mode bridge (mode is "
                          f"{mode})")
        for i, port in enumerate(ports):
            address = str(port.get("hostIP", "127.0.0.1"))
            problem = _address_problem(address, policy)
            if problem:
                yield (*where, i, "hostIP"), problem
            host_port = int(port.get("hostPort", port.get("containerPort", 0)))
            # The engine binds each host address:port once; the unspecified address (0.0.0.0,
            # ::) takes the port on every address, so it clashes with any other binding of it.
            taken_by = next((at for other, other_port, at in bound
                             if other_port == host_port and _same_binding(address, other)),
                            None)
            if taken_by is not None:
                yield ((*where, i, "hostPort"),
                       f"{address}:{host_port} is already published by {spec_field(taken_by)}")
            bound.append((address, host_port, (*where, i)))


def _volume_problems(spec: dict[str, Any], taken: list[tuple[str, FieldPath]]
                     ) -> Iterator[tuple[FieldPath, str]]:
    """The cell's named volumes (mounted in its container, beside the workspace and its
    mounts: `taken`) and its sidecars' data volumes (each in its own container)."""
    for i, volume in enumerate(spec.get("volumes") or []):
        inside = str(volume.get("mountPath", ""))
        problem = mount_path_problem(inside)
        if problem:
            yield ("volumes", i, "mountPath"), problem
            continue
        clash = next(((other, where) for other, where in taken if _overlap(inside, other)), None)
        if clash is not None:
            yield (("volumes", i, "mountPath"),
                   f"{inside} overlaps {clash[0]} ({spec_field(clash[1])}); mounts and volumes "
                   "may not nest or repeat")
        taken.append((inside, ("volumes", i, "mountPath")))
    for i, sidecar in enumerate(spec.get("sidecars") or []):
        data = (sidecar.get("volume") or {}).get("mountPath")
        if data is not None:
            problem = mount_path_problem(str(data))
            if problem:
                yield ("sidecars", i, "volume", "mountPath"), problem


def host_written(spec: dict[str, Any]) -> list[str]:
    """Where the cell sees host folders it writes: a live workspace folder's mountPath and
    every writable mount's (the developer's files, which DevCell's dotfiles never touch)."""
    workspace = spec.get("workspace") or {}
    live = (workspace.get("source") or {}).get("hostPath") and workspace.get("from") is None
    return ([str(workspace.get("mountPath") or "/workspace")] if live else []) + [
        str(m["mountPath"]) for m in spec.get("mounts") or []
        if not m.get("readOnly") and m.get("mountPath")]


_WORDS = re.compile(r"[^\s'\"`;&|()<>=:]+")


def host_command_problem(spec: dict[str, Any], folder: str,
                         others: dict[str, dict[str, Any]] | None = None) -> str | None:
    """Why spec.hooks.hostInitialize may not run in `folder` (None: it may): a host folder
    the cell writes (a live workspace, a writable mount), or one another cell writes
    (`others`: name -> spec), holds that folder, lies inside it, or holds a path a command
    names. A cell could then change the script, the git configuration or the file the host
    command runs at the next start: a way out onto the host, whoever wrote the manifest."""
    written = [(root, spec_field(host_mount_field(spec, i)))
               for i, (root, read_only) in enumerate(host_mounts(spec)) if not read_only]
    for name, other in sorted((others or {}).items()):
        written += [(root, f"cell {name}'s {spec_field(host_mount_field(other, i))}")
                    for i, (root, read_only) in enumerate(host_mounts(other))
                    if not read_only]
    if not written:
        return None
    where = os.path.realpath(folder)
    for root, field in written:
        if _overlap(where, root):
            return (f"they run in {folder} (the manifest's folder), which overlaps {root}, "
                    f"a folder a cell writes ({field}): the cell could change what they "
                    "run; keep the manifest in a folder apart from those cells write")
    for argv in (spec.get("hooks") or {}).get("hostInitialize") or []:
        for arg in argv:
            for word in _WORDS.findall(str(arg)):
                if "/" not in word:
                    continue
                path = os.path.realpath(os.path.join(
                    where, os.path.expandvars(os.path.expanduser(word))))
                for root, field in written:
                    if _inside(path, root):
                        return (f"a command names {word}, in {root}, which a cell writes "
                                f"({field}): it could change what runs on the host; run a "
                                "file no cell can write")
    return None


def _dotfiles_target_problems(target: str, spec: dict[str, Any]
                              ) -> Iterator[tuple[FieldPath, str]]:
    where: FieldPath = ("dotfiles", "targetPath")
    inside = target.removeprefix("~")
    if posixpath.normpath(inside) != inside:
        yield where, f"{target} must be a normalised path (no '.' or '..')"
        return
    if target.startswith("~"):
        return  # the home is known only in the cell, where the install judges it again
    clash = next((p for p in host_written(spec) if _inside(target, p)), None)
    if clash is not None:
        yield where, (f"{target} lies in {clash}, a host folder the cell writes (the "
                      "developer's files, which DevCell never fills or removes); put the "
                      "dotfiles elsewhere, e.g. ~/dotfiles")


def port_entries(spec: dict[str, Any]) -> list[tuple[FieldPath, dict[str, Any]]]:
    """Every port entry a cell publishes, with its field under spec: the cell's own
    (spec.network.ports), then its sidecars' (published through the cell's network
    namespace, so through its container)."""
    found: list[tuple[FieldPath, dict[str, Any]]] = [
        (("network", "ports", i), port)
        for i, port in enumerate((spec.get("network") or {}).get("ports") or [])]
    for s, sidecar in enumerate(spec.get("sidecars") or []):
        if isinstance(sidecar, dict):
            found += [(("sidecars", s, "ports", i), port)
                      for i, port in enumerate(sidecar.get("ports") or [])]
    return found


def published(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """The host (address, port) pairs a cell's spec publishes, in port_entries' order."""
    return [(str(port.get("hostIP", "127.0.0.1")),
             int(port.get("hostPort", port.get("containerPort", 0))))
            for _, port in port_entries(spec)]


def port_clashes(spec: dict[str, Any], others: dict[str, dict[str, Any]]
                 ) -> Iterator[tuple[FieldPath, str]]:
    """Each host port of `spec` another cell (`others`: name -> spec) already publishes on
    an address that cannot bind it twice: the engine would refuse the second cell's start
    ("port is already allocated") and leave it failing for ever."""
    for (where, _), (address, port) in zip(port_entries(spec), published(spec), strict=True):
        for name, other in sorted(others.items()):
            if any(port == other_port and _same_binding(address, other_address)
                   for other_address, other_port in published(other)):
                yield ((*where, "hostPort"),
                       f'{address}:{port} is already published by cell "{name}"; give this '
                       "cell another hostPort (a fork: --port CONTAINER:HOST or --no-ports)")
                break


def _same_binding(a: str, b: str) -> bool:
    """Whether two host addresses cannot both bind one port."""
    try:
        ip_a, ip_b = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return a == b
    if ip_a == ip_b:
        return True
    # :: is dual-stack on Linux (it takes the IPv4 port too); 0.0.0.0 only IPv4's.
    either = (ip_a, ip_b)
    return (any(ip.is_unspecified and ip.version == 6 for ip in either)
            or (ip_a.version == ip_b.version and any(ip.is_unspecified for ip in either)))


HostMount = tuple[str, bool]
"""(resolved host path, read-only)"""


def host_mounts(spec: dict[str, Any]) -> list[HostMount]:
    """Each host path the cell binds: its mounts, then a workspace folder bound live
    (writable; see host_mount_field)."""
    found = [(os.path.realpath(m.get("hostPath", "")), bool(m.get("readOnly", False)))
             for m in spec.get("mounts") or []]
    live = ((spec.get("workspace") or {}).get("source") or {}).get("hostPath")
    if live and (spec.get("workspace") or {}).get("from") is None:
        found.append((os.path.realpath(str(live.get("path", ""))), False))
    return found


def host_mount_field(spec: dict[str, Any], i: int) -> FieldPath:
    """The field under spec that gave host_mounts(spec)[i]."""
    if i < len(spec.get("mounts") or []):
        return ("mounts", i, "hostPath")
    return ("workspace", "source", "hostPath", "path")


def shared_mount_problem(mine: HostMount, theirs: HostMount, owner: str) -> str | None:
    """Why two cells may not mount these host paths (None: they may).

    Overlapping host paths where either side is writable would let one cell replace a
    directory of the other's source with a symbolic link, which the engine follows at the
    other's next start (a check just before that start can lose the race): refused.
    Overlapping read-only mounts cannot change anything, and are allowed.
    """
    (path, read_only), (other, other_read_only) = mine, theirs
    if not _overlap(path, other) or (read_only and other_read_only):
        return None
    return (f"{path} overlaps {other}, which cell {owner} mounts"
            f"{'' if other_read_only else ' read-write'}; cells may share a host directory "
            "only if every one of them mounts it read-only")


def spec_field(path: FieldPath) -> str:
    """A path under spec, as messages name it (spec.mounts[0].hostPath)."""
    return field_path(("spec", *path))
