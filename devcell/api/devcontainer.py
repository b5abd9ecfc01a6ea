"""`devcell import devcontainer`: a Cell manifest from a devcontainer.json.

A large share of teams describe their environment in `.devcontainer/devcontainer.json` (VS
Code, Codespaces, DevPod and Coder read it). This converts what has an equivalent (the image
or its Dockerfile build, the environment, forwarded ports published on loopback, the
create/start commands as hooks, bind mounts, the workspace path, the privileges asked for as
spec.security: devcontainer_run_args), refuses what would break DevCell's security defaults
beyond what its configuration allows (privileges, the host's network, the host's namespaces,
mounts passed around the mount rules), carries Dev Container Features as spec.features
(devcontainer_features), and names every other field it leaves out, so nothing is dropped
silently. devcontainer.json is JSONC (comments, trailing commas): it is read with json5, a
maintained reader of JSON5, which JSONC is a subset of.

The manifest is checked as `apply` would check it before it is handed back, so what this
writes applies (or the import fails, naming the devcontainer.json field to change).
"""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import API_VERSION, config, names, safeio, security
from devcell.api import (
    devcontainer_command,
    devcontainer_features,
    devcontainer_lifecycle,
    devcontainer_run_args,
    devcontainer_runtime,
    devcontainer_source,
    devcontainer_vars,
    devcontainer_volumes,
)
from devcell.api.devcontainer_compose_yaml import Where
from devcell.api.devcontainer_rules import host_takeover, looks_secret
from devcell.errors import ManifestError, Problem
from devcell.manifests import jsonc_positions

DEFAULT_PATHS = (".devcontainer/devcontainer.json", ".devcontainer.json")
MAX_BYTES = 1 << 20
NO_EQUIVALENT = {
    "updateRemoteUserUID": "no user is remapped",
    "shutdownAction": "a cell stops when its spec.state says so",
    "portsAttributes": "ports are published on 127.0.0.1 without labels or actions",
    "otherPortsAttributes": "ports are published on 127.0.0.1 without labels or actions",
    "waitFor": "hooks always finish before the cell is Ready",
    "$schema": "",
    "runServices": "it is read only with dockerComposeFile",
    "service": "it is read only with dockerComposeFile",
    "secrets": "declare secret values as spec.env entries with secret: true",
}
_DENIED_RUN_ARGS = {
    "--pid": "the host's process namespace is not shared",
    "--ipc": "the host's IPC namespace is not shared",
    "--uts": "the host's UTS namespace is not shared",
    "--userns": "the host's user namespace is not shared",
    "--cgroupns": "the host's cgroup namespace is not shared",
    "-v": "bind mounts go through spec.mounts and its rules (use devcontainer.json's mounts)",
    "--volume": "bind mounts go through spec.mounts and its rules (use devcontainer.json's "
                "mounts)",
    "--mount": "bind mounts go through spec.mounts and its rules (use devcontainer.json's "
               "mounts)",
    "--volumes-from": "another container's volumes are not shared",
    "--add-host": "cells resolve no extra host names",
    "--device-cgroup-rule": "host devices are given one by one (--device, spec.security."
                            "devices, where security.allowedDevices allows them)",
    "--gpus": "host devices are given one by one (--device, spec.security.devices, where "
              "security.allowedDevices allows them)",
}
_VALUED_RUN_ARGS = frozenset("""
    --add-host --annotation -a --attach --blkio-weight --blkio-weight-device --cap-add
    --cap-drop --cgroup-parent --cgroupns --cidfile --cpu-count --cpu-percent --cpu-period
    --cpu-quota --cpu-rt-period --cpu-rt-runtime -c --cpu-shares --cpus --cpuset-cpus
    --cpuset-mems --detach-keys --device --device-cgroup-rule --device-read-bps
    --device-read-iops --device-write-bps --device-write-iops --dns --dns-opt --dns-option
    --dns-search --domainname --entrypoint -e --env --env-file --expose --gpus --group-add
    --health-cmd --health-interval --health-retries --health-start-interval
    --health-start-period --health-timeout -h --hostname --io-maxbandwidth --io-maxiops --ip
    --ip6 --ipc --isolation --kernel-memory -l --label --label-file --link --link-local-ip
    --log-driver --log-opt --mac-address -m --memory --memory-reservation --memory-swap
    --memory-swappiness --mount --name --net --network --net-alias --network-alias
    --oom-score-adj --pid --pids-limit --platform -p --publish --pull --restart --runtime
    --security-opt --shm-size --stop-signal --stop-timeout --storage-opt --sysctl --tmpfs
    --ulimit -u --user --userns --uts -v --volume --volume-driver --volumes-from -w --workdir
    """.split())
"""Every option of `docker run` (docker 27's reference) that takes a value: its next
argument is that value, never a flag of its own."""
_WORKSPACE_VARS = ("localWorkspaceFolder", "localWorkspaceFolderBasename",
                   "containerWorkspaceFolder", "containerWorkspaceFolderBasename")


@dataclass
class Conversion:
    """The manifest made, and every field left out (reported on stderr by the CLI)."""

    manifest: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    """What the import chose on its own (the workspace's source), said on stderr."""
    problems: list[Problem] = field(default_factory=list)
    """What `apply` would refuse in the manifest that is of DevCell's own making (blamed on
    the manifest written, not on devcontainer.json): the CLI refuses to write it."""


def find(path: str | None, cwd: Path) -> Path:
    """The devcontainer.json to read: `path` (a file, or a directory holding one of the
    default names), else .devcontainer/devcontainer.json or .devcontainer.json here."""
    base = Path(path) if path else cwd
    if path and not base.is_dir():
        return base
    for candidate in DEFAULT_PATHS:
        if (base / candidate).is_file():
            return base / candidate
    raise ManifestError([Problem(str(base), "no devcontainer.json found (looked for "
                                 + " and ".join(DEFAULT_PATHS) + ")")])


def project_root(source: Path) -> Path:
    """${localWorkspaceFolder}: the folder that holds .devcontainer (or .devcontainer.json)."""
    source = source.resolve()
    for parent in source.parents:
        if parent.name == ".devcontainer":
            return parent.parent
    return source.parent


class _Reader:
    """The devcontainer.json's text, its data, and where a field is in it."""

    def __init__(self, path: Path) -> None:
        import json5

        self.path = path
        self.display = str(path)
        data = _read_regular(path, self.display)
        if len(data) > MAX_BYTES:
            raise ManifestError([Problem(self.display, "larger than 1 MiB")])
        try:
            self.text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ManifestError([Problem(self.display, "not valid UTF-8")]) from None
        try:
            self.data = json5.loads(self.text, allow_duplicate_keys=False)
        except ValueError as exc:
            raise ManifestError([self._syntax(str(exc))]) from None
        except RecursionError:  # json5's parser recurses once per level of nesting
            raise ManifestError([Problem(self.display, "not valid JSONC: nested too deeply")]) \
                from None
        if not isinstance(self.data, dict):
            raise ManifestError([Problem(self.display, "expected a JSON object")])
        self.problems: list[Problem] = []
        for keys in _huge_numbers(self.data):
            self.refuse("a number too large (more than 64 bits); no devcontainer.json field "
                        "takes one", *keys)
        if self.problems:
            raise ManifestError(self.problems)

    def _syntax(self, message: str) -> Problem:
        found = re.fullmatch(r"<string>:(\d+) (.*?)(?: at column (\d+))?", message)
        if found:
            column = int(found.group(3)) if found.group(3) else None
            return Problem(self.display, f"not valid JSONC: {found.group(2)}",
                           line=int(found.group(1)), column=column)
        dup = re.match(r'Duplicate key "(.*)" found', message)
        if dup:
            return Problem(self.display, f'duplicate key "{dup.group(1)}"',
                           line=self.line(dup.group(1), nth=2), field=dup.group(1))
        return Problem(self.display, f"not valid JSONC: {message}")

    def line(self, *keys: str | int, nth: int = 1) -> int | None:
        """The line of the field at the path `keys` (keys and array indexes), found by
        reading the JSONC tokens (never in a comment or a string), else its parent's."""
        if self._positions is None:
            self._positions = jsonc_positions.positions(self.text)
        return jsonc_positions.line_of(self._positions, tuple(keys), nth)

    _positions: dict[jsonc_positions.Path, list[int]] | None = None

    def refuse(self, message: str, *keys: str | int, shown: str | None = None) -> None:
        self.problems.append(Problem(self.display, message, line=self.line(*keys) or 1,
                                     field=shown or _field(keys)))


def _read_regular(path: Path, display: str) -> bytes:
    """At most MAX_BYTES + 1 bytes of `path`, opened without blocking and read only when it
    is a regular file (a FIFO or a device given as the path would block or never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ManifestError([Problem(display, f"cannot read it: {exc.strerror}")]) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ManifestError([Problem(display, "not a regular file (it is "
                                         f"{safeio.describe_mode(mode)}); give the path of a "
                                         "devcontainer.json file or of its project folder")])
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ManifestError([Problem(display, f"cannot read it: {exc.strerror}")]) from None
    finally:
        os.close(fd)


def _huge_numbers(data: Any) -> list[tuple[str | int, ...]]:
    """The paths of the integers that need more than 64 bits (JSON5 allows hex of any
    length; such a number cannot even be printed in decimal), walked without recursion."""
    found: list[tuple[str | int, ...]] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        keys, value = stack.pop()
        if isinstance(value, dict):
            stack.extend(((*keys, str(k)), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*keys, i), v) for i, v in enumerate(value))
        elif isinstance(value, int) and not isinstance(value, bool) \
                and value.bit_length() > 64:
            found.append(keys)
    return sorted(found, key=str)


def _field(keys: tuple[str | int, ...]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def _name(given: str | None, data: dict[str, Any], root: Path) -> str:
    if given is not None:
        problem = names.name_problem(given)
        if problem:
            raise ManifestError([Problem("--name", problem)])
        return given
    raw = data.get("name") if isinstance(data.get("name"), str) else root.name
    name = re.sub(r"[^a-z0-9]+", "-", str(raw).lower()).strip("-")[:63].strip("-")
    return name or "devcontainer"


def _command(value: Any) -> list[list[str]] | None:
    """A lifecycle command in its three forms: a string (run by /bin/sh -c), an array (run
    as is), an object of either (each run, one after another)."""
    if isinstance(value, str):
        return [["/bin/sh", "-c", value]] if value.strip() else []
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [list(value)]
    if isinstance(value, dict):
        out: list[list[str]] = []
        for item in value.values():
            converted = _command(item)
            if converted is None:
                return None
            out += converted
        return out
    return None


def _mount_fields(value: Any) -> dict[str, str] | None:
    """A mount as devcontainer.json writes it: `source=...,target=...,type=bind` or the
    same as an object; keys normalised (src/dst/destination, readonly/ro), a target's
    trailing slash dropped (`target=/home/dev/.cache/`, which the engine accepts)."""
    pairs: dict[str, str] = {}
    if isinstance(value, dict):
        pairs = {str(k): str(v).lower() if isinstance(v, bool) else str(v)
                 for k, v in value.items()}
    elif isinstance(value, str):
        for part in value.split(","):
            key, sep, val = part.partition("=")
            pairs[key.strip()] = val.strip() if sep else "true"
    else:
        return None
    aliases = {"src": "source", "dst": "target", "destination": "target", "ro": "readonly"}
    fields = {aliases.get(k, k): v for k, v in pairs.items()}
    if len(fields.get("target", "")) > 1:
        fields["target"] = fields["target"].rstrip("/") or "/"
    return fields


class _Converter:
    def __init__(self, reader: _Reader, *, name: str | None, out_dir: Path,
                 policy: config.SecurityPolicy, state_dir: Path,
                 env: Mapping[str, str]) -> None:
        self.r = reader
        self.local_env = env
        self.data = reader.data
        self.root = project_root(reader.path)
        self.out_dir = out_dir
        self.policy = policy
        self.state_dir = state_dir
        self.notes: list[str] = []
        self.spec: dict[str, Any] = {"backend": "container"}
        self.name = _name(name, self.data, self.root)
        self.env: dict[str, str] = {}
        self.origins: dict[str, tuple[str | int, ...]] = {}
        """Manifest field -> the devcontainer.json path it came from, so a problem found in
        what was made names the line of devcontainer.json, not of the unwritten cell.yaml."""
        self.located: dict[str, Where] = {}
        """The same for fields that came from a compose file."""
        self.env_origin: dict[str, tuple[str | int, ...] | Where] = {}
        self.secret_sourced: set[tuple[str | int, ...]] = set()
        """Fields filled from a host variable named as a credential (GITHUB_TOKEN)."""
        self.ports: list[dict[str, Any]] = []
        self.sidecar_ports: list[tuple[str, int]] = []
        self.compose_services: set[str] = set()
        """The compose services run in the cell (forwardPorts' `db:5432` names one)."""
        self.said: list[str] = []
        self.mount_path = f"/workspaces/{self.root.name}"
        self.dockerfile: Path | None = None
        self.vars = devcontainer_vars.variables(self.root, reader.path.resolve(),
                                                self.mount_path, self.local_env)
        self.annotations: dict[str, str] = {}

    def note(self, key: str, why: str) -> None:
        self.notes.append(f"{key}: not converted ({why})" if why else f"{key}: not converted")

    def convert(self) -> Conversion:
        handled = {"name", "image", "build", "dockerFile", "context", "containerEnv",
                   "remoteEnv", "forwardPorts", "appPort", "onCreateCommand",
                   "updateContentCommand", "postCreateCommand", "postStartCommand", "mounts",
                   "workspaceFolder", "workspaceMount", "runArgs", "features",
                   "overrideFeatureInstallOrder", "privileged", "capAdd", "securityOpt",
                   "dockerComposeFile", "hostRequirements", "overrideCommand"
                   } | devcontainer_lifecycle.HANDLED | devcontainer_run_args.HANDLED
        if "dockerComposeFile" in self.data:
            handled |= {"service", "runServices"}
        self._workspace()
        self._image()
        devcontainer_features.convert(self)
        self._env()
        self._ports()
        self._hooks()
        devcontainer_lifecycle.convert(self, _command)
        self._mounts()
        self._run_args()
        devcontainer_run_args.top_level(self)
        for key in self.data:
            if key not in handled:
                self.note(key, NO_EQUIVALENT.get(key, "no equivalent in DevCell"))
        if self.r.problems:
            raise ManifestError(self.r.problems)
        spec = self.spec
        spec["workspace"] = {"mountPath": self.mount_path}
        chosen = devcontainer_source.choose(
            self.root, self.policy, self.state_dir,
            live=not devcontainer_lifecycle.runs_on_host_in(self, self.root))
        if chosen.git is not None:
            spec["workspace"]["source"] = {"git": chosen.git}
        elif chosen.source is not None:
            spec["workspace"]["source"] = chosen.source
            if "hostPath" in chosen.source:
                devcontainer_lifecycle.user_on_live_folder(self, self.root)
        self.notes.extend(chosen.warnings)
        if self.env:
            spec["env"] = []
            for i, (var, value) in enumerate(self.env.items()):
                entry: dict[str, Any] = {"name": var, "value": value}
                if looks_secret(var) or self.env_origin[var] in self.secret_sourced:
                    entry["secret"] = True
                    origin = self.env_origin[var]
                    shown = _field(origin) if isinstance(origin, tuple) else str(origin)
                    self.notes.append(f"{shown}: imported as a secret "
                                      "(secret: true: never shown or logged) because its name "
                                      "(or the variable it is filled from) "
                                      "looks like a credential; consider keeping its value out "
                                      "of the manifest's file")
                spec["env"].append(entry)
                origin = self.env_origin[var]
                if isinstance(origin, Where):
                    self.located[f"spec.env[{i}]"] = origin
                else:
                    self.origins[f"spec.env[{i}]"] = origin
        if self.ports and (spec.get("network") or {}).get("mode") == "host":
            self.note("forwardPorts", "the cell uses the host's network (runArgs "
                      "--network=host): its ports are the host's own")
        elif self.ports:
            spec["network"] = {"mode": "bridge", "ports": self.ports}
        elif self.sidecar_ports:  # a sidecar's ports are published through the cell's network
            spec["network"] = {"mode": "bridge"}
        said = [*self.said, chosen.said, devcontainer_runtime.network(self.data, spec)]
        self.notes.extend(devcontainer_runtime.sudo(
            self.data, spec.get("user") or chosen.runs_as,
            lifted=devcontainer_run_args.lifts_no_new_privileges(spec)))
        self.notes.extend(devcontainer_runtime.host_requirements(self.data, spec,
                                                                 self.origins))
        if not any(s.get("name") == "main" for s in spec.get("services", [])):  # compose's
            self.notes.extend(devcontainer_command.keep(self.data, spec, self.dockerfile))
        metadata: dict[str, Any] = {"name": self.name}
        if self.annotations:
            metadata["annotations"] = self.annotations
        manifest = {"apiVersion": API_VERSION, "kind": "Cell", "metadata": metadata,
                    "spec": spec}
        return Conversion(manifest, self.notes, said)

    # -- one devcontainer.json field (or group) each ------------------------------------------

    def _workspace(self) -> None:
        folder = self.data.get("workspaceFolder")
        mount = self.data.get("workspaceMount")
        if mount is not None:
            fields = _mount_fields(mount)
            target = (fields or {}).get("target")
            if not target:
                self.r.refuse("expected a mount with a target (target=/workspace)",
                              "workspaceMount")
            else:
                self.mount_path = target
                source = (fields or {}).get("source", "${localWorkspaceFolder}")
                if source.rstrip("/") != "${localWorkspaceFolder}":
                    self.notes.append(f"workspaceMount: the workspace is mounted at {target}; "
                                      f"its files come from the project folder (the workspace "
                                      f"line), not from {source}")
            if isinstance(folder, str) and target and folder != target:
                self.note("workspaceFolder", f"the workspace is at {target} (workspaceMount)")
        elif isinstance(folder, str):
            self.mount_path = folder
        elif folder is not None:
            self.r.refuse("expected a string", "workspaceFolder")
        self.origins["spec.workspace"] = (
            ("workspaceMount",) if mount is not None else ("workspaceFolder",))
        self.vars = devcontainer_vars.variables(self.root, self.r.path.resolve(), "/",
                                                self.local_env)  # the path is not known yet
        key = "workspaceMount" if mount is not None else "workspaceFolder"
        expanded = self._filled(self.mount_path, key)
        problem = ("holds ${containerEnv:...}, which only the container knows"
                   if expanded is not None and "${containerEnv:" in expanded
                   else security.mount_path_problem(expanded) if expanded is not None
                   else None)
        if problem:
            self.r.refuse(f"the workspace path {problem}", key)
        elif expanded is not None:
            self.mount_path = expanded
        self.vars = devcontainer_vars.variables(self.root, self.r.path.resolve(),
                                                self.mount_path, self.local_env)

    def _filled(self, value: str, *keys: str | int, shown: str | None = None) -> str | None:
        """`value` with the specification's variables filled in (devcontainer_vars); None,
        and the field refused naming the variable, when one is unset and has no default.
        `${containerEnv:...}` is left as written: only the container knows it."""
        filled = self.vars.fill(value)
        if filled.unset:
            listed = ", ".join("${" + name + "}" for name in filled.unset)
            self.r.refuse(f"{listed} is not set in the environment of this import and has no "
                          "default; set it, or write ${localEnv:NAME:default}", *keys,
                          shown=shown)
            return None
        credentials = [name for name in filled.read if looks_secret(name)]
        if credentials and keys not in self.secret_sourced:
            self.secret_sourced.add(keys)
            listed = ", ".join(names.printable(name) for name in credentials)
            self.notes.append(
                f"{shown or _field(keys)}: takes the value of {listed} from this shell's "
                "environment, a credential by its name: the cell (and the manifest's file) "
                "will hold it; keep it only for a project you trust")
        return filled.text

    def _filled_command(self, commands: list[list[str]], key: str) -> list[list[str]] | None:
        """A lifecycle command with its variables filled in (None: refused). In a string
        command (run by /bin/sh -c in the cell) `${containerEnv:NAME}` becomes the shell's
        own `${NAME}`, which is what it means there; in an array it is refused."""
        out: list[list[str]] = []
        for argv in commands:
            filled: list[str] = []
            for arg in argv:
                text = self._filled(arg, key)
                if text is None:
                    return None
                if argv[:2] == ["/bin/sh", "-c"]:
                    text = devcontainer_vars.as_shell(text)
                elif "${containerEnv:" in text:
                    self.r.refuse("${containerEnv:...} in an array command: only the "
                                  "container knows it; write the command as a string (run by "
                                  "/bin/sh -c) to use $NAME", key)
                    return None
                filled.append(text)
            out.append(filled)
        return out

    def _image(self) -> None:
        image = self.data.get("image")
        build = self.data.get("build")
        legacy = self.data.get("dockerFile")
        if self.data.get("dockerComposeFile") is not None:
            self._compose()
            return
        if build is None and legacy is not None:
            build = {"dockerfile": legacy, "context": self.data.get("context", ".")}
        if isinstance(image, str) and build is None:
            filled = self._filled(image, "image")
            if filled is None:
                return
            self.spec["image"] = filled
            self.origins["spec.image"] = ("image",)
            return
        if image is not None and build is not None:
            self.notes.append("image: not converted (build is used; DevCell tags the built "
                              "image itself)")
        if image is None and build is None:
            self.r.refuse("the file names no image: give image, build.dockerfile or "
                          "dockerComposeFile (the devcontainer CLI refuses such a file too; "
                          "GitHub Codespaces would start its universal image, "
                          "mcr.microsoft.com/devcontainers/universal:2, several GB: DevCell "
                          "picks none for you)", "image")
            return
        if not isinstance(build, dict):
            self.r.refuse("expected image (a string) or build (an object with dockerfile)",
                          "build" if build is not None else "image")
            return
        self._build(build, "build" if "build" in self.data else "dockerFile")

    def _compose(self) -> None:
        """The cell (the service named) and its sidecars (runServices) of a Docker Compose
        configuration: devcontainer_compose maps them; their fields are blamed on the
        compose files' lines."""
        from devcell.api import devcontainer_compose

        mapped = devcontainer_compose.convert(self.r, self.root, out_dir=self.out_dir,
                                              policy=self.policy, state_dir=self.state_dir,
                                              environ=self.local_env)
        self.notes += mapped.notes
        self.said += mapped.said
        self.r.problems += mapped.problems
        if mapped.where is not None and (mapped.image or mapped.build):
            key = "image" if mapped.image else "build"
            self.spec[key] = mapped.image or mapped.build
            self.located[f"spec.{key}"] = mapped.where
        for var, value, where in mapped.env:
            self.env[var] = value
            self.env_origin[var] = where
        for port, where in mapped.ports:
            if all((p["hostIP"], p["hostPort"]) != (port["hostIP"], port["hostPort"])
                   for p in self.ports):
                self.located[f"spec.network.ports[{len(self.ports)}]"] = where
                self.ports.append(port)
        if mapped.command is not None:
            self.spec["services"] = [{"name": "main", "command": mapped.command[0]}]
            self.located["spec.services[0]"] = mapped.command[1]
        if mapped.security:
            self.spec["security"] = mapped.security
            for key, where in mapped.security_where.items():
                self.located[f"spec.security.{key}"] = where
        if mapped.workspace is not None:
            self._compose_workspace(*mapped.workspace)
        for key, items in (("volumes", mapped.volumes), ("mounts", mapped.mounts),
                           ("sidecars", mapped.sidecars)):
            for item, where in items:
                inside = item.get("mountPath", "").startswith(self.mount_path + "/")
                if key == "volumes" and inside:  # node_modules kept apart from the project
                    self.notes.append(f"{where}: not converted (a cell's volume may not lie "
                                      f"inside its workspace, {self.mount_path}; those files "
                                      "live in the workspace)")
                    continue
                listed = self.spec.setdefault(key, [])
                self.located[f"spec.{key}[{len(listed)}]"] = where
                listed.append(item)
        self.sidecar_ports = [(p["hostIP"], p["hostPort"]) for s, _ in mapped.sidecars
                              for p in s.get("ports", [])]
        self.compose_services = mapped.services

    def _compose_workspace(self, path: str, where: Where) -> None:
        """The project folder's bind in the compose file: where the cell's workspace is."""
        problem = security.mount_path_problem(path)
        if problem:
            self.r.problems.append(where.problem(f"the project folder's mount {problem}"))
            return
        folder = self.mount_path  # workspaceFolder's, its variables filled in
        if "workspaceFolder" not in self.data and "workspaceMount" not in self.data:
            self.vars = devcontainer_vars.variables(self.root, self.r.path.resolve(), path,
                                                    self.local_env)
        elif folder != path and not folder.startswith(path.rstrip("/") + "/"):
            self.notes.append(f"workspaceFolder: the project's files are at {path} (the "
                              f"bind of the project folder, {where}), not under {folder}")
        self.mount_path = path
        self.origins.pop("spec.workspace", None)
        self.located["spec.workspace"] = where

    def _build(self, build: dict[str, Any], key: str) -> None:
        here = self.r.path.resolve().parent
        dockerfile = build.get("dockerfile")
        if not isinstance(dockerfile, str):
            self.r.refuse("expected the Dockerfile's path, relative to devcontainer.json",
                          key, "dockerfile" if key == "build" else key)
            return
        dockerfile = self._filled(dockerfile, key) or ""
        context = (here / (self._filled(str(build.get("context", ".")), key) or ".")).resolve()
        file = (here / dockerfile).resolve()
        self.dockerfile = file
        inside = os.path.relpath(file, context)  # ../Dockerfile as docker build -f allows
        relative = os.path.relpath(context, self.out_dir.resolve())
        if os.path.relpath(file, self.out_dir.resolve()).startswith("..") \
                and not relative.startswith(".."):
            self.r.refuse(f"the Dockerfile {file} lies outside the directory of the manifest "
                          f"({self.out_dir.resolve()}); write the manifest at or above the "
                          "folder holding both the Dockerfile and the build context", key)
            return
        if relative.startswith(".."):
            self.r.refuse(f"the build context {context} lies outside the directory of the "
                          f"manifest ({self.out_dir.resolve()}); write the manifest there or above it "
                          f"(-o {context}/cell.yaml)", key)
            return
        spec: dict[str, Any] = {"context": relative}
        if inside != "Dockerfile":
            spec["dockerfile"] = inside
        args = build.get("args") or {}
        if isinstance(args, dict) and args:
            spec["args"] = {}
            for arg, value in args.items():
                filled = self._filled(str(value), "build", "args", str(arg))
                if filled is not None:
                    spec["args"][str(arg)] = filled
        if isinstance(build.get("target"), str):
            spec["target"] = build["target"]
        for extra in sorted(set(build) - {"dockerfile", "context", "args", "target"}):
            self.note(f"build.{extra}", "no equivalent in DevCell's builds")
        self.spec["build"] = spec
        self.origins["spec.build"] = (key,)

    def _env(self) -> None:
        for key in ("containerEnv", "remoteEnv"):
            values = self.data.get(key)
            if values is None:
                continue
            if not isinstance(values, dict):
                self.r.refuse("expected an object of NAME: value", key)
                continue
            for var, value in values.items():
                if value is None:
                    self.note(f"{key}.{var}", "null unsets a variable; DevCell starts from the "
                              "image's environment")
                    continue
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(var)):
                    self.r.refuse(f"invalid variable name {names.printable(str(var))!r}",
                                  key, str(var), shown=f"{key}.{var}")
                    continue
                expanded = self._filled(str(value), key, str(var), shown=f"{key}.{var}")
                if expanded is None:
                    continue
                if "${containerEnv:" in expanded:
                    self.note(f"{key}.{var}", "it uses ${containerEnv:...}, the container's "
                              "own value, which a manifest's literal spec.env cannot refer "
                              "to; the image's value is kept (write the whole value in "
                              "spec.env to change it)")
                    continue
                self.env[str(var)] = expanded
                self.env_origin[str(var)] = (key, str(var))

    def _ports(self) -> None:
        taken = self.sidecar_ports  # published through the cell's namespace already
        for key in ("forwardPorts", "appPort"):
            values = self.data.get(key)
            if values is None:
                continue
            for value in values if isinstance(values, list) else [values]:
                port = self._port(value)
                host, _, number = str(value).rpartition(":")
                if port is None and host in self.compose_services and number.isdigit():
                    port = self._port(int(number))  # "db:5432": the cell and db share a network
                if port is None:
                    self.note(f"{key} {value!r}", "only ports of this container (3000, "
                              "\"localhost:3000\", \"8080:80\") can be published")
                elif all((p["hostIP"], p["hostPort"]) != (port["hostIP"], port["hostPort"])
                         for p in self.ports) \
                        and (port["hostIP"], port["hostPort"]) not in taken:
                    self.ports.append(port)

    @staticmethod
    def _port(value: Any) -> dict[str, Any] | None:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
            return {"containerPort": value, "hostPort": value, "hostIP": "127.0.0.1"}
        if not isinstance(value, str):
            return None
        host, _, port = value.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            return None
        if host in ("", "localhost", "127.0.0.1"):
            return {"containerPort": int(port), "hostPort": int(port), "hostIP": "127.0.0.1"}
        if host.isdigit() and 0 < int(host) < 65536:  # appPort "8080:80"
            return {"containerPort": int(port), "hostPort": int(host), "hostIP": "127.0.0.1"}
        return None

    def _hooks(self) -> None:
        hooks: dict[str, list[list[str]]] = {}
        for key, hook in (("onCreateCommand", "postCreate"), ("updateContentCommand",
                                                              "postCreate"),
                          ("postCreateCommand", "postCreate"), ("postStartCommand", "postStart")):
            if key not in self.data:
                continue
            commands = _command(self.data[key])
            if commands is None:
                self.r.refuse("expected a string, an array of strings, or an object of "
                              "either", key)
                continue
            commands = self._filled_command(commands, key)  # the spec's variables
            if commands is None:
                continue
            if isinstance(self.data[key], dict) and len(commands) > 1:
                self.notes.append(f"{key}: its {len(commands)} commands run one after "
                                  "another, not in parallel")
            for command in commands:  # each command blamed on the field it came from
                self.origins[f"spec.hooks.{hook}[{len(hooks.get(hook, []))}]"] = (key,)
                hooks.setdefault(hook, []).append(command)
        if hooks:
            self.spec["hooks"] = hooks

    def _mounts(self) -> None:
        values = self.data.get("mounts")
        if values is None:
            return
        if not isinstance(values, list):
            self.r.refuse("expected an array of mounts", "mounts")
            return
        mounts: list[dict[str, Any]] = []
        for i, value in enumerate(values):
            fields = _mount_fields(value)
            where = f"mounts[{i}]"
            if fields is None or not fields.get("target"):
                self.r.refuse("expected source=...,target=...,type=bind", "mounts", i,
                              shown=where)
                continue
            kind = fields.get("type", "volume")
            if kind != "bind":
                self._volume(fields, kind, i)
                continue
            source = self._filled(fields.get("source", ""), "mounts", i, shown=where)
            target = self._filled(fields["target"], "mounts", i, shown=where)
            if source is None or target is None:
                continue
            if not source or not os.path.isabs(source) or "${" in source + target:
                self.r.refuse("a bind mount needs an absolute source and target (source is "
                              f"{names.printable(source)!r} once filled in)",
                              "mounts", i, shown=where)
                continue
            problem = security.mount_path_problem(target)
            if problem:
                self.r.refuse(f"target {problem}", "mounts", i, shown=where)
                continue
            takeover = host_takeover(source)
            if takeover:  # never given, whatever the configuration says: said, not fatal
                self.notes.append(f"{where}: left out, never given to a cell: a bind mount of "
                                  f"{names.printable(source)} {takeover}; what in the cell "
                                  "needs it will not find it")
                continue
            source = os.path.normpath(source)
            refused = security.host_path_problem(source, self.policy, self.state_dir)
            if refused:
                self.notes.append(f"{where}: left out, DevCell's security rules refuse it: "
                                  f"{refused}")
                continue
            mount: dict[str, Any] = {"hostPath": source, "mountPath": target}
            if fields.get("readonly", "false") in ("true", "1", ""):
                mount["readOnly"] = True
            self.origins[f"spec.mounts[{len(mounts)}]"] = ("mounts", i)
            mounts.append(mount)
        if mounts:
            self.spec["mounts"] = mounts

    def _volume(self, fields: dict[str, str], kind: str, i: int) -> None:
        """A volume mount as a cell volume (devcontainer_volumes); tmpfs and others named."""
        where = f"mounts[{i}]"
        source = self._filled(fields.get("source", ""), "mounts", i, shown=where)
        target = self._filled(fields["target"], "mounts", i, shown=where)
        if source is None or target is None:
            return
        if kind != "volume":
            self.notes.append(f"{where}: " + (devcontainer_volumes.tmpfs_note(target)
                                              if kind == "tmpfs" else
                                              f"not converted (a {kind} mount has no "
                                              "equivalent)"))
            return
        volumes = self.spec.setdefault("volumes", [])
        made = devcontainer_volumes.volume(
            source, target, self.vars.workspace["devcontainerId"],
            {str(v["name"]) for v in volumes})
        if made.note:
            self.notes.append(f"{where}: {made.note}")
        self.origins[f"spec.volumes[{len(volumes)}]"] = ("mounts", i)
        volumes.append(made.entry)

    def _run_args(self) -> None:
        values = self.data.get("runArgs")
        if values is None:
            return
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            self.r.refuse("expected an array of strings", "runArgs")
            return
        filled = [self._filled(v, "runArgs", i, shown="runArgs") for i, v in enumerate(values)]
        values = [v if f is None else f for v, f in zip(values, filled, strict=True)]
        i = 0
        while i < len(values):
            index, token = i, values[i]
            flag, eq, value = token.partition("=")
            if token[:1] == "-" and token[1:2] != "-" and len(token) > 2 \
                    and token[:2] in _VALUED_RUN_ARGS:
                flag, value = token[:2], token[2:].removeprefix("=")  # -eNAME=value, -m1g
            elif not eq and flag in _VALUED_RUN_ARGS:
                i += 1
                value = values[i] if i < len(values) else ""
            i += 1
            self._run_arg(flag, value, index)

    def _run_arg(self, flag: str, value: str, index: int) -> None:
        shown = shlex.join([flag, value] if value else [flag])
        if devcontainer_run_args.run_arg(self, flag, value, index, shown):
            return
        if flag in _DENIED_RUN_ARGS:
            self.r.refuse(f"{shown} is refused: {_DENIED_RUN_ARGS[flag]}", "runArgs", index,
                          shown="runArgs")
        elif flag in ("-m", "--memory"):
            memory = re.fullmatch(r"(\d+)([bkmg]?)", value.lower())
            unit = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}
            if memory:
                self.spec.setdefault("resources", {})["memory"] = (
                    memory.group(1) + unit[memory.group(2)])
                self.origins["spec.resources.memory"] = ("runArgs", index)
            else:
                self.note(f"runArgs {shown}", "not a memory size DevCell reads")
        elif flag == "--cpus":
            try:
                self.spec.setdefault("resources", {})["cpus"] = float(value)
                self.origins["spec.resources.cpus"] = ("runArgs", index)
            except ValueError:
                self.note(f"runArgs {shown}", "not a number of CPUs")
        elif flag in ("-e", "--env"):
            var, _, val = value.partition("=")
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
                self.env[var] = val
                self.env_origin[var] = ("runArgs", index)
            else:
                self.note(f"runArgs {shown}", "not NAME=value")
        elif flag in ("--rm", "-it", "-i", "-t", "--interactive", "--tty"):
            self.note(f"runArgs {shown}", "DevCell's supervisor runs the cell")
        else:
            self.note(f"runArgs {shown}", "no equivalent in DevCell")


def convert(path: Path, *, name: str | None, out_dir: Path, state_dir: Path,
            env: Mapping[str, str] | None = None, target: Path | None = None) -> Conversion:
    """The Cell manifest for the devcontainer.json at `path` (relative paths in it relative to
    `out_dir`, where it will be written, as `target`, default cell.yaml; `${localEnv:...}`
    read from `env`, default this process's environment), or Refused naming file, line and
    field. The manifest is validated as apply would, once: what is not blamed on
    devcontainer.json is left in `Conversion.problems`."""
    _inside_project(path)
    reader = _Reader(path)
    policy = config.load(state_dir).security
    converter = _Converter(reader, name=name, out_dir=out_dir, policy=policy,
                           state_dir=state_dir, env=os.environ if env is None else env)
    try:
        conversion = converter.convert()
        conversion.problems = _blame_source(
            conversion, reader, {**converter.origins, **converter.located},
            target or out_dir / "cell.yaml", state_dir)
    except ManifestError as exc:
        raise Refused(exc.problems, converter.notes) from None
    return conversion


def _inside_project(path: Path) -> None:
    """Refuse a devcontainer.json that is a link leading out of its project folder: the
    project (a cell's live workspace among them) may not make the import read, and show
    parts of, a host file, nor move the project folder elsewhere."""
    given = path.absolute().parent.resolve() / path.name  # its own name not followed
    real = path.resolve()
    top = next((p.parent for p in given.parents if p.name == ".devcontainer"), given.parent)
    if real != given and real != top and top not in real.parents:
        raise ManifestError([Problem(str(path), f"a link to {real}, outside the project "
                                     f"folder {top}; DevCell reads only the project's files")])


class Refused(ManifestError):
    """The file is refused; `notes` are the warnings found on the way, shown with the
    problems so that one round fixes everything."""

    def __init__(self, problems: list[Problem], notes: list[str]) -> None:
        super().__init__(problems)
        self.notes = list(notes)


def _blame_source(conversion: Conversion, reader: _Reader,
                  origins: dict[str, tuple[str | int, ...] | Where], target: Path,
                  state_dir: Path) -> list[Problem]:
    """Check the manifest as apply would and raise ManifestError for every problem in a field
    that came from devcontainer.json (a NUL in image, a bad env value), naming devcontainer.json,
    its line and field: the cell.yaml it would be blamed on is not written yet. Without such
    a problem, those of DevCell's own making are returned (blamed on `target`)."""
    problems = _problems(render(conversion, reader.path), target, state_dir)
    blamed: list[Problem] = []
    for problem in problems:
        where = problem.field or ""
        for field_path, keys in sorted(origins.items(), key=lambda o: -len(o[0])):
            if where == field_path or where.startswith((field_path + ".", field_path + "[")):
                message = f"{problem.message} (in the manifest's {where})"
                blamed.append(keys.problem(message) if isinstance(keys, Where) else
                              Problem(reader.display, message, line=reader.line(*keys) or 1,
                                      field=_field(keys)))
                break
    if blamed:
        raise ManifestError(blamed)
    return problems


def render(conversion: Conversion, source: Path) -> str:
    """The manifest as YAML, with a comment naming where it came from."""
    import yaml

    header = (f"# Converted from {source} by `devcell import devcontainer`.\n"
              + "".join(f"# {names.printable(said)}\n" for said in conversion.said)
              + "# Apply with: devcell apply -f <this file>\n")
    return header + yaml.safe_dump(conversion.manifest, sort_keys=False, width=100)


def _problems(text: str, target: Path, state_dir: Path) -> list[Problem]:
    """The manifest validated as `apply` would (schema and security rules), so an import
    never writes what apply refuses."""
    import hashlib

    from devcell import admission
    from devcell.manifests import validate
    from devcell.manifests.model import SourceFile
    from devcell.store import desired

    data = text.encode()
    source = SourceFile(str(target), str(target.resolve()), data,
                        hashlib.sha256(data).hexdigest())
    manifests, problems = validate.parse_source(source, desired.validator_place_of(state_dir))
    if not problems:
        problems = admission.security_problems(manifests, state_dir)
    return list(problems)
