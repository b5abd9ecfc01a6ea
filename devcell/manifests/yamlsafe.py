"""A YAML reader that is safe on hostile input and remembers where every value came from.

It consumes libyaml's event stream (iterative, never recursive), so nesting depth is checked
before anything recursive sees the data: the C composer can exhaust the C stack on very deep
input. Anchors and aliases are refused outright (no alias bombs), duplicate keys are refused,
and plain scalars that YAML 1.1 turns into booleans, numbers or dates are remembered, so the
validator can say `unquoted no became false` where a string was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from devcell.manifests import secrets
from devcell.manifests.model import Path

MAX_DEPTH = 32

_Parser: Any = getattr(yaml, "CBaseLoader", None) or yaml.BaseLoader
_resolver = Resolver()
_constructor = SafeConstructor()
_STR = "tag:yaml.org,2002:str"
_ALLOWED_SCALAR_TAGS = {
    _STR,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}
_ALLOWED_COLLECTION_TAGS = {None, "!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


@dataclass
class YamlProblem:
    message: str
    line: int
    column: int
    path: Path = ()


@dataclass
class ParsedDocument:
    """One document's data plus the position of every value and key (1-based)."""

    data: Any
    line: int
    positions: dict[Path, tuple[int, int]] = field(default_factory=dict)
    key_positions: dict[Path, tuple[int, int]] = field(default_factory=dict)
    implicit: dict[Path, str] = field(default_factory=dict)
    """Paths whose plain scalar YAML 1.1 resolved to a non-string, with the source text."""
    problems: list[YamlProblem] = field(default_factory=list)


class YamlSyntaxError(Exception):
    """Input that cannot be read as a manifest at all; stops the whole file.

    `path` is the field where the reader gave up (empty for plain syntax errors, whose
    position libyaml reports but whose field it cannot know) and `data` the document as far
    as it was read, so the message can still name the object.
    """

    def __init__(
        self, message: str, line: int, column: int, *, path: Path = (), data: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.path = path
        self.data = data


def _pos(mark: Any) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1)


def _construct(tag: str, event: Any) -> Any:
    node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
    return _constructor.construct_object(node)


class _BadScalar(ValueError):
    """A scalar its explicit tag cannot read (`!!int abc`)."""

    def __init__(self, value: str, tag: str) -> None:
        super().__init__(f'"{value}" is not a valid {tag} value')
        self.tag = tag


def _scalar_value(event: Any) -> tuple[Any, bool]:
    """(value, resolved-implicitly-to-non-string). Raises ValueError for a bad explicit tag."""
    tag = event.tag
    plain = event.implicit[0] and event.style in (None, "")
    if tag in (None, "!"):
        if not plain:
            return event.value, False
        tag = _resolver.resolve(yaml.ScalarNode, event.value, (True, False))
        if tag == _STR:
            return event.value, False
        try:
            return _construct(tag, event), True
        except (ValueError, KeyError, TypeError, OverflowError):
            # Matches YAML 1.1's pattern but is no valid value (2001-02-30, 0x_): a string.
            return event.value, False
    if tag not in _ALLOWED_SCALAR_TAGS:
        raise ValueError(f"tag {tag} is not allowed")
    if tag == _STR:
        return event.value, False
    try:
        return _construct(tag, event), False
    except (ValueError, KeyError, TypeError, OverflowError):
        short = tag.replace("tag:yaml.org,2002:", "!!")
        raise _BadScalar(event.value, short) from None


def _refuse(
    message: str, start: tuple[int, int], path: Path, doc: ParsedDocument
) -> YamlSyntaxError:
    """A refusal located at `start`, naming the field and (via the data so far) the object."""
    return YamlSyntaxError(message, *start, path=path, data=doc.data)


class _Frame:
    __slots__ = ("container", "path", "key", "key_pos", "first_keys")

    def __init__(self, container: dict[str, Any] | list[Any], path: Path) -> None:
        self.container = container
        self.path = path
        self.key: str | None = None
        self.key_pos: tuple[int, int] | None = None
        self.first_keys: dict[str, int] = {}


def parse_documents(text: str, *, max_depth: int = MAX_DEPTH) -> list[ParsedDocument]:
    """Parse every document in `text`. Raises YamlSyntaxError for input that is not YAML."""
    parser = _Parser(text)
    docs: list[ParsedDocument] = []
    doc: ParsedDocument | None = None
    stack: list[_Frame] = []
    try:
        while True:
            event = parser.get_event()
            if event is None:
                break
            etype = type(event)
            if etype is yaml.DocumentStartEvent:
                doc = ParsedDocument(data=None, line=event.start_mark.line + 1)
                stack = []
                continue
            if etype is yaml.DocumentEndEvent:
                assert doc is not None
                docs.append(doc)
                doc = None
                continue
            if etype in (yaml.StreamStartEvent, yaml.StreamEndEvent):
                continue
            assert doc is not None
            if etype in (yaml.MappingEndEvent, yaml.SequenceEndEvent):
                stack.pop()
                continue
            parent = stack[-1] if stack else None
            # A node in key position of a mapping: remember it as the pending key.
            in_key = (
                parent is not None and isinstance(parent.container, dict) and parent.key is None
            )
            # Where this node sits: its own path for a value, the mapping's for a key.
            path: Path
            if parent is None:
                path = ()
            elif in_key:
                path = parent.path
            elif isinstance(parent.container, dict):
                assert parent.key is not None
                path = parent.path + (parent.key,)
            else:
                path = parent.path + (len(parent.container),)
            start = _pos(event.start_mark)
            if etype is yaml.AliasEvent:
                message = "aliases are not allowed in manifests (write the value out)"
                raise _refuse(message, start, path, doc)
            if getattr(event, "anchor", None):
                message = f"anchors are not allowed in manifests (&{event.anchor})"
                raise _refuse(message, start, path, doc)
            if in_key:
                assert parent is not None
                if etype is not yaml.ScalarEvent:
                    raise _refuse("mapping keys must be plain strings", start, path, doc)
                key = event.value
                if key == "<<" and event.implicit[0]:
                    raise _refuse("merge keys (<<) are not allowed", start, path, doc)
                if key in parent.first_keys:
                    doc.problems.append(
                        YamlProblem(
                            f'duplicate key "{key}" (first at line {parent.first_keys[key]})',
                            *start,
                            path=parent.path + (key,),
                        )
                    )
                else:
                    parent.first_keys[key] = start[0]
                parent.key = key
                parent.key_pos = start
                continue
            # A value: record where it is and attach it.
            if parent is not None and isinstance(parent.container, dict):
                assert parent.key_pos is not None
                doc.key_positions[path] = parent.key_pos
            doc.positions[path] = start
            value: Any
            if etype is yaml.ScalarEvent:
                try:
                    value, surprising = _scalar_value(event)
                except ValueError as exc:
                    # Where a secret can be, the value is not quoted: the entry's `secret`
                    # flag may not have been read yet, and the position says which value.
                    shown = (f"not a valid {exc.tag} value"
                             if isinstance(exc, _BadScalar) and secrets.may_cover(path)
                             else str(exc))
                    raise _refuse(shown, start, path, doc) from None
                if surprising and value is not None:
                    doc.implicit[path] = event.value
            else:
                if event.tag not in _ALLOWED_COLLECTION_TAGS:
                    what = "a mapping" if etype is yaml.MappingStartEvent else "a sequence"
                    message = f"tag {event.tag} is not allowed on {what}"
                    raise _refuse(message, start, path, doc)
                if len(stack) + 1 > max_depth:
                    message = f"nesting deeper than {max_depth} levels is not allowed"
                    raise _refuse(message, start, path, doc)
                value = {} if etype is yaml.MappingStartEvent else []
            if parent is None:
                doc.data = value
            elif isinstance(parent.container, dict):
                assert parent.key is not None
                if parent.key not in parent.container:
                    parent.container[parent.key] = value
                parent.key = None
            else:
                parent.container.append(value)
            if etype is not yaml.ScalarEvent:
                stack.append(_Frame(value, path))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = _pos(mark) if mark is not None else (1, 1)
        message = exc.problem or exc.context or "invalid YAML"
        if "maximum nesting depth" in message:
            # libyaml >= 0.2.6 has its own limit (1000) and may reach it while scanning
            # ahead, before our depth check sees the event that crosses MAX_DEPTH.
            raise YamlSyntaxError(
                f"nesting deeper than {max_depth} levels is not allowed", line, col) from None
        if mark is not None and mark.index >= len(text.rstrip()):
            message += " at the end of the file"
        cm = exc.context_mark
        if exc.context and exc.problem and cm is not None and _pos(cm) != (line, col):
            # libyaml notices an unclosed [ or " only where it gives up (often the end of
            # the file); where the construct started is what the user must fix.
            message += f" ({exc.context} started at line {cm.line + 1}, column {cm.column + 1})"
        raise YamlSyntaxError(f"YAML syntax error: {message}", line, col) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"YAML error: {exc}", 1, 1) from None
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()
    return docs
