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
position in the template. The parser reads the template once, left to right (no sub-string is
scanned again), so its time is linear in the template's length, which is bounded anyway.
Indices, slices and filter comparisons follow client-go's evalArray and text/template's
comparisons, errors included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from devcell.errors import TemplateError, TemplateEvaluationError

_COMPARATORS = ("==", "!=", "<=", ">=", "<", ">")
MAX_NESTING = 64
"""How deep ranges, filters and quoted sub-paths may nest: deeper is a usage error, never a
RecursionError (evaluation recurses as deep as the template nests)."""
MAX_TEMPLATE_BYTES = 64 * 1024
"""A larger template (or jsonpath-file) is a usage error before any parsing."""
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_SPACE = " \t\r\n"
_FIELD_PUNCTUATION = "_-/:@$"
_INDEX = re.compile(r"-?\d+")
_SLICE = re.compile(r"(-?\d+)?\s*:\s*(-?\d+)?(?:\s*:\s*(-?\d+)?)?")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_END = re.compile(r"end[ \t\r\n]*\}")
_RANGE = re.compile(r"range[ \t\r\n]")


class Step(NamedTuple):
    """One step of a path: `field`, `wildcard`, `recursive`, `index`, `slice`, `filter`,
    `union`, `path` or `current`."""

    kind: str
    arg: Any = None


class Path(NamedTuple):
    steps: tuple[Step, ...]
    relative: bool  # starts at the current object (inside a range), not the root


class Filter(NamedTuple):
    left: Path
    op: str | None  # None: "exists"
    right: Any  # a literal or a Path
    source: str = ""  # `[?(...)]` as written, to name it in an error


class Text(NamedTuple):
    text: str


class Action(NamedTuple):
    path: Path


class Range(NamedTuple):
    path: Path
    body: tuple[Any, ...]


Node = Text | Action | Range


def _shown(template: str) -> str:
    return repr(template if len(template) <= 80 else template[:77] + "...")


def parse(template: str) -> tuple[Node, ...]:
    """The template's nodes; TemplateError (a usage error) naming the position otherwise."""
    if len(template) > MAX_TEMPLATE_BYTES or \
            len(template.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        raise TemplateError(f"jsonpath template of {len(template.encode('utf-8', 'replace'))} "
                            f"bytes: at most {MAX_TEMPLATE_BYTES} (64 KiB) are accepted")
    return _Parser(template).template()


def _is_field_char(ch: str) -> bool:
    return ch.isalnum() or ch in _FIELD_PUNCTUATION


class _Parser:
    """One left-to-right pass over a template: each character is looked at a bounded number of
    times, nesting is bounded by MAX_NESTING, and every error names its position."""

    def __init__(self, template: str) -> None:
        self.t, self.i, self.n = template, 0, len(template)

    def fail(self, pos: int, why: str) -> TemplateError:
        return TemplateError(f"jsonpath template {_shown(self.t)}: at position {pos + 1}: {why}")

    def at(self) -> str:
        return self.t[self.i] if self.i < self.n else ""

    def space(self) -> None:
        while self.i < self.n and self.t[self.i] in _SPACE:
            self.i += 1

    # -- text and actions ------------------------------------------------------------------

    def template(self) -> tuple[Node, ...]:
        stack: list[tuple[int, Path | None, list[Node]]] = [(-1, None, [])]
        while self.i < self.n:
            brace = self.t.find("{", self.i)
            if brace < 0:
                break
            if brace > self.i:
                stack[-1][2].append(Text(self.t[self.i:brace]))
            self.i = brace + 1
            self.action(brace, stack)
        if self.i < self.n:
            stack[-1][2].append(Text(self.t[self.i:]))
        if len(stack) > 1:
            raise self.fail(stack[-1][0], "{range} without {end}")
        return tuple(stack[0][2])

    def action(self, brace: int, stack: list[tuple[int, Path | None, list[Node]]]) -> None:
        self.space()
        ch = self.at()
        if not ch:
            raise self.fail(brace, "unclosed action: '{' without '}'")
        end = _END.match(self.t, self.i)
        if end is not None:
            if len(stack) == 1:
                raise self.fail(brace + 1, "{end} without {range}")
            self.i = end.end()
            _, path, inner = stack.pop()
            assert path is not None
            stack[-1][2].append(Range(path, tuple(inner)))
        elif _RANGE.match(self.t, self.i):
            if len(stack) > MAX_NESTING:
                raise self.fail(brace + 1, f"{{range}} nested more than {MAX_NESTING} deep")
            self.i += len("range")
            self.space()
            path = self.path("}", 0)
            self.close(brace)
            stack.append((brace, path, []))
        elif ch in "'\"":
            text = self.literal()
            self.space()
            if self.at() != "}":
                raise self.fail(self.i, "text after a quoted literal") if self.at() else \
                    self.fail(brace, "unclosed action: '{' without '}'")
            self.i += 1
            stack[-1][2].append(Text(text))
        elif ch == "}":
            raise self.fail(self.i, "empty action '{}'")
        else:
            path = self.path("}", 0)
            self.close(brace)
            stack[-1][2].append(Action(path))

    def close(self, brace: int) -> None:
        if not self.at():
            raise self.fail(brace, "unclosed action: '{' without '}'")
        if self.at() != "}":
            raise self.fail(self.i, f"unexpected character {self.at()!r}")
        self.i += 1

    def literal(self) -> str:
        """A quoted string at the cursor, its escapes read; the cursor moves past it."""
        start, quote = self.i, self.t[self.i]
        out: list[str] = []
        i = start + 1
        while i < self.n:
            ch = self.t[i]
            if ch == quote:
                self.i = i + 1
                return "".join(out)
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            nxt = self.t[i + 1:i + 2]
            digits = self.t[i + 2:i + 6]
            if nxt == "u" and re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                out.append(chr(int(digits, 16)))
                i += 6
            elif nxt in _ESCAPES and nxt:
                out.append(_ESCAPES[nxt])
                i += 2
            else:
                raise self.fail(i, f"unknown escape sequence '\\{nxt}'")
        raise self.fail(start, "unterminated quoted string")

    # -- paths -----------------------------------------------------------------------------

    def path(self, stop: str, depth: int) -> Path:
        """A path up to (not past) a character of `stop`; blanks may only precede that."""
        relative = True
        first = self.i
        if self.at() == "$":
            relative = False
            self.i += 1
        elif self.at() == "@":
            self.i += 1
        return Path(self.steps([], stop, depth, relaxed_at=first), relative)

    def steps(self, steps: list[Step], stop: str, depth: int, *,
              relaxed_at: int = -1) -> tuple[Step, ...]:
        while self.i < self.n:
            ch = self.t[self.i]
            if ch in stop:
                break
            if ch in _SPACE:
                blank = self.i
                self.space()
                if self.i < self.n and self.t[self.i] not in stop:
                    raise self.fail(blank, f"unexpected character {ch!r}")
                break
            steps.append(self.step(depth, relaxed=self.i == relaxed_at))
        return tuple(steps)

    def step(self, depth: int, *, relaxed: bool) -> Step:
        t, i = self.t, self.i
        if t.startswith("..", i):
            self.i += 2
            if self.at() == "[":
                return Step("recursive", self.bracket(depth))
            return Step("recursive", self.field())
        if t[i] == ".":
            self.i += 1
            return self.field()
        if t[i] == "[":
            return self.bracket(depth)
        if relaxed and _is_field_char(t[i]):
            return self.field()  # kubectl's relaxed form: `metadata.name`
        raise self.fail(i, f"unexpected character {t[i]!r}")

    def field(self) -> Step:
        if self.at() == "*":
            self.i += 1
            return Step("wildcard")
        name: list[str] = []
        t = self.t
        while self.i < self.n:
            ch = t[self.i]
            if ch == "\\" and self.i + 1 < self.n:
                name.append(t[self.i + 1])
                self.i += 2
            elif _is_field_char(ch):
                name.append(ch)
                self.i += 1
            else:
                break
        if not name:
            return Step("current")  # `{.}`: the current object
        return Step("field", "".join(name))

    # -- brackets: indices, slices, quoted keys, unions, filters --------------------------

    def bracket(self, depth: int) -> Step:
        start = self.i
        depth += 1
        if depth > MAX_NESTING:
            raise self.fail(start, f"filters or quoted keys nested more than {MAX_NESTING} deep")
        self.i += 1
        self.space()
        ch = self.at()
        if ch in ("", "}"):
            raise self.fail(start, "'[' without ']'")
        if ch == "]":
            raise self.fail(start, "empty brackets '[]'")
        if ch == "?":
            self.i += 1
            flt = self.filter(start, depth)
            self.close_bracket(start)
            return Step("filter", flt._replace(source=self.t[start:self.i]))
        if ch == "*":
            self.i += 1
            self.space()
            if self.at() == "]":
                self.i += 1
                return Step("wildcard")
            raise self.fail(start + 1, "invalid array index '*' (use [*] alone)")
        members = [self.member(depth)]
        self.space()
        while self.at() == ",":
            self.i += 1
            self.space()
            members.append(self.member(depth))
            self.space()
        self.close_bracket(start)
        return members[0] if len(members) == 1 else Step("union", tuple(members))

    def close_bracket(self, start: int) -> None:
        self.space()
        if self.at() in ("", "}"):
            raise self.fail(start, "'[' without ']'")
        if self.at() != "]":
            raise self.fail(self.i, f"unexpected character {self.at()!r} in brackets")
        self.i += 1

    def member(self, depth: int) -> Step:
        start, ch = self.i, self.at()
        if ch in ("'", '"'):
            # kubectl reads ['a.b'] as the path .a.b, and ['a\.b'] as the key "a.b"
            self.i += 1
            steps = self.steps([self.field()], ch + "}", depth)
            if self.at() != ch:
                raise self.fail(start, "unterminated quoted key")
            self.i += 1
            return Step("path", Path(steps, True))
        end = self.i
        while end < self.n and self.t[end] not in ",]}[":
            end += 1
        text = self.t[self.i:end].rstrip(_SPACE)
        self.i = start + len(text)
        if _INDEX.fullmatch(text):
            return Step("index", int(text))
        match = _SLICE.fullmatch(text)
        if match is None:
            raise self.fail(start, f"invalid array index {text!r}")
        return Step("slice", tuple(int(g) if g is not None else None for g in match.groups()))

    def filter(self, start: int, depth: int) -> Filter:
        self.space()
        if self.at() != "(":
            raise self.fail(start + 1, "a filter is written [?(@.key==value)]")
        self.i += 1
        self.space()
        left = self.operand_path("=!<>)", depth)
        self.space()
        op = next((c for c in _COMPARATORS if self.t.startswith(c, self.i)), None)
        right: Any = None
        if op is not None:
            self.i += len(op)
            self.space()
            right = self.operand(depth)
            self.space()
        if self.at() != ")":
            if not self.at():
                raise self.fail(start, "unterminated filter: '[?(' without ')]'")
            raise self.fail(self.i, f"unexpected character {self.at()!r} in a filter "
                                    "(a filter is written [?(@.key==value)])")
        self.i += 1
        return Filter(left, op, right)

    def operand_path(self, stop: str, depth: int) -> Path:
        if self.at() not in ("@", "$") or not self.at():
            raise self.fail(self.i, "a filter compares a path starting with @ or $")
        return self.path(stop, depth)

    def operand(self, depth: int) -> Any:
        ch = self.at()
        if ch in ("'", '"') and ch:
            return self.literal()
        if ch in ("@", "$") and ch:
            return self.path(")", depth)
        start = self.i
        while self.i < self.n and self.t[self.i] not in ")]}" + _SPACE:
            self.i += 1
        word = self.t[start:self.i]
        if word in ("true", "false"):
            return word == "true"
        if word == "null":
            return None
        if _NUMBER.fullmatch(word):
            return json.loads(word)
        raise self.fail(start, f"unrecognized filter value {word!r} (quote strings)")


# -- evaluation ------------------------------------------------------------------------------

MAX_VALUES = 2_000_000
"""Values one template may select in all (every step, every union member, every range item):
a union repeats its input once per member, so `[@,@][@,@]...` under 1 KiB would double the
list at each step until memory ran out; past this the template is refused, never run on."""


MAX_TEXT = 64 << 20
"""Characters one command's templates may print in all: `{range ..}{@}{end}` prints every
value nested in every other, so a few thousand selected values can be gigabytes of text."""


class Budget:
    """What is left of MAX_VALUES (values selected and compared) and MAX_TEXT (characters
    printed) for one command: its -o jsonpath render, custom columns and --sort-by share it."""

    def __init__(self, limit: int = MAX_VALUES, text: int = MAX_TEXT) -> None:
        self.limit = self.left = limit
        self.text_limit = self.text_left = text

    def wrote(self, chars: int) -> None:
        self.text_left -= chars
        if self.text_left < 0:
            raise TemplateEvaluationError(
                f"jsonpath: the output passes {self.text_limit:,} characters (a range over "
                "values nested in each other?); narrow the template")

    def take(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise TemplateEvaluationError(
                f"jsonpath: the template selects more than {self.limit:,} values (a union or "
                "range repeated over its own results?); narrow it")


def evaluate(path: Path, root: Any, current: Any, budget: Budget | None = None) -> list[Any]:
    budget = budget or Budget()
    values = [current if path.relative else root]
    for step in path.steps:
        values = _apply(step, values, root, budget)
    return values


def _apply(step: Step, values: list[Any], root: Any, budget: Budget) -> list[Any]:
    kind, arg = step
    if kind == "union":  # each member over every value, as kubectl: all names, then all phases
        found: list[Any] = []
        for member in arg:
            budget.take(len(values))  # the member's input: a union's growth is paid as it goes
            found.extend(_apply(member, values, root, budget))
        return found
    if kind in ("index", "slice"):
        out = _array(step, values)
        budget.take(len(out))
        return out
    out = []
    for value in values:
        before = len(out)
        if kind == "field":
            if isinstance(value, dict) and arg in value:
                out.append(value[arg])
        elif kind == "current":
            out.append(value)
        elif kind == "wildcard":
            out.extend(_children(value))
        elif kind == "recursive":
            out.extend(_apply(arg, list(_descend(value, budget)), root, budget))
        elif kind == "filter":
            out.extend(v for v in _children(value) if _keep(arg, v, root, budget))
        elif kind == "path":
            out.extend(evaluate(arg, root, value, budget))
        budget.take(len(out) - before)
    return out


def _array(step: Step, values: list[Any]) -> list[Any]:
    """`[i]` and `[start:end:step]` exactly as client-go's evalArray: negative bounds count
    from the end once, anything still outside the list is an error (never clamped), the step
    must be positive, and a selection of no elements ends the step with what it has so far."""
    if step.kind == "index":
        begin, end, stride, derived = step.arg, step.arg + 1, None, True
    else:
        begin, end, stride = step.arg
        derived = False
    out: list[Any] = []
    for value in values:
        if value is None:
            continue
        if not isinstance(value, list):
            raise TemplateEvaluationError(f"jsonpath: {_kind(value)} is not an array or slice")
        length = len(value)
        first = 0 if begin is None else begin
        first += length if first < 0 else 0
        last = length if end is None else end
        if last < 0 or (last == 0 and derived):
            last += length
        if first == last:
            return out  # client-go: "if you're requesting zero elements, allow it through"
        if not 0 <= first < length:
            raise TemplateEvaluationError(
                f"jsonpath: array index out of bounds: index {first}, length {length}")
        if not 0 <= last <= length:
            raise TemplateEvaluationError(
                f"jsonpath: array index out of bounds: index {last - 1}, length {length}")
        if first > last:
            raise TemplateEvaluationError(
                f"jsonpath: starting index {first} is greater than ending index {last}")
        if stride is not None and stride <= 0:
            raise TemplateEvaluationError("jsonpath: slice step must be > 0")
        out.extend(value[first:last:stride])
    return out


def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, list) else []


def _descend(value: Any, budget: Budget) -> Iterator[Any]:
    """Every object and list at or under `value`, parents first (as client-go's `..`);
    iterative, each one paid for."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict | list):
            budget.take(1)
            yield item
            stack.extend(reversed(_children(item)))


def _keep(flt: Filter, item: Any, root: Any, budget: Budget) -> bool:
    left = evaluate(flt.left, root, item, budget)
    if flt.op is None:
        return bool(left)
    right = evaluate(flt.right, root, item, budget) if isinstance(flt.right, Path) \
        else [flt.right]
    budget.take(len(left) * len(right))  # comparisons cost as values do
    return any(_compare(a, flt.op, b, flt) for a in left for b in right)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "object" if isinstance(value, dict) else "array"


def _compare(a: Any, op: str, b: Any, flt: Filter) -> bool:
    """As kubectl (Go's text/template comparisons): strings with strings, numbers with
    numbers, booleans and nulls only for equality; any other pair is an error, never a silent
    "no match" (a label's value is a string: compare it with "2", not 2)."""
    kinds = (_kind(a), _kind(b))
    if kinds[0] != kinds[1] or kinds[0] in ("object", "array") or \
            (op not in ("==", "!=") and kinds[0] in ("boolean", "null")):
        raise TemplateError(f"jsonpath filter {_shown(flt.source)}: cannot compare {kinds[0]} "
                            f"{_value(a)} {op} {kinds[1]} {_value(b)}: incompatible types, as "
                            "kubectl says (quote the value to compare strings)")
    return {"==": a == b, "!=": a != b, "<": a < b, ">": a > b, "<=": a <= b,
            ">=": a >= b}[op]


def _value(value: Any) -> str:
    shown = text_of(value) if not isinstance(value, str) else repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False)
"""json.dumps with these options, made once: dumps makes an encoder per call, which was most
of a nested range's time before its budget stopped it."""


def text_of(value: Any) -> str:
    """A value as kubectl prints it: text for scalars, compact JSON for objects and lists."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return _JSON.encode(value)
    return str(value)


def render(nodes: tuple[Node, ...], root: Any, current: Any | None = None, *,
           escape: Callable[[str], str] = str, budget: Budget | None = None) -> str:
    """The template's text; `escape` is applied to every value from the data (never to the
    template's own literals, so `{'\\t'}` stays a tab). Nested ranges multiply: every item
    and every value counts against one Budget for the whole render."""
    budget = budget or Budget()
    here = root if current is None else current
    out: list[str] = []
    for node in nodes:
        budget.take(1)
        if isinstance(node, Text):
            out.append(node.text)
            budget.wrote(len(node.text))
        elif isinstance(node, Action):
            out.append(" ".join(escape(text_of(v)) for v in evaluate(node.path, root, here,
                                                                       budget)))
            budget.wrote(len(out[-1]))
        else:
            for item in evaluate(node.path, root, here, budget):
                out.append(render(node.body, root, item, escape=escape, budget=budget))
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
