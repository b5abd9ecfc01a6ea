"""Field selectors as Kubernetes parses them (`kubectl get --field-selector status.phase=Running`).

Terms are `FIELD=VALUE`, `FIELD==VALUE` or `FIELD!=VALUE`, joined by commas (AND); `\\,`,
`\\=` and `\\\\` escape those characters inside a value (k8s.io/apimachinery/pkg/fields).
Which fields may be selected on is the caller's list: a field that is not on it is refused,
naming the ones that are, never read as "nothing matches".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from devcell.errors import SelectorError

_OPERATORS = ("!=", "==", "=")


class FieldRequirement(NamedTuple):
    field: str
    operator: str  # "=" (also for "==") or "!="
    value: str

    def matches(self, actual: str | None) -> bool:
        equal = actual == self.value
        return equal if self.operator == "=" else not equal


def _split(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` that is not escaped by a backslash."""
    parts, current, escaped = [], [], False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if escaped:
        current.append("\\")
    parts.append("".join(current))
    return parts


def _unescape(text: str, whole: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            nxt = text[i + 1:i + 2]
            if nxt not in ("\\", ",", "="):
                raise SelectorError(f"invalid field selector {whole!r}: "
                                         f"invalid escape sequence {text[i:i + 2]!r}")
            out.append(nxt)
            i += 2
        elif text[i] == "=":  # as Kubernetes: `name=a=b` is a mistake, not a value "a=b"
            raise SelectorError(f"invalid field selector {whole!r}: unescaped '=' in a value "
                                "(write \\=)")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _term(term: str, whole: str) -> FieldRequirement:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in _OPERATORS:
            if term.startswith(op, i):
                field = _unescape(term[:i], whole)
                value = _unescape(term[i + len(op):], whole)
                return FieldRequirement(field, "!=" if op == "!=" else "=", value)
        i += 1
    raise SelectorError(f"invalid field selector {whole!r}: {term!r} has no operator "
                             "(use FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE)")


def parse(text: str | None, supported: Iterable[str]) -> tuple[FieldRequirement, ...]:
    """The requirements in `text` (none for None or ""), each on a field in `supported`."""
    if not text:
        return ()
    allowed = sorted(supported)
    found = tuple(_term(t, text) for t in _split(text, ",") if t)
    for req in found:
        if req.field not in allowed:
            raise SelectorError(
                f"field selector {text!r}: field {req.field!r} is not supported "
                f"(supported: {', '.join(allowed) or 'none for this kind'})")
    return found


def matches(requirements: Iterable[FieldRequirement],
            value_of: Callable[[str], str | None]) -> bool:
    return all(r.matches(value_of(r.field)) for r in requirements)


def matches_row(requirements: Iterable[FieldRequirement], row: Mapping[str, object],
                columns: Mapping[str, str]) -> bool:
    """Whether a table row matches, `columns` mapping each field to the row's column."""
    def value(field: str) -> str | None:
        got = row.get(columns[field])
        return None if got is None else str(got)
    return matches(requirements, value)
