"""Reading the Docker Compose files a devcontainer.json names: bounded, regular files inside
the project only, YAML with the line of every value, `${VAR}` filled in as compose does, and
several files merged in order as `docker compose -f a.yml -f b.yml` merges them.

The project folder may be a cell's live workspace (hostPath), so what it holds is read as a
cell's files are: never through a link leading out of it, never a FIFO or device, at most
MAX_BYTES. YAML is read by devcontainer_compose_yaml (anchors and merge keys as compose allows them,
bounded).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devcell import safeio
from devcell.api import devcontainer_compose_yaml
from devcell.api.devcontainer_compose_yaml import Node
from devcell.errors import ManifestError, Problem

MAX_BYTES = 1 << 20
MAX_FILES = 16
_LIST_OR_MAP = {"environment", "labels", "args", "extra_hosts", "sysctls", "annotations"}
"""Fields compose accepts as a list of NAME=value or a mapping; merged by name."""
_BY_TARGET = {"volumes", "devices"}
_REPLACED = {"command", "entrypoint", "test", "healthcheck.test"}
_VAR = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?", re.S)


@dataclass
class Compose:
    """The merged compose configuration and the environment its `${VAR}`s are filled from."""

    files: list[Path]
    project_dir: Path
    """Where relative paths in every file point from: the first file's folder, as compose."""
    top: dict[str, Node]
    environ: Mapping[str, str]
    problems: list[Problem] = field(default_factory=list)
    _filled: dict[int, str | None] = field(default_factory=dict)

    def text(self, node: Node) -> str | None:
        """`node` as a string with its variables filled in; None (and a problem naming the
        file, line and variable) when one is unset without a default, or when it is no
        scalar."""
        if isinstance(node.value, (dict, list)):
            self.problems.append(node.where.problem("expected a string"))
            return None
        if id(node) not in self._filled:
            self._filled[id(node)] = self._interpolate(node)
        return self._filled[id(node)]

    def _interpolate(self, node: Node) -> str | None:
        raw = node.value
        if raw is None:
            return ""
        if isinstance(raw, bool):
            return "true" if raw else "false"
        if not isinstance(raw, str):
            return str(raw)
        missing: list[str] = []

        def one(found: re.Match[str]) -> str:
            if found.group(1):
                return "$"
            braced = found.group(2)
            if braced is None:
                name = found.group(3)
                if name in self.environ:
                    return self.environ[name]
                missing.append(f"{name} is not set (in the environment or .env) and has "
                               "no default; give it one with ${" + name + ":-default}")
                return ""
            parsed = _BRACED.fullmatch(braced)
            if parsed is None:
                missing.append(f"${{{braced}}} is not a variable compose reads")
                return ""
            name, op, arg = parsed.group(1), parsed.group(2), parsed.group(3) or ""
            value = self.environ.get(name)
            empty = value is None or (value == "" and op is not None and op.startswith(":"))
            if op is None:
                if value is None:
                    missing.append(f"{name} is not set (in the environment or .env) and has "
                                   "no default; give it one with ${" + name + ":-default}")
                    return ""
                return value
            kind = op[-1]
            if kind == "-":
                return arg if empty else str(value)
            if kind == "?":
                if empty:
                    missing.append(f"{name} is required: {arg}" if arg
                                   else f"{name} is required and not set")
                    return ""
                return str(value)
            return "" if empty else arg  # "+": the replacement when set

        out = _VAR.sub(one, raw)
        if missing:
            for why in dict.fromkeys(missing):
                self.problems.append(node.where.problem(why))
            return None
        return out


def read(paths: list[tuple[Path, str]], root: Path, environ: Mapping[str, str]) -> Compose:
    """The compose files (path, as shown) merged in order, or ManifestError naming the file
    (and line) that cannot be read. `root` is the project folder none may lie outside."""
    problems: list[Problem] = []
    docs: list[tuple[dict[str, Node], str]] = []
    if len(paths) > MAX_FILES:
        raise ManifestError([Problem(paths[MAX_FILES][1], f"more than {MAX_FILES} compose "
                                     "files")])
    for path, shown in paths:
        data = read_inside(path, root, shown)
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
    return Compose([p for p, _ in paths], project_dir, top, env)


def read_inside(path: Path, root: Path, shown: str) -> bytes | None:
    """At most MAX_BYTES of the regular file `path` (None when there is none), refused when it
    or a link on its way leads out of `root`, or it is no regular file, or is larger."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    inside = os.path.relpath(real, real_root)
    if inside == ".." or inside.startswith("../") or os.path.isabs(inside):
        raise ManifestError([Problem(shown, f"it lies outside the project folder {real_root} "
                                     f"(at {real}); DevCell reads only the project's files")])
    parts = inside.split("/")
    try:
        fd = _open_below(real_root, parts)
    except FileNotFoundError:
        return None
    except (safeio.UnsafeFile, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ManifestError([Problem(shown, f"cannot read it: {why}")]) from None
    try:
        data = safeio.read_some(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ManifestError([Problem(shown, "larger than 1 MiB")])
    return data


def _open_below(root: str, parts: list[str]) -> int:
    """The regular file root/parts..., walked one folder at a time without following any
    link (the path was resolved already: a link found now was put there since)."""
    directory = Path(root)
    for part in parts[:-1]:
        directory = directory / part
        mode = os.lstat(directory).st_mode
        if not stat.S_ISDIR(mode):
            raise safeio.UnsafeFile(f"{directory} is {safeio.describe_mode(mode)}")
    return safeio.open_regular(directory, parts[-1])


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
