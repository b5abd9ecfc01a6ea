"""A compose file's YAML as Nodes that know their file, line and field, read safely.

Compose files share settings with anchors, aliases and merge keys (`x-common: &common`,
`<<: *common`), which the manifests' reader refuses; this reader accepts them, bounded: an
alias is a copy counted against MAX_NODES (no alias bomb), nesting is bounded, keys are plain
strings and unique. It consumes libyaml's events without recursion. Plain scalars are read
as compose reads them (YAML 1.2's core schema: `yes`, `on` and `010` stay strings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from devcell import names
from devcell.errors import Problem

MAX_DEPTH = 32
MAX_NODES = 100_000
"""Values in one file, aliases' copies included (a compose file has hundreds)."""

_Parser: Any = getattr(yaml, "CBaseLoader", None) or yaml.BaseLoader
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)|0o[0-7]+|0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)")
_TAGS = {"tag:yaml.org,2002:str": "str", "tag:yaml.org,2002:int": "int",
         "tag:yaml.org,2002:float": "float", "tag:yaml.org,2002:bool": "bool",
         "tag:yaml.org,2002:null": "null"}


@dataclass(frozen=True)
class Where:
    """Where a compose value was written: the file (as shown), its line, its field."""

    file: str
    line: int
    field: str

    def problem(self, message: str) -> Problem:
        return Problem(self.file, message, line=self.line, field=self.field or None)

    def __str__(self) -> str:
        return names.printable(f"{self.file}:{self.line}: {self.field}")


@dataclass(eq=False)
class Node:
    """One value of a compose file: a scalar, a dict of Nodes or a list of Nodes."""

    value: Any
    where: Where

    def get(self, key: str) -> Node | None:
        return self.value.get(key) if isinstance(self.value, dict) else None


class ComposeYamlError(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out


class _Frame:
    __slots__ = ("node", "path", "key", "key_line", "merges", "lines", "anchor")

    def __init__(self, node: Node, path: tuple[str | int, ...], anchor: str | None) -> None:
        self.node = node
        self.path = path
        self.key: str | None = None
        self.key_line = 0
        self.merges: list[Node] = []
        self.lines: dict[str, int] = {}
        self.anchor = anchor


def parse(text: str, shown: str) -> tuple[Node | None, list[Problem]]:
    """The single document of `text` as Nodes (None when empty), and the problems that do
    not stop the reading (duplicate keys); ComposeYamlError for what does."""
    reader = _Reader(text, shown)
    try:
        return reader.run(), reader.problems
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        column = mark.column + 1 if mark is not None else None
        message = exc.problem or exc.context or "invalid YAML"
        if "maximum nesting depth" in message:
            message = f"nesting deeper than {MAX_DEPTH} levels"
        raise ComposeYamlError(Problem(shown, f"YAML syntax error: {message}", line=line,
                                       column=column)) from None
    except yaml.YAMLError as exc:
        raise ComposeYamlError(Problem(shown, f"YAML error: {exc}")) from None
    finally:
        dispose = getattr(reader.parser, "dispose", None)
        if dispose is not None:
            dispose()


class _Reader:
    def __init__(self, text: str, shown: str) -> None:
        self.parser = _Parser(text)
        self.shown = shown
        self.problems: list[Problem] = []
        self.anchors: dict[str, Node] = {}
        self.count = 0

    def fail(self, message: str, line: int, path: tuple[str | int, ...]) -> ComposeYamlError:
        return ComposeYamlError(Problem(self.shown, message, line=line,
                                        field=dotted(path) or None))

    def run(self) -> Node | None:
        root: Node | None = None
        documents = 0
        stack: list[_Frame] = []
        while True:
            event = self.parser.get_event()
            if event is None:
                return root
            kind = type(event)
            line = event.start_mark.line + 1
            if kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise self.fail("expected one YAML document (a second starts here)",
                                    line, ())
                continue
            if kind in (yaml.StreamStartEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent):
                continue
            if kind in (yaml.MappingEndEvent, yaml.SequenceEndEvent):
                frame = stack.pop()
                self._merge(frame)
                if frame.anchor:
                    self.anchors[frame.anchor] = frame.node
                continue
            parent = stack[-1] if stack else None
            if parent is not None and isinstance(parent.node.value, dict) \
                    and parent.key is None:
                self._key(parent, event, line)
                continue
            path: tuple[str | int, ...] = ()
            key_line = line
            if parent is not None:
                if isinstance(parent.node.value, dict):
                    assert parent.key is not None
                    path, key_line = (*parent.path, parent.key), parent.key_line
                else:
                    path = (*parent.path, len(parent.node.value))
            where = Where(self.shown, key_line, dotted(path))
            self.count += 1
            if self.count > MAX_NODES:
                raise self.fail(f"more than {MAX_NODES} values (aliases' copies counted)",
                                line, path)
            anchor = getattr(event, "anchor", None)
            node: Node
            if kind is yaml.AliasEvent:
                if event.anchor not in self.anchors:
                    raise self.fail(f"unknown anchor *{names.printable(event.anchor)} (an "
                                    "alias names an anchor defined before it, outside "
                                    "itself)", line, path)
                node = self._copy(self.anchors[event.anchor], line, path)
            elif kind is yaml.ScalarEvent:
                node = Node(self._scalar(event, line, path), where)
                if anchor:
                    self.anchors[anchor] = node
            else:
                if len(stack) >= MAX_DEPTH:
                    raise self.fail(f"nesting deeper than {MAX_DEPTH} levels", line, path)
                if event.tag not in (None, "!", "tag:yaml.org,2002:map",
                                     "tag:yaml.org,2002:seq"):
                    raise self.fail(f"tag {names.printable(event.tag)} is not allowed",
                                    line, path)
                node = Node({} if kind is yaml.MappingStartEvent else [], where)
            self._attach(parent, node)
            if root is None:
                root = node
            if kind in (yaml.MappingStartEvent, yaml.SequenceStartEvent):
                stack.append(_Frame(node, path, anchor))

    def _key(self, frame: _Frame, event: Any, line: int) -> None:
        if type(event) is not yaml.ScalarEvent:
            raise self.fail("mapping keys must be plain strings", line, frame.path)
        key = event.value
        if key == "<<" and event.implicit[0]:
            frame.key, frame.key_line = "<<", line
            return
        if key in frame.lines:
            self.problems.append(Problem(self.shown, f'duplicate key "{names.printable(key)}" '
                                         f"(first at line {frame.lines[key]})", line=line,
                                         field=dotted((*frame.path, key))))
        else:
            frame.lines[key] = line
        frame.key, frame.key_line = key, line

    def _attach(self, parent: _Frame | None, node: Node) -> None:
        if parent is None:
            return
        if isinstance(parent.node.value, list):
            parent.node.value.append(node)
            return
        key = parent.key
        assert key is not None
        parent.key = None
        if key == "<<":
            parent.merges.append(node)
        elif key not in parent.node.value:
            parent.node.value[key] = node

    def _merge(self, frame: _Frame) -> None:
        """`<<: *base` or `<<: [*a, *b]`: the keys of each mapping the node lacks, the
        first named winning (YAML's merge key)."""
        for merge in frame.merges:
            sources = merge.value if isinstance(merge.value, list) else [merge]
            for source in sources:
                if not isinstance(source.value, dict):
                    raise self.fail("a merge key (<<) takes a mapping or a list of mappings",
                                    merge.where.line, frame.path)
                for key, value in source.value.items():
                    frame.node.value.setdefault(key, value)

    def _copy(self, node: Node, line: int, path: tuple[str | int, ...]) -> Node:
        """A copy of an anchored node for an alias, counted (the copy's values keep where the
        anchor wrote them)."""
        top = Node(None, node.where)
        stack: list[tuple[Node, Node]] = [(node, top)]
        while stack:
            source, copy = stack.pop()
            self.count += 1
            if self.count > MAX_NODES:
                raise self.fail(f"more than {MAX_NODES} values (aliases' copies counted)",
                                line, path)
            if isinstance(source.value, dict):
                copy.value = {}
                for key, child in source.value.items():
                    copy.value[key] = Node(None, child.where)
                    stack.append((child, copy.value[key]))
            elif isinstance(source.value, list):
                copy.value = []
                for child in source.value:
                    copy.value.append(Node(None, child.where))
                    stack.append((child, copy.value[-1]))
            else:
                copy.value = source.value
        return top

    def _scalar(self, event: Any, line: int, path: tuple[str | int, ...]) -> Any:
        """A scalar as compose reads it: YAML 1.2's core schema for plain ones."""
        value = event.value
        tag = event.tag
        if tag in (None, "!"):
            if not (event.implicit[0] and event.style in (None, "")):
                return value
            return _plain(value)
        if tag not in _TAGS:
            raise self.fail(f"tag {names.printable(tag)} is not allowed", line, path)
        kind, read = _TAGS[tag], _plain(value)
        if kind == "str":
            return value
        if kind == "bool" and isinstance(read, bool) or kind == "null" and read is None:
            return read
        if kind == "int" and _INT.fullmatch(value):
            return read
        if kind == "float" and (_FLOAT.fullmatch(value) or _INT.fullmatch(value)):
            return value
        raise self.fail(f"{names.printable(value)!r} is not a valid !!{kind}", line, path)


def _plain(value: str) -> Any:
    if value in ("", "~", "null", "Null", "NULL"):
        return None
    if value in ("true", "True", "TRUE"):
        return True
    if value in ("false", "False", "FALSE"):
        return False
    if _INT.fullmatch(value):
        if value.startswith(("0o", "0x")):
            return value  # kept as written; no compose field takes one
        return int(value) if len(value) <= 20 else value
    if _FLOAT.fullmatch(value):
        return value  # kept as written (compose passes 1.10 on as "1.10")
    return value
