"""Compose's variable interpolation, as `docker compose` fills in a compose file's values:
`$VAR`, `${VAR}`, `${VAR:-default}` / `${VAR-default}` (with `:`, an empty value counts as
unset), `${VAR:?message}` / `${VAR?message}` (required), `${VAR:+other}` / `${VAR+other}`,
`$$` for a literal `$`; defaults may hold variables themselves (`${A:-${B}}`).

Compose fills in an unset variable as empty with a warning; an import that writes a manifest
to keep would bake that empty value in silently, so an unset variable without a default is
reported by name instead, and the value refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NESTING = 8
MAX_VALUE = 1 << 20
"""Characters of one value once filled in: `$X$X$X...` with a large X (a .env file lies in
the project folder, which a cell may write) must not grow without bound."""


class _TooLarge(Exception):
    """A value past its size bound (said once, by the caller, naming the line)."""


def fill(text: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """(`text` with its variables filled in, why each one that could not be was not)."""
    problems: list[str] = []
    try:
        out = _fill(text, environ, problems, 0)
    except _TooLarge:
        return "", [f"the value grows past {MAX_VALUE >> 20} MiB once its variables are "
                    "filled in"]
    return out, list(dict.fromkeys(problems))


def _unset(name: str) -> str:
    return (f"{name} is not set (in the environment or .env) and has no default; give it one "
            "with ${" + name + ":-default}")


def _fill(text: str, environ: Mapping[str, str], problems: list[str], depth: int) -> str:
    out = _Bounded()
    i = 0
    while i < len(text):
        sign = text.find("$", i)
        if sign < 0:
            out.append(text[i:])
            break
        out.append(text[i:sign])
        after = text[sign + 1:sign + 2]
        if after == "$":
            out.append("$")
            i = sign + 2
            continue
        if after == "{":
            end = _closing(text, sign + 2)
            if end < 0:
                problems.append(f"${{ at {text[sign:sign + 20]!r} is not closed")
                return ""
            out.append(_braced(text[sign + 2:end], environ, problems, depth))
            i = end + 1
            continue
        name = _NAME.match(text, sign + 1)
        if name is None:
            out.append("$")  # a $ before anything else stays, as in compose
            i = sign + 1
            continue
        if name.group() in environ:
            out.append(environ[name.group()])
        else:
            problems.append(_unset(name.group()))
        i = name.end()
    return out.text()


class _Bounded:
    """Pieces of a value, refused (_TooLarge) past MAX_VALUE characters."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def append(self, part: str) -> None:
        self.size += len(part)
        if self.size > MAX_VALUE:
            raise _TooLarge
        self.parts.append(part)

    def text(self) -> str:
        return "".join(self.parts)


def _closing(text: str, start: int) -> int:
    """The index of the `}` closing a `${` whose inside starts at `start` (-1: none)."""
    depth = 1
    i = start
    while i < len(text):
        if text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _braced(inside: str, environ: Mapping[str, str], problems: list[str], depth: int) -> str:
    name = _NAME.match(inside)
    if name is None or depth >= MAX_NESTING:
        problems.append(f"${{{inside}}} is not a variable compose reads")
        return ""
    rest = inside[name.end():]
    value = environ.get(name.group())
    if not rest:
        if value is None:
            problems.append(_unset(name.group()))
            return ""
        return value
    colon = rest.startswith(":")
    op, arg = rest[int(colon):int(colon) + 1], rest[int(colon) + 1:]
    if op not in ("-", "?", "+"):
        problems.append(f"${{{inside}}} is not a variable compose reads")
        return ""
    empty = value is None or (colon and value == "")
    if op == "-":
        return _fill(arg, environ, problems, depth + 1) if empty else str(value)
    if op == "?":
        if empty:
            message = _fill(arg, environ, [], depth + 1)
            problems.append(f"{name.group()} is required: {message}" if message
                            else f"{name.group()} is required and not set")
            return ""
        return str(value)
    return "" if empty else _fill(arg, environ, problems, depth + 1)
