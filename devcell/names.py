"""Object names: DNS-1123 labels, so a name can never escape a directory or a label."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 63
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SCHEMA_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(?!\\n)$"
"""The same rule as the schemas write it: `(?!\\n)` because JSON Schema validators search
with Python's `re`, whose `$` also matches before a final newline ("api\\n")."""


def printable(text: str) -> str:
    """Control characters escaped (\\n, \\x00), so a hostile name cannot forge output lines.

    Every user-controlled string DevCell prints goes through here at its output edge (a
    problem's parts, table cells, describe's fields, error and log lines): an ESC sequence,
    a carriage return, a C1 control (\\x9b) or a newline forging `cell/api created` shows as
    its escape instead of acting on the terminal or the log.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def terminal_text(text: str) -> str:
    r"""Text for a terminal, escaped so that the escaping is unambiguous: a backslash shows as
    `\\`, a control character (C0 but newline and tab, ESC, DEL, C1) or a bidi override as
    its escape (`\x1b`, `\u202e`), so a real newline and the two characters `\n` print apart.
    For raw data printed on a terminal (`-o jsonpath`); into a pipe it goes raw, as kubectl's.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c in "\n\t" or (c.isprintable() and c != "\\")
                   else "\\\\" if c == "\\" else repr(c)[1:-1] for c in text)


def printable_lines(text: str) -> str:
    """Like printable, keeping the line breaks of a text made of several lines."""
    return "\n".join(printable(line) for line in text.split("\n"))


def printable_text(text: str) -> str:
    """Like printable, keeping line breaks and tabs: what DevCell printed escaped already
    (describe's text, a log's lines, api.logs.escaped) passes unchanged, and a raw control
    character from elsewhere (a hostile server's answer to the CLI) shows as its escape."""
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    return "\n".join("\t".join(printable(part) for part in line.split("\t"))
                     for line in text.split("\n"))


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid object name, or None when it is."""
    if not isinstance(name, str):
        return "expected a string"
    if "\x00" in name:
        return "must not contain a NUL character"
    if len(name) > MAX_NAME_LENGTH:
        return f"must be at most {MAX_NAME_LENGTH} characters (got {len(name)})"
    if not _NAME.fullmatch(name):
        shown = printable(name if len(name) <= 40 else name[:37] + "...")
        return (
            f'invalid name "{shown}": use lower-case letters, digits and "-", '
            "starting and ending with a letter or digit"
        )
    return None


def did_you_mean(ref: str, candidates: list[str]) -> str:
    """'; did you mean "api"?' when one of `candidates` is close to `ref` (difflib's ratio,
    as git's and kubectl's suggestions), else ''."""
    import difflib

    close = difflib.get_close_matches(ref, candidates, n=1, cutoff=0.75)
    return f'; did you mean "{close[0]}"?' if close else ""
