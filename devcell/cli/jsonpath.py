"""kubectl's JSONPath template dialect, for `-o jsonpath=`, custom columns and `--sort-by`.

A template is literal text with actions in braces, as kubectl (k8s.io/client-go/util/jsonpath)
reads it: `{.a.b}`, `{['a']}`, `{.a\\.b}` (an escaped dot stays in the key), `{..name}`
(recursive descent), `{.items[*]}`, `{.items[0]}`, `{.items[1:3]}` (slices, negative indices),
`{.items[?(@.status.phase=="Running")]}` (filters with == != < > <= >=, or a bare path for
"exists"), unions `{.items[*]['metadata.name','status.phase']}`, `{range EXPR}...{end}`, `{@}`,
`{$}`, and quoted literals `{"\\n"}` `{'\\t'}`. A key that is missing yields nothing (kubectl's
allowMissingKeys). The results of one action are joined by a space; strings, numbers and
booleans print as text, objects and lists as compact JSON.

Parsed here rather than by a generic JSONPath library: range/end, literals, escapes, unions of
sub-paths and kubectl's printing rules are the dialect itself, and a syntax error must name its
position in the template.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from devcell.errors import TemplateError, TemplateEvaluationError

_FIELD_CHARS = re.compile(r"[A-Za-z0-9_\-/:@$]")
_COMPARATORS = ("==", "!=", "<=", ">=", "<", ">")
MAX_NESTING = 64
"""How deep ranges, filters and quoted sub-paths may nest: deeper is a usage error, never a
RecursionError (evaluation recurses as deep as the template nests)."""
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


class Step(NamedTuple):
    """One step of a path: `field`, `wildcard`, `recursive`, `index`, `slice`, `filter`,
    `union`, `root` or `current`."""

    kind: str
    arg: Any = None


class Path(NamedTuple):
    steps: tuple[Step, ...]
    relative: bool  # starts at the current object (inside a range), not the root


class Filter(NamedTuple):
    left: Path
    op: str | None  # None: "exists"
    right: Any  # a literal or a Path


class Text(NamedTuple):
    text: str


class Action(NamedTuple):
    path: Path


class Range(NamedTuple):
    path: Path
    body: tuple[Any, ...]


Node = Text | Action | Range


def _fail(template: str, pos: int, why: str) -> TemplateError:
    return TemplateError(f"jsonpath template {template!r}: at position {pos + 1}: {why}")


def _actions(template: str) -> Iterator[tuple[int, str]]:
    """(position, text) for literal text (position -1) and each `{...}` action's content."""
    i, text_start = 0, 0
    while i < len(template):
        if template[i] != "{":
            i += 1
            continue
        if i > text_start:
            yield -1, template[text_start:i]
        end = _closing_brace(template, i)
        yield i + 1, template[i + 1:end]
        i = text_start = end + 1
    if text_start < len(template):
        yield -1, template[text_start:]


def _closing_brace(template: str, start: int) -> int:
    quote, i = "", start + 1
    while i < len(template):
        ch = template[i]
        if ch == "\\":
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "}":
            return i
        i += 1
    raise _fail(template, start, "unclosed action: '{' without '}'")


def parse(template: str) -> tuple[Node, ...]:
    """The template's nodes; TemplateError (a usage error) naming the position otherwise."""
    stack: list[tuple[int, Path | None, list[Node]]] = [(-1, None, [])]
    for pos, content in _actions(template):
        body = stack[-1][2]
        if pos < 0:
            body.append(Text(content))
            continue
        stripped = content.strip()
        lead = pos + len(content) - len(content.lstrip())
        if stripped == "end":
            if len(stack) == 1:
                raise _fail(template, pos, "{end} without {range}")
            _, path, inner = stack.pop()
            assert path is not None
            stack[-1][2].append(Range(path, tuple(inner)))
        elif stripped.startswith("range ") or stripped.startswith("range\t"):
            expr = stripped[len("range"):]
            at = lead + len("range") + len(expr) - len(expr.lstrip())
            if len(stack) > MAX_NESTING:
                raise _fail(template, pos, f"{{range}} nested more than {MAX_NESTING} deep")
            stack.append((pos, _Paths(template, expr.strip(), at).path(), []))
        elif stripped[:1] in ("'", '"'):
            body.append(Text(_literal(template, stripped, lead)))
        elif not stripped:
            raise _fail(template, pos, "empty action '{}'")
        else:
            body.append(Action(_Paths(template, stripped, lead).path()))
    if len(stack) > 1:
        raise _fail(template, stack[-1][0] - 1, "{range} without {end}")
    return tuple(stack[0][2])


def _literal(template: str, text: str, pos: int) -> str:
    quote = text[0]
    out: list[str] = []
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            if text[i + 1:].strip():
                raise _fail(template, pos + i + 1, "text after a quoted literal")
            return "".join(out)
        if ch == "\\":
            nxt = text[i + 1:i + 2]
            if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            if nxt not in _ESCAPES:
                raise _fail(template, pos + i, f"unknown escape sequence '\\{nxt}'")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    raise _fail(template, pos, "unterminated quoted string")


class _Paths:
    """A recursive-descent parser of one path expression (`.a[0]..b[?(@.c=="d")]`)."""

    def __init__(self, template: str, text: str, offset: int, depth: int = 0) -> None:
        if depth > MAX_NESTING:
            raise _fail(template, offset, f"filters or quoted keys nested more than "
                                          f"{MAX_NESTING} deep")
        self.template, self.text, self.offset, self.i = template, text, offset, 0
        self.depth = depth

    def fail(self, why: str) -> TemplateError:
        return _fail(self.template, self.offset + self.i, why)

    def path(self, *, stop: str = "") -> Path:
        steps: list[Step] = []
        relative = True
        if self.text.startswith("$", self.i):
            relative = False
            self.i += 1
        elif self.text.startswith("@", self.i):
            self.i += 1
        while self.i < len(self.text) and self.text[self.i] not in stop:
            steps.append(self.step())
        return Path(tuple(steps), relative)

    def step(self) -> Step:
        text = self.text
        if text.startswith("..", self.i):
            self.i += 2
            if self.i < len(text) and text[self.i] == "[":
                return Step("recursive", self.bracket())
            return Step("recursive", self.field())
        if text[self.i] == ".":
            self.i += 1
            return self.field()
        if text[self.i] == "[":
            return self.bracket()
        if _FIELD_CHARS.match(text[self.i]) and self.i == 0:
            return self.field()  # kubectl's relaxed form: `metadata.name`
        raise self.fail(f"unexpected character {text[self.i]!r}")

    def field(self) -> Step:
        if self.text.startswith("*", self.i):
            self.i += 1
            return Step("wildcard")
        name: list[str] = []
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "\\" and self.i + 1 < len(self.text):
                name.append(self.text[self.i + 1])
                self.i += 2
            elif _FIELD_CHARS.match(ch) or ch.isalnum():
                name.append(ch)
                self.i += 1
            elif ch in ".[":
                break
            else:
                raise self.fail(f"unexpected character {ch!r} in a field name")
        if not name:
            if self.i >= len(self.text) or self.text[self.i] in ".[":
                return Step("current")  # `{.}`: the current object
        return Step("field", "".join(name))

    def bracket(self) -> Step:
        start = self.i
        end = self._closing(start)
        inner = self.text[start + 1:end].strip()
        self.i = end + 1
        if not inner:
            raise _fail(self.template, self.offset + start, "empty brackets '[]'")
        if inner == "*":
            return Step("wildcard")
        if inner.startswith("?"):
            return Step("filter", self._filter(inner[1:].strip(), start + 1))
        parts = _split_top(inner, ",")
        if len(parts) > 1:
            return Step("union", tuple(self._member(p.strip(), start + 1) for p in parts))
        return self._member(inner, start + 1)

    def _closing(self, start: int) -> int:
        depth, quote, i = 0, "", start
        while i < len(self.text):
            ch = self.text[i]
            if ch == "\\":
                i += 2
                continue
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise _fail(self.template, self.offset + start, "'[' without ']'")

    def _member(self, text: str, at: int) -> Step:
        if text[:1] in ("'", '"'):
            if len(text) < 2 or text[-1] != text[0]:
                raise _fail(self.template, self.offset + at, "unterminated quoted key")
            # kubectl reads ['a.b'] as the path .a.b, and ['a\.b'] as the key "a.b"
            return Step("path", _Paths(self.template, "." + text[1:-1],
                                       self.offset + at, self.depth + 1).path())
        if re.fullmatch(r"-?\d+", text):
            return Step("index", int(text))
        match = re.fullmatch(r"(-?\d+)?\s*:\s*(-?\d+)?(?:\s*:\s*(-?\d+)?)?", text)
        if match is None:
            raise _fail(self.template, self.offset + at, f"invalid array index {text!r}")
        start, stop, step = (int(g) if g is not None else None for g in match.groups())
        if step == 0:
            raise _fail(self.template, self.offset + at, "slice step cannot be 0")
        return Step("slice", (start, stop, step))

    def _filter(self, text: str, at: int) -> Filter:
        if not (text.startswith("(") and text.endswith(")")):
            raise _fail(self.template, self.offset + at, "a filter is written [?(@.key==value)]")
        body = text[1:-1].strip()
        for op in _COMPARATORS:
            parts = _split_top(body, op)
            if len(parts) == 2:
                left, right = (p.strip() for p in parts)
                return Filter(self._operand_path(left, at), op, self._operand(right, at))
        return Filter(self._operand_path(body, at), None, None)

    def _operand_path(self, text: str, at: int) -> Path:
        if not text.startswith(("@", "$")):
            raise _fail(self.template, self.offset + at,
                        f"a filter compares a path starting with @ or $, not {text!r}")
        return _Paths(self.template, text, self.offset + at, self.depth + 1).path()

    def _operand(self, text: str, at: int) -> Any:
        if text[:1] in ("'", '"'):
            return _literal(self.template, text, self.offset + at)
        if text.startswith(("@", "$")):
            return self._operand_path(text, at)
        if text in ("true", "false"):
            return text == "true"
        if text == "null":
            return None
        try:
            return json.loads(text) if re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text) \
                else _bad(text)
        except ValueError:
            raise _fail(self.template, self.offset + at,
                        f"unrecognized filter value {text!r} (quote strings)") from None


def _bad(text: str) -> Any:
    raise ValueError(text)


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside quotes, brackets and parentheses."""
    parts, depth, quote, i, last = [], 0, "", 0, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            # `<` must not be read inside `<=`, nor `=` of `==` / `!=`
            if not (sep in ("<", ">") and text.startswith(sep + "=", i)):
                parts.append(text[last:i])
                i += len(sep)
                last = i
                continue
        i += 1
    parts.append(text[last:])
    return parts


# -- evaluation ------------------------------------------------------------------------------

def evaluate(path: Path, root: Any, current: Any) -> list[Any]:
    values = [current if path.relative else root]
    for step in path.steps:
        values = _apply(step, values, root)
    return values


def _apply(step: Step, values: list[Any], root: Any) -> list[Any]:
    kind, arg = step
    out: list[Any] = []
    if kind == "union":  # each member over every value, as kubectl: all names, then all phases
        for member in arg:
            out.extend(_apply(member, values, root))
        return out
    for value in values:
        if kind == "field":
            if isinstance(value, dict) and arg in value:
                out.append(value[arg])
        elif kind == "current":
            out.append(value)
        elif kind == "wildcard":
            out.extend(_children(value))
        elif kind == "recursive":
            out.extend(_apply(arg, list(_descend(value)), root))
        elif kind == "index" and isinstance(value, list):
            if not -len(value) <= arg < len(value):
                raise TemplateEvaluationError(
                    f"jsonpath: array index out of bounds: index {arg}, length {len(value)}")
            out.append(value[arg])
        elif kind == "slice" and isinstance(value, list):
            out.extend(value[slice(*arg)])
        elif kind == "filter":
            out.extend(v for v in _children(value) if _keep(arg, v, root))
        elif kind == "path":
            out.extend(evaluate(arg, root, value))
    return out


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _descend(value: Any) -> Iterator[Any]:
    """Every object and list at or under `value`, parents first (as client-go's `..`)."""
    if isinstance(value, dict | list):
        yield value
        for child in _children(value):
            yield from _descend(child)


def _keep(flt: Filter, item: Any, root: Any) -> bool:
    left = evaluate(flt.left, root, item)
    if flt.op is None:
        return bool(left)
    right = evaluate(flt.right, root, item) if isinstance(flt.right, Path) else [flt.right]
    return any(_compare(a, flt.op, b) for a in left for b in right)


def _compare(a: Any, op: str, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        pair: tuple[Any, Any] = (a, b)
    elif isinstance(a, str) and isinstance(b, str):
        pair = (a, b)
    else:
        return {"==": a == b, "!=": a != b}.get(op, False)
    x, y = pair
    return {"==": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y,
            ">=": x >= y}[op]


def text_of(value: Any) -> str:
    """A value as kubectl prints it: text for scalars, compact JSON for objects and lists."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return str(value)


def render(nodes: tuple[Node, ...], root: Any, current: Any | None = None, *,
           escape: Callable[[str], str] = str) -> str:
    """The template's text; `escape` is applied to every value from the data (never to the
    template's own literals, so `{'\\t'}` stays a tab)."""
    here = root if current is None else current
    out: list[str] = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.text)
        elif isinstance(node, Action):
            out.append(" ".join(escape(text_of(v)) for v in evaluate(node.path, root, here)))
        else:
            for item in evaluate(node.path, root, here):
                out.append(render(node.body, root, item, escape=escape))
    return "".join(out)


def relaxed(expression: str, *, what: str) -> tuple[Node, ...]:
    """kubectl's relaxed form for custom columns and --sort-by: `.a.b`, `a.b`, `{.a.b}`."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if not text:
        raise TemplateError(f"{what}: empty JSONPath expression")
    if not text.startswith((".", "[", "@", "$")):
        text = "." + text
    nodes = parse("{" + text + "}")
    if len(nodes) != 1 or not isinstance(nodes[0], Action):
        raise TemplateError(f"{what}: {expression!r} is not one JSONPath expression "
                            "(e.g. .metadata.name)")
    return nodes
