"""Escaping for terminals: unambiguous, so no two values print the same."""

from __future__ import annotations

import pytest

from devcell import names


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain", "plain"),
    ("a\nb\tc", "a\nb\tc"),  # line breaks and tabs are layout, kept
    ("a\\nb", "a\\\\nb"),  # a backslash is escaped: it cannot pass for an escape
    ("\x1b[2J", "\\x1b[2J"),
    ("\r\x00\x7f\x9b", "\\r\\x00\\x7f\\x9b"),
    ("abc\u202edef\u2066", "abc\\u202edef\\u2066"),
])
def test_terminal_text_escapes_controls_bidi_and_backslash(raw: str, shown: str) -> None:
    assert names.terminal_text(raw) == shown


def test_terminal_text_is_unambiguous() -> None:
    values = ["a\nb", "a\\nb", "a\\\nb", "\x1b", "\\x1b", "\\\\x1b"]
    assert len({names.terminal_text(v) for v in values}) == len(values)


def test_printable_text_keeps_lines_and_tabs_and_escaped_text_as_it_is() -> None:
    """What DevCell escaped already passes unchanged (the CLI escapes a server's describe and
    log text again: a genuine server's bytes print the same, a hostile one's escapes do not
    act on the terminal)."""
    raw = "a\tb\n\x1b[2Jc\r\u202ed\n"
    once = names.printable_text(raw)
    assert once == "a\tb\n\\x1b[2Jc\\r\\u202ed\n"
    assert names.printable_text(once) == once
