"""`import devcontainer` for a Docker Compose based devcontainer.json: the service the editor
attaches to (`service`) becomes the cell, the others it runs (`runServices`, default all)
become the cell's sidecars, sharing its network namespace as compose's common
`network_mode: service:db` pattern does.

What maps: image or build, environment, ports (published on loopback), named volumes (the
cell's spec.volumes; a sidecar's first one is its data volume, snapshotted and forked with the
cell), the bind of the project folder (the cell's workspace), other binds through the mount
rules, a sidecar's command and restart policy. What would loosen the cell's confinement
(privileged, capabilities, devices, the host's network or namespaces) or reach outside the
project (a build context, a compose file) is refused naming the compose file, line and field;
every other key is named in a note, never dropped silently.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import config, names, security
from devcell.api import devcontainer_compose_security
from devcell.api.devcontainer_compose_fields import Fields, Vol
from devcell.api.devcontainer_compose_file import Compose, as_map, read
from devcell.api.devcontainer_compose_yaml import Node, Where
from devcell.api.devcontainer_rules import host_takeover, looks_secret
from devcell.errors import ManifestError, Problem

MAX_SIDECARS = 8
"""spec.sidecars' maxItems in the Cell schema."""
_RESTART = {"no": "Never", "always": "Always", "unless-stopped": "Always",
            "on-failure": "OnFailure"}
_KEPT_RUNNING = re.compile(r"(exec )?(/bin/|/usr/bin/)?(sleep (infinity|inf|\d{5,})"
                           r"|tail -f /dev/null"
                           r"|while (true|:|sleep \d+); do (:|sleep \d+|true);? done)")
"""A command that only keeps a dev container running (the templates' `sleep infinity`)."""
_REFUSED = {
    "device_cgroup_rules": "host devices are not given to cells",
    "gpus": "host devices are not given to cells",
    "volumes_from": "another container's volumes are not shared",
    "cgroup_parent": "cells are placed in DevCell's own cgroups",
    "extends": "DevCell's import does not follow extends; write the service's fields out",
}
_HOST_NAMESPACES = ("pid", "ipc", "uts", "userns_mode", "cgroup")
_NOTED = {
    "container_name": "DevCell names the containers",
    "hostname": "the cell's host name is its own",
    "domainname": "the cell's host name is its own",
    "labels": "DevCell labels its containers itself",
    "annotations": "DevCell labels its containers itself",
    "entrypoint": "the image's entrypoint is kept",
    "working_dir": "`devcell exec` starts in the workspace",
    "user": "the cell runs as its image's user (spec.user says otherwise)",
    "stdin_open": "DevCell's supervisor runs the cell",
    "tty": "DevCell's supervisor runs the cell",
    "init": "DevCell's supervisor is the cell's init",
    "expose": "the cell and its sidecars share one network namespace; every port is reachable "
              "on 127.0.0.1 inside it",
    "links": "the cell and its sidecars reach each other on 127.0.0.1, not by name",
    "external_links": "the cell and its sidecars reach each other on 127.0.0.1, not by name",
    "networks": "the cell and its sidecars share one network namespace; they reach each other "
                "on 127.0.0.1, not by service name",
    "extra_hosts": "cells resolve no extra host names",
    "dns": "cells use the engine's resolver",
    "dns_search": "cells use the engine's resolver",
    "dns_opt": "cells use the engine's resolver",
    "mac_address": "cells use the engine's addresses",
    "deploy": "use spec.resources for limits",
    "mem_limit": "use spec.resources for limits",
    "memswap_limit": "use spec.resources for limits",
    "mem_reservation": "use spec.resources for limits",
    "cpus": "use spec.resources for limits",
    "cpu_shares": "use spec.resources for limits",
    "cpuset": "use spec.resources for limits",
    "pids_limit": "use spec.resources for limits",
    "shm_size": "no equivalent in DevCell",
    "ulimits": "no equivalent in DevCell",
    "sysctls": "no equivalent in DevCell",
    "tmpfs": "no equivalent in DevCell; files live in the workspace or a volume",
    "logging": "DevCell keeps the services' logs itself",
    "platform": "images run for the engine's platform",
    "pull_policy": "images are pulled when the engine lacks them",
    "profiles": "runServices says which services run (a service with profiles runs only when "
                "runServices names it, or one that runs needs it)",
    "secrets": "declare secret values as spec.env entries with secret: true",
    "configs": "no equivalent in DevCell",
    "stop_signal": "DevCell stops its containers itself",
    "stop_grace_period": "DevCell stops its containers itself",
    "oom_score_adj": "no equivalent in DevCell",
    "oom_kill_disable": "no equivalent in DevCell",
    "read_only": "no equivalent in DevCell",
    "group_add": "no equivalent in DevCell",
    "isolation": "no equivalent in DevCell",
    "runtime": "DevCell chooses the runtime",
    "scale": "a sidecar runs once",
    "storage_opt": "no equivalent in DevCell",
    "develop": "no equivalent in DevCell",
    "attach": "no equivalent in DevCell",
}


@dataclass
class Mapped:
    """The cell's parts a compose configuration gives; the converter puts them in the spec."""

    image: str | None = None
    build: dict[str, Any] | None = None
    where: Where | None = None
    """Of the cell's image or build."""
    env: list[tuple[str, str, Where]] = field(default_factory=list)
    ports: list[tuple[dict[str, Any], Where]] = field(default_factory=list)
    volumes: list[tuple[dict[str, Any], Where]] = field(default_factory=list)
    mounts: list[tuple[dict[str, Any], Where]] = field(default_factory=list)
    command: tuple[list[str], Where] | None = None
    """The service's own command, run as the cell's service `main` (compose's
    overrideCommand default is false: the command runs)."""
    security: dict[str, Any] = field(default_factory=dict)
    """The cell's spec.security (its privileges, each allowed by the configuration or not)."""
    security_where: dict[str, Where] = field(default_factory=dict)
    workspace: tuple[str, Where] | None = None
    """Where the project folder is inside the cell (the bind of it), when one binds it."""
    sidecars: list[tuple[dict[str, Any], Where]] = field(default_factory=list)
    services: set[str] = field(default_factory=set)
    """The compose services that run (the cell's and its sidecars', as compose names them)."""
    notes: list[str] = field(default_factory=list)
    said: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    """In the compose files (devcontainer.json's own go to its reader's refuse)."""


def convert(reader: Any, root: Path, *, out_dir: Path, policy: config.SecurityPolicy,
            state_dir: Path, environ: Mapping[str, str] | None = None) -> Mapped:
    """The cell and sidecars of the compose configuration `reader`'s devcontainer.json names.
    Problems in devcontainer.json's fields go to reader.refuse; those of the compose files
    to the result's problems, naming file, line and field."""
    mapper = _Mapper(reader, root, out_dir, policy, state_dir,
                     os.environ if environ is None else environ)
    try:
        mapper.run()
    except ManifestError as exc:  # a compose file that cannot be read at all
        mapper.out.problems += exc.problems
    if mapper.c is not None:
        mapper.out.problems += mapper.c.problems
    return mapper.out


class _Mapper:
    def __init__(self, reader: Any, root: Path, out_dir: Path,
                 policy: config.SecurityPolicy, state_dir: Path,
                 environ: Mapping[str, str]) -> None:
        self.r = reader
        self.root = root
        self.out_dir = out_dir
        self.policy = policy
        self.state_dir = state_dir
        self.environ = environ
        self.out = Mapped()
        self.c: Compose | None = None

    # -- reporting ----------------------------------------------------------------------------

    def refuse(self, where: Where, message: str) -> None:
        assert self.c is not None
        self.c.problems.append(where.problem(message))

    def note(self, where: Where, why: str) -> None:
        self.out.notes.append(f"{where}: not converted ({why})")

    def text(self, node: Node | None, default: str | None = None) -> str | None:
        assert self.c is not None
        if node is None:
            return default
        return self.c.text(node)

    # -- the whole configuration -------------------------------------------------------------

    def run(self) -> None:
        files = self._files()
        service = self.r.data.get("service")
        if not isinstance(service, str) or not service:
            self.r.refuse("a Docker Compose configuration needs the name of the service the "
                          "editor attaches to (a string)", "service")
        if files is None or not isinstance(service, str) or not service:
            return
        self.c = c = read(files, self.root, self.environ)
        self.f = Fields(c, self.out.notes)
        services = c.top.get("services")
        first = files[0][1]
        if services is None or not isinstance(services.value, dict) or not services.value:
            c.problems.append(Problem(first, "expected services: a mapping of service names "
                                      "(the compose files define none)",
                                      line=services.where.line if services else 1,
                                      field="services"))
            return
        for key, node in c.top.items():
            if key in ("services", "volumes", "version") or key.startswith("x-"):
                continue
            self.note(node.where, {"networks": _NOTED["networks"], "name": "the cell has its "
                                   "own name"}.get(key, "no equivalent in DevCell"))
        main = services.value.get(service)
        if main is None:
            self.r.refuse(f"service {names.printable(service)} is not in the compose files "
                          f"(they define {', '.join(map(names.printable, services.value))})",
                          "service")
            return
        run = self._run_services(services.value, service)
        if not isinstance(main.value, dict):
            self.refuse(main.where, "expected a mapping (image: ..., build: ...)")
        else:
            self._cell(service, main)
        by_name = {n: s for n, s in services.value.items() if n in run and n != service}
        self.out.services = {service, *by_name}
        if len(by_name) > MAX_SIDECARS:
            why = (f"{len(by_name)} services would be the cell's sidecars; a cell has at most "
                   f"{MAX_SIDECARS}: name the ones to run in runServices")
            if "runServices" in self.r.data:
                self.r.refuse(why, "runServices")
            else:
                self.refuse(services.where, why)
            return
        for name in _ordered(by_name):
            self._sidecar(name, by_name[name])
        for name, node in services.value.items():
            if name != service and name not in run:
                why = ("it has profiles, which compose starts only when asked; name it in "
                       "runServices" if "runServices" not in self.r.data
                       else "not in runServices, so not run")
                self.out.notes.append(f"{node.where}: not converted ({why})")
        self._named_hosts(list(by_name))
        sidecars = ", ".join(names.printable(s["name"]) for s, _ in self.out.sidecars)
        runs = (f" (its command, {self.out.command[1]}, runs as the cell's service main)"
                if self.out.command else "")
        self.out.said.append(f"compose: service {names.printable(service)} is the cell{runs}"
                             + (f"; sidecars: {sidecars}" if sidecars else "; no sidecars"))

    def _files(self) -> list[tuple[Path, str]] | None:
        value = self.r.data.get("dockerComposeFile")
        listed = [value] if isinstance(value, str) else value
        if not isinstance(listed, list) or not listed \
                or not all(isinstance(v, str) and v for v in listed):
            self.r.refuse("expected the compose file's path, or an array of paths, relative "
                          "to devcontainer.json", "dockerComposeFile")
            return None
        here = self.r.path.parent
        return [(Path(os.path.normpath(here / v)), os.path.normpath(here / v)) for v in listed]

    def _run_services(self, services: dict[str, Node], service: str) -> set[str]:
        value = self.r.data.get("runServices")
        if value is None:  # as `docker compose up`: a service with profiles only when asked
            return _needs(services, {service} | {name for name, node in services.items()
                                                 if node.get("profiles") is None})
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.r.refuse("expected an array of service names", "runServices")
            return {service}
        for i, name in enumerate(value):
            if name not in services:
                self.r.refuse(f"service {names.printable(name)} is not in the compose files",
                              "runServices", i, shown=f"runServices[{i}]")
        run = {*value, service} & set(services)
        needed = _needs(services, run)
        for name in sorted(needed - run):
            self.out.notes.append(f"{services[name].where}: runs as a sidecar though not in "
                                  "runServices: a service that runs depends on it (depends_on "
                                  "or network_mode: service:), so compose starts it too")
        return needed

    # -- the cell ------------------------------------------------------------------------------

    def _cell(self, name: str, node: Node) -> None:
        fields = node.value
        handled = {"image", "build", "environment", "env_file", "ports", "volumes",
                   "command", "network_mode", "depends_on", "healthcheck", "restart",
                   *devcontainer_compose_security.KEYS}
        self.out.security, self.out.security_where = devcontainer_compose_security.read(
            fields, self.f)
        image, build = self._image(name, node)
        self.out.image, self.out.build, self.out.where = image, build, node.where
        for var, (value, where) in self.f.environment(node).items():
            self.out.env.append((var, value, where))
        self.out.ports = self.f.ports(fields.get("ports"))
        self._network_mode(fields.get("network_mode"))
        self._cell_volumes(fields.get("volumes"))
        command = fields.get("command")
        argv = self.f.argv(command) if command is not None else None
        if command is not None and argv:
            if _KEPT_RUNNING.fullmatch(shlex.join(argv)) or _KEPT_RUNNING.fullmatch(
                    " ".join(argv[2:]) if argv[:2] in (["sh", "-c"], ["/bin/sh", "-c"])
                    else ""):
                self.note(command.where, "it only keeps the container running; DevCell's "
                          "supervisor does")
            elif self.r.data.get("overrideCommand") is True:
                self.note(command.where, "overrideCommand: true replaces it")
            else:
                self.out.command = (argv, command.where)
        if self.r.data.get("overrideCommand") is True:
            self.out.notes.append("overrideCommand: true: the service's own command is not "
                                  "run, as in a dev container; DevCell's supervisor keeps the "
                                  "cell up")
        for key in ("healthcheck", "restart", "depends_on"):
            if key in fields:
                self.note(fields[key].where, {
                    "healthcheck": "spec.services[].ready checks a service's readiness",
                    "restart": "the cell runs while its spec.state says Running",
                    "depends_on": "the sidecars start after the cell's own container"}[key])
        self._rest(fields, handled)

    def _network_mode(self, node: Node | None) -> None:
        mode = self.text(node)
        if node is None or mode is None or mode in ("bridge", "default", "none", ""):
            return
        if mode.startswith("service:"):  # every container of the cell shares one already
            assert self.c is not None
            other = mode.removeprefix("service:")
            if other not in (self.c.top["services"].value or {}):
                self.refuse(node.where, f"network_mode: {names.printable(mode)} names no "
                            "service of the compose files")
            return
        if mode == "host":
            self.refuse(node.where, "network_mode: host is refused: the host's network is "
                        "not shared unless an administrator allows it "
                        "(security.allowHostNetwork); then write spec.network.mode: host")
        else:
            self.refuse(node.where, f"network_mode: {names.printable(mode)} is refused: the "
                        "cell and its sidecars share their own network namespace; only "
                        "service:NAME, bridge and none map")

    def _cell_volumes(self, node: Node | None) -> None:
        for vol in self.f.volumes(node):
            if vol.kind in ("volume", "anonymous"):
                problem = security.mount_path_problem(vol.target)
                if problem:
                    self.refuse(vol.where, f"target {problem}")
                    continue
                named = _dns_name(vol.source or vol.target)
                taken = {v["name"] for v, _ in self.out.volumes}
                while named in taken:
                    named = _dns_name(f"{named}-{len(taken)}")
                self.out.volumes.append(({"name": named, "mountPath": vol.target}, vol.where))
                if vol.kind == "anonymous":
                    self.out.notes.append(f"{vol.where}: the anonymous volume at "
                                          f"{names.printable(vol.target)} is the cell's volume "
                                          f"{named} (kept until the cell is deleted)")
            elif vol.kind == "bind":
                self._bind(vol)
            else:
                self.note(vol.where, f"a {names.printable(vol.kind)} mount has no "
                          "equivalent; files live in the workspace or a volume")

    def _bind(self, vol: Vol) -> None:
        source = os.path.normpath(vol.source)
        real_root = os.path.realpath(self.root)
        real_source = os.path.realpath(source)
        inside = os.path.relpath(real_root, real_source)
        if self.out.workspace is None and not (inside == ".." or inside.startswith("../")):
            at = os.path.normpath(os.path.join(vol.target, inside))
            self.out.workspace = (at, vol.where)
            if inside != ".":
                self.out.notes.append(f"{vol.where}: the project folder is the cell's "
                                      f"workspace at {names.printable(at)}; the rest of "
                                      f"{names.printable(source)} is not carried")
            return
        takeover = host_takeover(source)
        if takeover:  # never given, whatever the configuration says: said, not fatal
            self.out.notes.append(f"{vol.where}: left out, never given to a cell: a bind "
                                  f"mount of {names.printable(source)} {takeover}; what in "
                                  "the cell needs it will not find it")
            return
        problem = security.mount_path_problem(vol.target)
        if problem:
            self.refuse(vol.where, f"target {problem}")
            return
        refused = security.host_path_problem(source, self.policy, self.state_dir)
        if refused:
            self.out.notes.append(f"{vol.where}: left out, DevCell's security rules refuse "
                                  f"it: {refused}")
            return
        mount: dict[str, Any] = {"hostPath": source, "mountPath": vol.target}
        if vol.read_only:
            mount["readOnly"] = True
        self.out.mounts.append((mount, vol.where))

    # -- a sidecar -----------------------------------------------------------------------------

    def _sidecar(self, service: str, node: Node) -> None:
        if not isinstance(node.value, dict):
            self.refuse(node.where, "expected a mapping (image: ..., build: ...)")
            return
        fields = node.value
        handled = {"image", "build", "environment", "env_file", "ports", "volumes",
                   "command", "network_mode", "depends_on", "healthcheck", "restart"}
        for key in devcontainer_compose_security.KEYS:
            if key in fields and fields[key].value not in (None, False, []):
                handled.add(key)
                self.refuse(fields[key].where, f"{key} is refused: a sidecar runs with "
                            "DevCell's default confinement (only the cell's own container "
                            "takes spec.security)")
        sidecar: dict[str, Any] = {"name": _dns_name(service)}
        image, build = self._image(service, node)
        if image is not None:
            sidecar["image"] = image
        if build is not None:
            sidecar["build"] = build
        env = self.f.environment(node)
        if env:
            sidecar["env"] = [{"name": var, "value": value} for var, (value, _) in env.items()]
        for var, (_, where) in env.items():
            if looks_secret(var):
                self.out.notes.append(f"{where}: written in the manifest as it is (a sidecar's "
                                      "environment holds no secret entries); keep the "
                                      "manifest's file private, or the value in a file of "
                                      "the sidecar's volume")
        command = fields.get("command")
        if command is not None:
            argv = self.f.argv(command)
            if argv:
                sidecar["command"] = argv
        restart = fields.get("restart")
        if restart is not None:
            policy = self.text(restart) or ""
            mapped = _RESTART.get(policy.partition(":")[0])
            if mapped is None:
                self.refuse(restart.where, "expected no, always, unless-stopped or "
                            "on-failure[:N]")
            else:
                sidecar["restart"] = mapped
        ports = self.f.ports(fields.get("ports"))
        if ports:
            sidecar["ports"] = [p for p, _ in ports]
        self._network_mode(fields.get("network_mode"))
        self._sidecar_volumes(sidecar, fields.get("volumes"))
        if "healthcheck" in fields:
            self.note(fields["healthcheck"].where, "a sidecar has no readiness check; the "
                      "cell may be Ready before it answers")
        if "depends_on" in fields:
            self.note(fields["depends_on"].where, "only the order is kept: sidecars start "
                      "in the order their dependencies give, without waiting for a condition")
        self._rest(fields, handled)
        if any(s["name"] == sidecar["name"] for s, _ in self.out.sidecars):
            self.refuse(node.where, f"two services are both named {sidecar['name']} as "
                        "DevCell names sidecars (lower case, - for _)")
            return
        self.out.sidecars.append((sidecar, node.where))

    def _sidecar_volumes(self, sidecar: dict[str, Any], node: Node | None) -> None:
        for vol in self.f.volumes(node):
            if vol.kind in ("volume", "anonymous") and "volume" not in sidecar:
                problem = security.mount_path_problem(vol.target)
                if problem:
                    self.refuse(vol.where, f"target {problem}")
                    continue
                sidecar["volume"] = {"mountPath": vol.target}
            elif vol.kind in ("volume", "anonymous"):
                self.note(vol.where, "a sidecar has one data volume (its first: "
                          f"{names.printable(sidecar['volume']['mountPath'])})")
            else:
                self.note(vol.where, f"a sidecar takes no {names.printable(vol.kind)} mounts; "
                          "only its data volume")

    # -- fields of either ----------------------------------------------------------------------

    def _image(self, service: str, node: Node) -> tuple[str | None, dict[str, Any] | None]:
        fields = node.value
        image, build = fields.get("image"), fields.get("build")
        if build is not None:
            if image is not None:
                self.out.notes.append(f"{image.where}: not converted (build is used; DevCell "
                                      "tags the built image itself)")
            return None, self._build(build)
        if image is not None:
            return self.text(image), None
        self.refuse(node.where, f"service {names.printable(service)} has neither image nor "
                    "build")
        return None, None

    def _build(self, node: Node) -> dict[str, Any] | None:
        assert self.c is not None
        fields = {"context": node} if not isinstance(node.value, dict) else node.value
        context = self.text(fields.get("context"), ".")
        dockerfile = self.text(fields.get("dockerfile"), "Dockerfile")
        if context is None or dockerfile is None:
            return None
        where = fields["context"].where if "context" in fields else node.where
        if "://" in context or context.startswith(("git@", "github.com/")):
            self.refuse(where, f"the build context {names.printable(context)} is remote; "
                        "DevCell builds from a folder of the project")
            return None
        base = self.c.project_dir.resolve()
        ctx = (base / os.path.expanduser(context)).resolve()
        root = self.root.resolve()
        if ctx != root and root not in ctx.parents:
            self.refuse(where, f"the build context {names.printable(str(ctx))} lies outside "
                        f"the project folder {names.printable(str(root))}; DevCell builds "
                        "only from inside the project")
            return None
        file = (ctx / dockerfile).resolve()
        inside = os.path.relpath(file, ctx)  # ../Dockerfile, as compose and docker allow
        file_where = fields["dockerfile"].where if "dockerfile" in fields else where
        if file != root and root not in file.parents:
            self.refuse(file_where, f"the Dockerfile {names.printable(str(file))} lies "
                        f"outside the project folder {names.printable(str(root))}")
            return None
        relative = os.path.relpath(ctx, self.out_dir.resolve())
        if relative == ".." or relative.startswith("../") or os.path.relpath(
                file, self.out_dir.resolve()).startswith("../"):
            self.refuse(where, f"the build context {ctx} or its Dockerfile lies outside the "
                        f"directory of the manifest ({self.out_dir.resolve()}); write the "
                        f"manifest at or above the project folder (-o {root}/cell.yaml)")
            return None
        spec: dict[str, Any] = {"context": relative}
        if inside != "Dockerfile":
            spec["dockerfile"] = inside
        if "args" in fields:
            args: dict[str, str] = {}
            for arg, value in as_map(fields["args"]).items():
                if value.value is None:
                    if arg in self.c.environ:
                        args[arg] = self.c.environ[arg]
                    continue  # unset: the Dockerfile's ARG default applies, as in compose
                filled = self.text(value)
                if filled is not None:
                    args[arg] = filled
            if args:
                spec["args"] = args
        if "target" in fields:
            target = self.text(fields["target"])
            if target:
                spec["target"] = target
        for extra, value in fields.items():
            if extra not in ("context", "dockerfile", "args", "target"):
                self.note(value.where, "no equivalent in DevCell's builds")
        return spec

    def _rest(self, fields: dict[str, Node], handled: set[str]) -> None:
        for key, node in fields.items():
            if key in handled:
                continue
            if key in _REFUSED:
                self.refuse(node.where, f"{key} is refused: {_REFUSED[key]}")
            elif key in _HOST_NAMESPACES:
                value = self.text(node) or ""
                if value == "host" or value.startswith(("container:", "service:")):
                    self.refuse(node.where, f"{key}: {names.printable(value)} is refused: "
                                "the cell's namespaces are its own")
                else:
                    self.note(node.where, "no equivalent in DevCell")
            else:
                self.note(node.where, _NOTED.get(key, "no equivalent in DevCell"))

    def _named_hosts(self, sidecars: list[str]) -> None:
        """Warn where an environment value names a sidecar as a host (db:5432, @db/):
        in a cell the name does not resolve; the sidecar is on 127.0.0.1."""
        if not sidecars:
            return
        envs = [(v, w) for _, v, w in self.out.env]
        for sidecar, _ in self.out.sidecars:
            envs += [(e["value"], Where("", 0, "")) for e in sidecar.get("env", [])]
        for name in sidecars:
            pattern = re.compile(rf"(?:^|[/@=\s]){re.escape(name)}(?=$|[:/\s])")
            for value, where in envs:
                if where.file and pattern.search(value):
                    self.out.notes.append(f"{where}: names the service {names.printable(name)} "
                                          "as a host; in a cell it is reached at 127.0.0.1 "
                                          "(the cell and its sidecars share one network)")


def _dns_name(raw: str) -> str:
    """A DevCell name (lower case letters, digits, -) made of a compose name."""
    name = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[:63].strip("-")
    return name or "data"


def _needs(services: dict[str, Node], run: set[str]) -> set[str]:
    """`run` and every service they need, as `docker compose up SERVICE...` starts them: a
    service's depends_on and the service whose network it joins (network_mode: service:X)."""
    out = set(run)
    todo = list(run)
    while todo:
        node = services[todo.pop()]
        wanted = list(_dependencies(node))
        mode = node.get("network_mode")
        if mode is not None and isinstance(mode.value, str) and \
                mode.value.startswith("service:"):
            wanted.append(mode.value.removeprefix("service:"))
        for name in wanted:
            if name in services and name not in out:
                out.add(name)
                todo.append(name)
    return out


def _dependencies(node: Node) -> list[str]:
    dep = node.get("depends_on")
    if dep is not None and isinstance(dep.value, list):
        return [str(n.value) for n in dep.value]
    if dep is not None and isinstance(dep.value, dict):
        return list(dep.value)
    return []


def _ordered(services: dict[str, Node]) -> list[str]:
    """The services in their file's order, each after those it depends_on (a cycle is kept
    in file order)."""
    deps = {name: [d for d in _dependencies(node) if d in services]
            for name, node in services.items()}
    out: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        stack = [(name, iter(deps[name]))]
        visiting.add(name)
        while stack:
            current, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                if current not in out:
                    out.append(current)
                continue
            if child not in out and child not in visiting:
                visiting.add(child)
                stack.append((child, iter(deps[child])))

    for name in services:
        if name not in out:
            visit(name)
    return out
