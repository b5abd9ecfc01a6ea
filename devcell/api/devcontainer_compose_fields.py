"""The fields of a compose service that take several forms, read into one: `environment`
and `env_file`, `command`, `ports` and `volumes` (short and long syntax). Each value's
variables are filled in (devcontainer_compose_file.Compose.text); what cannot be read is a
problem naming the compose file, line and field, what DevCell leaves out a note.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell import names
from devcell.api.devcontainer_compose_file import Compose, as_map, parse_env_file
from devcell.api.devcontainer_compose_yaml import Node, Where
from devcell.errors import ManifestError

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_ALL_ADDRESSES = ("", "0.0.0.0", "::", "[::]")
_MAX_RANGE = 16


@dataclass
class Vol:
    """A volume entry of a service, in either of compose's forms."""

    kind: str  # bind, volume, anonymous, tmpfs, npipe, ...
    source: str
    target: str
    read_only: bool
    where: Where


class Fields:
    """The readers, sharing the configuration (its variables, its problems) and the notes."""

    def __init__(self, compose: Compose, notes: list[str]) -> None:
        self.c = compose
        self.notes = notes

    def refuse(self, where: Where, message: str) -> None:
        self.c.problems.append(where.problem(message))

    def note(self, where: Where, why: str) -> None:
        self.notes.append(f"{where}: not converted ({why})")

    def text(self, node: Node | None, default: str | None = None) -> str | None:
        return default if node is None else self.c.text(node)

    def environment(self, node: Node) -> dict[str, tuple[str, Where]]:
        out: dict[str, tuple[str, Where]] = {}
        env_file = node.value.get("env_file")
        if env_file is not None:
            out.update(self.env_files(env_file))
        given = node.value.get("environment")
        if given is None:
            return out
        if not isinstance(given.value, (dict, list)):
            self.refuse(given.where, "expected a mapping of NAME: value or a list of "
                        "NAME=value")
            return out
        for var, value in as_map(given).items():
            if not _VAR_NAME.fullmatch(var):
                self.refuse(value.where, f"invalid variable name {names.printable(var)!r}")
                continue
            if value.value is None:
                if var in self.c.environ:
                    out[var] = (self.c.environ[var], value.where)
                else:
                    self.note(value.where, f"{var} takes its value from the environment "
                              "compose runs in, where it is not set")
                continue
            filled = self.text(value)
            if filled is not None:
                out[var] = (filled, value.where)
        return out

    def env_files(self, node: Node) -> dict[str, tuple[str, Where]]:
        out: dict[str, tuple[str, Where]] = {}
        listed = node.value if isinstance(node.value, list) else [node]
        for item in listed:
            required = True
            path_node: Node | None = item
            if isinstance(item.value, dict):
                path_node = item.value.get("path")
                req = item.value.get("required")
                required = req is None or req.value is not False
            path = self.text(path_node) if path_node is not None else None
            if path is None:
                if path_node is None:
                    self.refuse(item.where, "expected a path")
                continue
            full = Path(os.path.normpath(self.c.project_dir / path))
            try:
                data = self.c.read(full, str(full))
            except ManifestError as exc:
                for p in exc.problems:
                    self.refuse(item.where, f"{p.file}: {p.message}")
                continue
            if data is None:
                if required:
                    self.refuse(item.where, f"the env file {names.printable(str(full))} does "
                                "not exist")
                continue
            try:
                values = parse_env_file(data, str(full))
            except ManifestError as exc:
                self.c.problems.extend(exc.problems)
                continue
            out.update({k: (v, item.where) for k, v in values.items()})
        return out

    def argv(self, node: Node) -> list[str] | None:
        """A command as compose reads it: a list as is, a string split as a shell would
        (without running one)."""
        if isinstance(node.value, list):
            argv = [self.text(n) for n in node.value]
            return None if any(a is None for a in argv) else [str(a) for a in argv]
        text = self.text(node)
        if text is None:
            return None
        try:
            return shlex.split(text)
        except ValueError as exc:
            self.refuse(node.where, f"cannot split the command: {exc}")
            return None

    def ports(self, node: Node | None) -> list[tuple[dict[str, Any], Where]]:
        if node is None:
            return []
        if not isinstance(node.value, list):
            self.refuse(node.where, "expected a list of ports")
            return []
        out: list[tuple[dict[str, Any], Where]] = []
        for item in node.value:
            for port in self.port(item):
                if all((p["hostIP"], p["hostPort"]) != (port["hostIP"], port["hostPort"])
                       for p, _ in out):
                    out.append((port, item.where))
        return out

    def port(self, node: Node) -> list[dict[str, Any]]:
        if isinstance(node.value, dict):
            target = self.text(node.value.get("target"))
            published = self.text(node.value.get("published"), "")
            address = self.text(node.value.get("host_ip"), "")
            protocol = self.text(node.value.get("protocol"), "tcp") or "tcp"
            if target is None or published is None or address is None:
                if node.value.get("target") is None:
                    self.refuse(node.where, "expected target: the container's port")
                return []
            spec = f"{published}:{target}" if published else target
        else:
            text = self.text(node)
            if text is None:
                return []
            spec, _, protocol = text.partition("/")
            protocol = protocol or "tcp"
            address = ""
            if spec.startswith("["):  # [::1]:8080:80
                address, _, spec = spec[1:].partition("]:")
            elif spec.count(":") >= 2:  # 127.0.0.1:8080:80
                address, _, spec = spec.partition(":")
        if protocol != "tcp":
            self.note(node.where, f"{names.printable(protocol)} ports are not published; "
                      "DevCell publishes TCP")
            return []
        host, _, container = spec.rpartition(":")
        pairs = port_pairs(host, container)
        if pairs is None:
            self.refuse(node.where, f"expected [HOST:]CONTAINER ports (numbers or ranges up "
                        f"to {_MAX_RANGE} ports), not {names.printable(spec)}")
            return []
        if address not in _LOOPBACK:
            why = ("compose publishes on every address" if address in _ALL_ADDRESSES
                   else f"DevCell does not publish on {names.printable(address)}")
            self.notes.append(f"{node.where}: published on 127.0.0.1 only ({why})")
        if not host:
            self.notes.append(f"{node.where}: published on the same port on the host "
                                  "(compose picks a free one)")
        return [{"containerPort": c, "hostPort": h, "hostIP": "127.0.0.1"} for h, c in pairs]

    def volumes(self, node: Node | None) -> list[Vol]:
        if node is None:
            return []
        if not isinstance(node.value, list):
            self.refuse(node.where, "expected a list of volumes")
            return []
        out: list[Vol] = []
        for item in node.value:
            vol = self.volume(item)
            if vol is not None:
                out.append(vol)
        return out

    def volume(self, item: Node) -> Vol | None:
        if isinstance(item.value, dict):
            kind = self.text(item.value.get("type"), "volume")
            source = self.text(item.value.get("source"), "")
            target = self.text(item.value.get("target"))
            read_only = item.value.get("read_only")
            if kind is None or source is None or target is None:
                if item.value.get("target") is None:
                    self.refuse(item.where, "expected target: the path in the container")
                return None
            for extra, value in item.value.items():
                if extra not in ("type", "source", "target", "read_only", "bind", "volume",
                                 "consistency"):
                    self.note(value.where, "no equivalent in DevCell's mounts")
            ro = read_only is not None and read_only.value is True
            if kind == "volume" and not source:
                kind = "anonymous"
        else:
            text = self.text(item)
            if text is None:
                return None
            parts = text.split(":")
            if len(parts) == 1:
                kind, source, target, ro = "anonymous", "", parts[0], False
            elif len(parts) in (2, 3):
                source, target = parts[0], parts[1]
                modes = parts[2].split(",") if len(parts) == 3 else []
                ro = "ro" in modes
                kind = "bind" if source.startswith((".", "/", "~")) else "volume"
            else:
                self.refuse(item.where, "expected [SOURCE:]TARGET[:MODE]")
                return None
        if kind == "bind":
            source = os.path.expanduser(source)
            source = os.path.normpath(self.c.project_dir / source)
        if not target.startswith("/"):
            self.refuse(item.where, f"the target {names.printable(target)} is not an absolute "
                        "path")
            return None
        if kind == "volume":
            declared = self.c.top.get("volumes")
            spec = declared.get(source) if declared is not None else None
            if spec is not None and isinstance(spec.value, dict):
                for key, value in spec.value.items():
                    self.note(value.where, "a cell's volume is its own (made with the cell, "
                              "removed with it)" if key in ("external", "name")
                              else "no equivalent in DevCell's volumes")
        return Vol(kind, source, os.path.normpath(target), ro, item.where)


def port_pairs(host: str, container: str) -> list[tuple[int, int]] | None:
    """(host, container) port pairs of `8080:80`, `80`, `3000-3002:3000-3002`."""
    def span(text: str) -> list[int] | None:
        low, sep, high = text.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            return None
        first, last = int(low), int(high) if sep else int(low)
        if not 0 < first <= last < 65536 or last - first >= _MAX_RANGE:
            return None
        return list(range(first, last + 1))

    inside = span(container)
    outside = span(host) if host else inside
    if inside is None or outside is None or len(inside) != len(outside):
        return None
    return list(zip(outside, inside, strict=True))
