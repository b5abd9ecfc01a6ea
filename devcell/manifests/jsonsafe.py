"""A strict JSON reader that remembers where every value came from, for `.json` manifests.

A `.json` file is JSON (RFC 8259), not YAML: a trailing comma, a comment, a single-quoted
string, NaN or a second top-level value is a syntax error with line and column, as any JSON
tool says. It yields the same ParsedDocument as the YAML reader (positions of values and
keys, duplicate keys as problems), so validation reads both alike. Nesting is bounded before
anything recursive sees it, as in the YAML reader.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from json import decoder, scanner
from typing import Any

from devcell.manifests.model import Path
from devcell.manifests.yamlsafe import MAX_DEPTH, ParsedDocument, YamlProblem, YamlSyntaxError

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = scanner.NUMBER_RE
_LITERALS = (("true", True), ("false", False), ("null", None))
_scanstring: Callable[[str, int, bool], tuple[str, int]] = vars(decoder)["scanstring"]
"""json's own (C) string scanner, strict: control characters inside a string are refused."""


class _Reader:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.max_depth = max_depth
        self.lines = [m.end() for m in re.finditer("\n", text)]
        self.doc = ParsedDocument(data=None, line=1)

    def where(self, index: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.lines, index)
        start = self.lines[line - 1] if line else 0
        return line + 1, index - start + 1

    def fail(self, message: str, index: int, path: Path = ()) -> YamlSyntaxError:
        line, column = self.where(index)
        return YamlSyntaxError(f"JSON syntax error: {message}", line, column, path=path,
                               data=self.doc.data)

    def skip(self, index: int) -> int:
        match = _WS.match(self.text, index)
        assert match is not None
        return match.end()

    def value(self, index: int, path: Path, depth: int) -> tuple[Any, int]:
        """The value starting at `index` (whitespace skipped) and the index after it."""
        index = self.skip(index)
        self.doc.positions[path] = self.where(index)
        char = self.text[index:index + 1]
        if char in ("{", "["):
            if depth + 1 > self.max_depth:
                raise self.fail(f"nesting deeper than {self.max_depth} levels is not allowed",
                                index, path)
            if char == "{":
                return self.mapping(index + 1, path, depth + 1)
            return self.sequence(index + 1, path, depth + 1)
        if char == '"':
            return self.string(index, path)
        number = _NUMBER.match(self.text, index)
        if number is not None:
            integer, fraction, exponent = number.groups()
            if fraction or exponent:
                return float(integer + (fraction or "") + (exponent or "")), number.end()
            return int(integer), number.end()
        for word, literal in _LITERALS:
            if self.text.startswith(word, index):
                return literal, index + len(word)
        if not char:
            raise self.fail("expected a value at the end of the file", index, path)
        raise self.fail(f"expected a value, found {char!r}", index, path)

    def string(self, index: int, path: Path) -> tuple[str, int]:
        try:
            return _scanstring(self.text, index + 1, True)
        except decoder.JSONDecodeError as exc:
            raise self.fail(exc.msg.lower(), exc.pos, path) from None

    def mapping(self, index: int, path: Path, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        if path == ():
            self.doc.data = out
        first: dict[str, int] = {}
        index = self.skip(index)
        if self.text.startswith("}", index):
            return out, index + 1
        while True:
            if not self.text.startswith('"', index):
                raise self.fail("expected a key in double quotes", index, path)
            key_at = self.where(index)
            key, index = self.string(index, path)
            index = self.skip(index)
            if not self.text.startswith(":", index):
                raise self.fail(f'expected ":" after the key "{key}"', index, path + (key,))
            duplicate = key in first
            if not duplicate:
                self.doc.key_positions[path + (key,)] = key_at
            # A duplicate's value is read (it must be JSON) but positioned apart, so the
            # first value's positions stay the ones messages point at.
            at = path + (key, "\x00duplicate") if duplicate else path + (key,)
            value, index = self.value(index + 1, at, depth)
            if duplicate:
                self.doc.problems.append(YamlProblem(
                    f'duplicate key "{key}" (first at line {first[key]})', *key_at,
                    path=path + (key,)))
            else:
                first[key] = key_at[0]
                out[key] = value
            index = self.skip(index)
            if self.text.startswith("}", index):
                return out, index + 1
            if not self.text.startswith(",", index):
                raise self.fail('expected "," or "}"', index, path)
            comma = index
            index = self.skip(index + 1)
            if self.text.startswith("}", index):
                raise self.fail("trailing comma is not allowed", comma, path)

    def sequence(self, index: int, path: Path, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        if path == ():
            self.doc.data = out
        index = self.skip(index)
        if self.text.startswith("]", index):
            return out, index + 1
        while True:
            value, index = self.value(index, path + (len(out),), depth)
            out.append(value)
            index = self.skip(index)
            if self.text.startswith("]", index):
                return out, index + 1
            if not self.text.startswith(",", index):
                raise self.fail('expected "," or "]"', index, path)
            comma = index
            index = self.skip(index + 1)
            if self.text.startswith("]", index):
                raise self.fail("trailing comma is not allowed", comma, path)


def parse_document(text: str, *, max_depth: int = MAX_DEPTH) -> list[ParsedDocument]:
    """The one document of a JSON file (none for a file of only whitespace).

    Raises YamlSyntaxError (the manifests' syntax error, whatever the format) for text that
    is not JSON."""
    reader = _Reader(text, max_depth)
    start = reader.skip(1 if text.startswith("\ufeff") else 0)
    if start == len(text):
        return []
    reader.doc.line = reader.where(start)[0]
    data, end = reader.value(start, (), 0)
    reader.doc.data = data
    end = reader.skip(end)
    if end != len(text):
        raise reader.fail("unexpected text after the document (a JSON file holds one value)",
                          end)
    return [reader.doc]
