"""The answers `devcell __complete` gives, in-process: escaped for the shell that asks."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from devcell.cli import completion
from devcell.store import completion as store_completion

HOSTILE = ["ok", "a b", "$(touch pwned)", "x\x1b[31m", "line\nbreak"]


def _answer(shell: str, monkeypatch: pytest.MonkeyPatch, *words: str) -> list[str]:
    monkeypatch.setattr(store_completion, "names", lambda state_dir, what, prefix="": HOSTILE)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert completion.run_hidden([shell, "--", *words]) == 0
    return out.getvalue().splitlines()


def test_bash_gets_names_quoted_and_never_one_it_could_not_type(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCELL_HOME", str(tmp_path))
    answer = _answer("bash", monkeypatch, "get", "cells", "")
    assert answer == [":words", "ok", "'a b'", "'$(touch pwned)'"]


def test_zsh_and_fish_get_names_raw_as_their_completion_quotes_itself(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCELL_HOME", str(tmp_path))
    for shell in ("zsh", "fish"):
        assert _answer(shell, monkeypatch, "logs", "") == [
            ":words", "ok", "a b", "$(touch pwned)"]


def test_a_line_the_parser_would_refuse_answers_nothing_and_no_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert _answer("bash", monkeypatch, "frobnicate", "x", "") == [":words"]
    assert _answer("bash", monkeypatch, "get", "--output") == [":words", "--output"]
    assert _answer("bash", monkeypatch, "exec", "box", "--", "l") == [":files"]


def test_several_names_each_complete_when_the_parser_takes_several(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`get cells a b` (several names, kubectl-select): the parser is walked, not copied, so
    a NAME... positional completes every name after the kind."""
    import argparse

    from devcell.cli import arguments, parser

    def several(only: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog="devcell")
        sub = parser.add_subparsers(dest="command")
        get = sub.add_parser("get")
        get.add_argument("kind", type=arguments.kind(arguments.GET_KINDS))
        get.add_argument("names", nargs="*")
        return parser

    monkeypatch.setenv("DEVCELL_HOME", str(tmp_path))
    monkeypatch.setattr(parser, "build_parser", several)
    monkeypatch.setattr(store_completion, "names", lambda state_dir, what, prefix="": [what])
    assert completion.candidates(["get", "cells", "a", "b"], "") == (":words", ["cells"])
    assert completion.candidates(["get", "snap"], "") == (":words", ["snapshots"])
