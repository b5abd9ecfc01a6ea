"""Label selectors exactly as Kubernetes parses and matches them (`kubectl get -l ...`).

One parser for every verb that takes `-l` (get, describe, delete, wait, apply --prune), so a
selector means the same thing everywhere. The grammar, the lexer's whitespace and special
characters, the operators (`=`, `==`, `!=`, `in`, `notin`, `KEY`, `!KEY`, and the integer
`>` `<`) and the validation of keys (a qualified name: optional DNS-subdomain prefix and `/`,
a name of at most 63 characters) and values (at most 63, may be empty) follow
k8s.io/apimachinery/pkg/labels/selector.go. A selector that Kubernetes refuses is refused here
too, as a usage error that names the character position: a mistyped selector must never read
as "no objects match".
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import NamedTuple

from devcell.errors import SelectorError

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_INTEGER = re.compile(r"[+-]?[0-9]+")
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_PUNCTUATION = frozenset({",", "(", ")", "!"})


class Operator(enum.StrEnum):
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = ">"
    LESS_THAN = "<"


_SYMBOLS = {"=": Operator.EQUALS, "==": Operator.DOUBLE_EQUALS, "!=": Operator.NOT_EQUALS,
            ">": Operator.GREATER_THAN, "<": Operator.LESS_THAN}
_WORDS = {"in": Operator.IN, "notin": Operator.NOT_IN}


class Requirement(NamedTuple):
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.IN):
            return self.key in labels and labels[self.key] in self.values
        if op in (Operator.NOT_EQUALS, Operator.NOT_IN):
            return self.key not in labels or labels[self.key] not in self.values
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if value is None or not _INTEGER.fullmatch(value):
            return False
        bound = int(self.values[0])
        return int(value) > bound if op is Operator.GREATER_THAN else int(value) < bound

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (Operator.IN, Operator.NOT_IN):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


class Selector(NamedTuple):
    """Requirements ANDed together, sorted by key as Kubernetes does. NamedTuples rather than
    dataclasses here: `get -l` should not pay for importing `inspect`."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def __str__(self) -> str:
        return ",".join(map(str, self.requirements))


EVERYTHING = Selector()


class _Token(NamedTuple):
    kind: str  # "id", "op" (an Operator's text), ",", "(", ")", "!", "end", "error"
    text: str
    pos: int  # 1-based character position in the selector


def _lex(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i = 0
    while True:
        while i < len(text) and text[i] in _WHITESPACE:
            i += 1
        if i == len(text):
            tokens.append(_Token("end", "", i + 1))
            return tokens
        start = i
        if text[i] in _SPECIAL:
            i, token = _lex_symbol(text, i)
        else:
            while i < len(text) and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
                i += 1
            word = text[start:i]
            token = _Token("word" if word in _WORDS else "id", word, start + 1)
        tokens.append(token)


def _lex_symbol(text: str, i: int) -> tuple[int, _Token]:
    """The longest run of special characters that is a token (`!=` rather than `!`)."""
    start, best, end = i, "", i
    while i < len(text) and text[i] in _SPECIAL:
        candidate = text[start:i + 1]
        if candidate in _SYMBOLS or candidate in _PUNCTUATION:
            best, end = candidate, i + 1
        elif best:
            break
        i += 1
    if not best:
        return i, _Token("error", text[start:i], start + 1)
    kind = "op" if best in _SYMBOLS else best
    return end, _Token(kind, best, start + 1)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _lex(text)
        self.at = 0

    def fail(self, token: _Token, expected: str) -> SelectorError:
        found = "end of string" if token.kind == "end" else repr(token.text)
        return SelectorError(f"invalid label selector {self.text!r}: at position {token.pos}: "
                             f"found {found}, expected {expected}")

    def peek(self, *, values: bool = False) -> _Token:
        token = self.tokens[self.at]
        return _Token("id", token.text, token.pos) if values and token.kind == "word" else token

    def take(self, *, values: bool = False) -> _Token:
        token = self.peek(values=values)
        self.at += 1
        return token

    def parse(self) -> Selector:
        found: list[Requirement] = []
        while True:
            token = self.peek(values=True)
            if token.kind == "end":
                break
            if token.kind not in ("id", "!"):
                raise self.fail(token, "!, a key, or end of string")
            found.append(self.requirement())
            after = self.take(values=True)
            if after.kind == "end":
                break
            if after.kind != ",":
                raise self.fail(after, "',' or end of string")
            if self.peek(values=True).kind not in ("id", "!"):
                raise self.fail(self.peek(values=True), "a key or '!' after ','")
        return Selector(tuple(sorted(found, key=lambda r: r.key)))

    def requirement(self) -> Requirement:
        negated = self.peek().kind == "!"
        if negated:
            self.take()
        key_token = self.take(values=True)
        if key_token.kind != "id":
            raise self.fail(key_token, "a key")
        key = self._key(key_token)
        if self.peek(values=True).kind in ("end", ","):
            return Requirement(key, Operator.DOES_NOT_EXIST if negated else Operator.EXISTS)
        op_token = self.take()
        if negated or op_token.kind not in ("op", "word"):
            raise self.fail(op_token, "one of " + ", ".join(
                ["in", "notin", "=", "==", "!=", ">", "<"]))
        operator = _SYMBOLS.get(op_token.text) or _WORDS[op_token.text]
        if operator in (Operator.IN, Operator.NOT_IN):
            values = self._set()
        else:
            values = (self._exact(),)
        return self._checked(key, operator, values, op_token)

    def _key(self, token: _Token) -> str:
        problem = qualified_name_problem(token.text)
        if problem:
            raise SelectorError(f"invalid label selector {self.text!r}: at position {token.pos}: "
                                f"key {token.text!r}: {problem}")
        return token.text

    def _exact(self) -> str:
        if self.peek(values=True).kind in ("end", ","):
            return ""
        token = self.take(values=True)
        if token.kind != "id":
            raise self.fail(token, "a value")
        self._value(token)
        return token.text

    def _set(self) -> tuple[str, ...]:
        opening = self.take(values=True)
        if opening.kind != "(":
            raise self.fail(opening, "'('")
        values: list[str] = []
        expect_value = True
        while True:
            token = self.take(values=True)
            if token.kind == ")":
                if expect_value:
                    values.append("")
                break
            if token.kind == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            elif token.kind == "id" and expect_value:
                self._value(token)
                values.append(token.text)
                expect_value = False
            else:
                raise self.fail(token, "',' or ')'" if not expect_value else "a value, ',' or ')'")
        return tuple(sorted(set(values)))

    def _value(self, token: _Token) -> None:
        problem = label_value_problem(token.text)
        if problem:
            raise SelectorError(f"invalid label selector {self.text!r}: at position {token.pos}: "
                                f"value {token.text!r}: {problem}")

    def _checked(self, key: str, operator: Operator, values: tuple[str, ...],
                 at: _Token) -> Requirement:
        if operator in (Operator.GREATER_THAN, Operator.LESS_THAN):
            if not _INTEGER.fullmatch(values[0]) or not -2**63 <= int(values[0]) < 2**63:
                raise SelectorError(
                    f"invalid label selector {self.text!r}: at position {at.pos}: "
                    f"{operator} needs an integer value, not {values[0]!r}")
        return Requirement(key, operator, values)


def parse(text: str | None) -> Selector:
    """The selector `text` means (everything for None or ""); SelectorError otherwise."""
    if not text:
        return EVERYTHING
    return _Parser(text).parse()


def qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes qualified name ([prefix/]name), or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return "a qualified name has at most one '/'"
    if slash and not prefix:
        return "the prefix before '/' must be non-empty"
    if not name:
        return "the name part must be non-empty"
    if len(name) > 63:
        return "the name part must be at most 63 characters"
    if not _NAME.fullmatch(name):
        return ("the name part must consist of alphanumeric characters, '-', '_' or '.', and "
                "start and end with an alphanumeric character")
    if slash:
        if len(prefix) > 253:
            return "the prefix must be at most 253 characters"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return ("the prefix must be a DNS subdomain: lower case alphanumeric characters, "
                    "'-' or '.', starting and ending with an alphanumeric character")
    return None


def label_value_problem(value: str) -> str | None:
    """Why `value` is not a valid label value (empty is valid), or None."""
    if len(value) > 63:
        return "must be at most 63 characters"
    if value and not _NAME.fullmatch(value):
        return ("must consist of alphanumeric characters, '-', '_' or '.', and start and end "
                "with an alphanumeric character")
    return None
