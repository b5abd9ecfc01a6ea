"""Reading the Docker Compose files a devcontainer.json names: bounded, regular files inside
the project only, YAML with the line of every value, `${VAR}` filled in as compose does, and
several files merged in order as `docker compose -f a.yml -f b.yml` merges them.

The project folder may be a cell's live workspace (hostPath), so what it holds is read as a
cell's files are: never through a link leading out of it, never a FIFO or device, at most
MAX_BYTES. YAML is read by devcontainer_compose_yaml (anchors and merge keys as compose allows them,
bounded).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devcell import safeio
from devcell.api import devcontainer_compose_vars, devcontainer_compose_yaml
from devcell.api.devcontainer_compose_yaml import Node
from devcell.errors import ManifestError, Problem

MAX_BYTES = 1 << 20
MAX_FILES = 16
MAX_TOTAL = 16 << 20
"""Bytes of every compose and env file of one configuration together."""
MAX_READ = 16 << 20
"""Characters of every value the import reads from them, variables filled in."""
_LIST_OR_MAP = {"environment", "labels", "args", "extra_hosts", "sysctls", "annotations"}
"""Fields compose accepts as a list of NAME=value or a mapping; merged by name."""
_BY_TARGET = {"volumes", "devices"}
_REPLACED = {"command", "entrypoint", "test", "healthcheck.test"}


@dataclass
class Compose:
    """The merged compose configuration and the environment its `${VAR}`s are filled from."""

    files: list[Path]
    project_dir: Path
    """Where relative paths in every file point from: the first file's folder, as compose."""
    top: dict[str, Node]
    environ: Mapping[str, str]
    root: Path
    problems: list[Problem] = field(default_factory=list)
    budget: int = 0
    produced: int = 0
    _filled: dict[int, str | None] = field(default_factory=dict)

    def text(self, node: Node) -> str | None:
        """`node` as a string with its variables filled in; None (and a problem naming the
        file, line and variable) when one is unset without a default, or when it is no
        scalar, or when the values read add up to more than MAX_READ (an alias repeats a
        value for free: what it would write must stay bounded)."""
        if id(node) not in self._filled:
            filled = self._interpolate(node) if self.produced <= MAX_READ else None
            if filled is not None:
                self.produced += len(filled)
                if self.produced > MAX_READ:  # said once; every later value refused too
                    self.problems.append(node.where.problem(
                        f"the values read add up to more than {MAX_READ >> 20} MiB"))
                    filled = None
            self._filled[id(node)] = filled
        return self._filled[id(node)]

    def _interpolate(self, node: Node) -> str | None:
        raw = node.value
        if isinstance(raw, (dict, list)):
            self.problems.append(node.where.problem("expected a string"))
            return None
        if raw is None:
            return ""
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if not isinstance(raw, str):
            return str(raw)
        out, missing = devcontainer_compose_vars.fill(raw, self.environ)
        for why in missing:
            self.problems.append(node.where.problem(why))
        return None if missing else out

    def read(self, path: Path, shown: str) -> bytes | None:
        """A file of the project (an env_file), counted against the configuration's budget."""
        data = read_inside(path, self.root, shown)
        if data is not None:
            self.budget -= len(data)
            if self.budget < 0:
                raise ManifestError([Problem(shown, f"the compose files and the files they "
                                             f"name hold more than {MAX_TOTAL >> 20} MiB")])
        return data


def read(paths: list[tuple[Path, str]], root: Path, environ: Mapping[str, str]) -> Compose:
    """The compose files (path, as shown) merged in order, or ManifestError naming the file
    (and line) that cannot be read. `root` is the project folder none may lie outside."""
    problems: list[Problem] = []
    docs: list[tuple[dict[str, Node], str]] = []
    if len(paths) > MAX_FILES:
        raise ManifestError([Problem(paths[MAX_FILES][1], f"more than {MAX_FILES} compose "
                                     "files")])
    sizes: list[tuple[str, int]] = []
    for path, shown in paths:
        data = read_inside(path, root, shown)
        sizes.append((shown, len(data or b"")))
        if data is None:
            problems.append(Problem(shown, "no such file (devcontainer.json's "
                                    "dockerComposeFile names it)"))
            continue
        docs.append((_parse(data, shown, problems), shown))
    if problems:
        raise ManifestError(problems)
    project_dir = paths[0][0].parent
    env = dict(_dotenv(project_dir, root))
    env.update(environ)  # the shell's environment wins over .env, as in compose
    top: dict[str, Node] = {}
    for doc, _ in docs:
        for key, node in doc.items():
            if key in top and isinstance(top[key].value, dict) \
                    and isinstance(node.value, dict):
                if key == "services":
                    _merge_services(top[key], node)
                else:
                    _merge_map(top[key], node, key)
            else:
                top[key] = node
    return Compose([p for p, _ in paths], project_dir, top, env, root,
                   budget=MAX_TOTAL - sum(size for _, size in sizes))


def read_inside(path: Path, root: Path, shown: str) -> bytes | None:
    """At most MAX_BYTES of the regular file `path` (None when there is none), refused when it
    or a link on its way leads out of `root`, or it is no regular file, or is larger."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    inside = os.path.relpath(real, real_root)
    if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
        raise ManifestError([Problem(shown, f"it lies outside the project folder {real_root} "
                                     f"(at {real}); DevCell reads only the project's files")])
    try:
        fd = _open_below(real_root, inside.split("/"))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in safeio.MACHINE_ERRNOS:
            raise
        why = ("a link was put on its way while it was read" if exc.errno == errno.ELOOP
               else exc.strerror or str(exc))
        raise ManifestError([Problem(shown, f"cannot read it: {why}")]) from None
    except safeio.UnsafeFile as exc:
        raise ManifestError([Problem(shown, f"cannot read it: {exc}")]) from None
    try:
        data = safeio.read_some(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ManifestError([Problem(shown, "larger than 1 MiB")])
    return data


def _open_below(root: str, parts: list[str]) -> int:
    """The regular file root/parts..., each folder opened from the one before without
    following a link (the path was resolved already: a link found now was put there since),
    the file without blocking (a FIFO) and only when it is regular."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(root, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        found = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    mode = os.fstat(found).st_mode
    if not stat.S_ISREG(mode):
        os.close(found)
        raise safeio.UnsafeFile(f"it is {safeio.describe_mode(mode)}, not a regular file")
    return found


def _parse(data: bytes, shown: str, problems: list[Problem]) -> dict[str, Node]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        problems.append(Problem(shown, "not valid UTF-8"))
        return {}
    try:
        root, found = devcontainer_compose_yaml.parse(text, shown)
    except devcontainer_compose_yaml.ComposeYamlError as exc:
        problems.append(exc.problem)
        return {}
    problems.extend(found)
    if root is None or not isinstance(root.value, dict):
        problems.append(Problem(shown, "expected a mapping (services: ...)",
                                line=root.where.line if root is not None else None))
        return {}
    return root.value


# -- merging, as `docker compose -f a -f b` does ---------------------------------------------

def _merge_services(base: Node, over: Node) -> None:
    for name, service in over.value.items():
        mine = base.value.get(name)
        if mine is None or not isinstance(mine.value, dict) \
                or not isinstance(service.value, dict):
            base.value[name] = service
        else:
            _merge_map(mine, service, "")


def _merge_map(base: Node, over: Node, path: str) -> None:
    """Merge `over` into `base` (both mappings): mappings key by key; lists of NAME=value and
    mappings by name; volumes and devices by target; command, entrypoint and a healthcheck's
    test replaced; other lists appended (ports without repeats); scalars replaced."""
    for key, node in over.value.items():
        here = f"{path}.{key}" if path else key
        mine = base.value.get(key)
        if mine is None:
            base.value[key] = node
        elif key in _REPLACED or here in _REPLACED:
            base.value[key] = node
        elif key in _LIST_OR_MAP and path in ("", "build"):
            merged = as_map(mine)
            merged.update(as_map(node))
            base.value[key] = Node(merged, node.where)
        elif key == "build":
            a, b = _build_map(mine), _build_map(node)
            _merge_map(a, b, "build")
            base.value[key] = a
        elif key == "depends_on":
            deps = _deps_map(mine)
            deps.update(_deps_map(node))
            base.value[key] = Node(deps, node.where)
        elif key in _BY_TARGET and isinstance(mine.value, list) \
                and isinstance(node.value, list):
            by_target = {_target_key(n): n for n in mine.value}
            by_target.update({_target_key(n): n for n in node.value})
            base.value[key] = Node(list(by_target.values()), node.where)
        elif isinstance(mine.value, dict) and isinstance(node.value, dict):
            _merge_map(mine, node, here)
        elif isinstance(mine.value, list) and isinstance(node.value, list):
            seen = {_scalar_key(n) for n in mine.value}
            added = [n for n in node.value if _scalar_key(n) not in seen or key != "ports"]
            base.value[key] = Node(mine.value + added, node.where)
        else:
            base.value[key] = node


def as_map(node: Node) -> dict[str, Node]:
    """A list of NAME=value (or NAME) or a mapping, as a mapping of Nodes (a NAME without
    a value maps to a Node of None)."""
    if isinstance(node.value, dict):
        return dict(node.value)
    out: dict[str, Node] = {}
    if isinstance(node.value, list):
        for item in node.value:
            if isinstance(item.value, str):
                name, sep, value = item.value.partition("=")
                out[name.strip()] = Node(value if sep else None, item.where)
            else:
                out[str(item.value)] = Node(None, item.where)
    return out


def _build_map(node: Node) -> Node:
    if isinstance(node.value, str):
        return Node({"context": node}, node.where)
    return Node(dict(node.value), node.where) if isinstance(node.value, dict) else node


def _deps_map(node: Node) -> dict[str, Node]:
    if isinstance(node.value, list):
        return {str(n.value): n for n in node.value}
    return dict(node.value) if isinstance(node.value, dict) else {}


def _target_key(node: Node) -> str:
    """A volume's (or device's) target as written: the key compose merges them by."""
    if isinstance(node.value, dict):
        target = node.value.get("target")
        return str(target.value) if target is not None else repr(node.value)
    parts = str(node.value).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _scalar_key(node: Node) -> str:
    return repr(node.value) if not isinstance(node.value, (dict, list)) else str(id(node))


# -- .env and env_file --------------------------------------------------------------------------

def _dotenv(project_dir: Path, root: Path) -> dict[str, str]:
    """The `.env` file of the project folder (compose's own, beside the first compose file):
    NAME=value lines, `#` comments, `export ` and quotes as compose reads them."""
    shown = str(project_dir / ".env")
    data = read_inside(project_dir / ".env", root, shown)
    return parse_env_file(data, shown) if data is not None else {}


def parse_env_file(data: bytes, shown: str) -> dict[str, str]:
    """NAME=value lines of an env file; a line that is neither one nor a comment is refused
    naming its line."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ManifestError([Problem(shown, "not valid UTF-8")]) from None
    out: dict[str, str] = {}
    problems: list[Problem] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        stripped = stripped.removeprefix("export ").lstrip()
        name, sep, value = stripped.partition("=")
        name = name.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
            problems.append(Problem(shown, "expected NAME=value", line=number))
            continue
        if not sep:
            continue  # NAME alone: taken from the shell's environment, which wins anyway
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
            if stripped.partition("=")[2].strip()[0] == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0]
        out[name] = value
    if problems:
        raise ManifestError(problems)
    return out
