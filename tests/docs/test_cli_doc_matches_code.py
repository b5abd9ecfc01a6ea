"""docs/cli.md and the code name the same things (issue 31, item 13): every flag of every
command is documented in its command's section, every `devcell ...` command line the docs
show names a command, verb and flags the parser has, and the backends the docs name are the
registry's, each shown in `devcell version`'s example (the docs once called the vm backend
unavailable after it had shipped). Everything is derived from the command table and the
parser, so a new command, flag or backend is checked without editing this test."""

from __future__ import annotations

import argparse
import re

import pytest

from devcell import backend_registry
from devcell.cli import commands
from devcell.cli.parser import build_parser
from tests.conftest import REPO

DOC = (REPO / "docs" / "cli.md").read_text()
GLOBAL = {"-h", "--help", "--state-dir", "-v", "--verbose", "--run-store", "--server",
          "--context", "--token-file", "--certificate-authority"}
"""Options every command takes, documented once at the top of docs/cli.md."""
BACKENDS = {entry.name for entry in backend_registry.BACKENDS}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


TOP = _subparsers(build_parser())


def _parser(words: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = TOP[words[0]]
    return _subparsers(parser)[words[1]] if len(words) == 2 else parser


def _sections() -> dict[str, str]:
    """`## TITLE` -> its text; a title may name several commands (`ssh, ssh-config`)."""
    parts = re.split(r"^## ", DOC, flags=re.M)[1:]
    return {title.strip(): body for title, _, body in (p.partition("\n") for p in parts)}


def _section_of(command: str) -> str:
    found = [body for title, body in _sections().items()
             if command in re.split(r"[ ,]+", title)]
    assert found, f"docs/cli.md has no section for {command}"
    return found[0]


def _mentions(text: str, option: str) -> bool:
    return re.search(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])", text) is not None


@pytest.mark.parametrize("entry", commands.TABLE, ids=lambda e: " ".join(e.words))
def test_every_flag_is_documented_in_its_commands_section(entry: commands.Command) -> None:
    section = _section_of(entry.words[0])
    missing = []
    for action in _parser(entry.words)._actions:
        options = [o for o in action.option_strings if o not in GLOBAL]
        if options and not any(_mentions(section, o) for o in options):
            missing.append("/".join(options))
    assert not missing, (f"docs/cli.md's section on `{' '.join(entry.words)}` does not "
                         f"mention {missing}")


def _command_lines() -> list[str]:
    spans = re.findall(r"`(devcell [^`\n]+)`", DOC)
    shown = re.findall(r"^\$? ?(devcell [^\n`]+)$", DOC, flags=re.M)
    return [re.split(r"\s(?:\||;|&&|>|<|2>)", line)[0] for line in spans + shown]


def _problems(line: str) -> list[str]:
    words = line.split()[1:]
    while words and words[0] in GLOBAL | {"--version"}:
        words = words[2:] if words[0] in ("--state-dir", "--run-store", "--server", "--context",
                                          "--token-file", "--certificate-authority") \
            else words[1:]
    if not words or words[0] == "__complete":  # `devcell --version`; the hidden completer
        return []
    if words[0] not in TOP:
        return [f"no command {words[0]!r}"]
    parser, rest = TOP[words[0]], words[1:]
    if _subparsers(parser):
        if not rest or not rest[0][:1].islower():  # `devcell snapshot VERB`
            return []
        if rest[0] not in _subparsers(parser):
            return [f"no verb {words[0]} {rest[0]!r}"]
        parser, rest = _subparsers(parser)[rest[0]], rest[1:]
    known = set(GLOBAL)
    for action in parser._actions:
        known.update(action.option_strings)
    problems = []
    for word in rest:
        if word == "--":  # what follows is the cell's command (exec, ssh)
            break
        flag = re.split(r"[=\[]", word)[0].rstrip(",.;:)")
        if not re.match(r"--?[A-Za-z]", flag) or flag in known:
            continue
        if re.fullmatch(r"-[A-Za-z]{2,}", flag) and all(f"-{c}" in known for c in flag[1:]):
            continue  # -it
        problems.append(f"no flag {flag}")
    return problems


def test_every_command_line_in_the_docs_is_one_the_parser_has() -> None:
    lines = _command_lines()
    assert len(lines) > 50
    wrong = {line: problems for line in lines if (problems := _problems(line))}
    assert not wrong, f"docs/cli.md shows command lines the code does not have: {wrong}"


def test_the_docs_name_only_the_backends_there_are() -> None:
    named = re.findall(r"the (\w+) backend|`(\w+)` backend|backend `(\w+)`"
                       r"|spec\.backend\s*(?:!=|==|=|:)\s*(\w+)", DOC)
    words = {w for groups in named for w in groups if w}
    assert words - BACKENDS == set(), f"docs/cli.md names backends there are not: {words}"


def test_the_version_example_shows_every_backend_available() -> None:
    section = _section_of("version")
    shown = dict(re.findall(r"^  (\w+): (available|unavailable)", section, flags=re.M))
    assert set(shown) == BACKENDS, f"`devcell version`'s example shows {sorted(shown)}"
    assert all(state == "available" for state in shown.values()), shown


def test_a_made_up_flag_verb_or_command_is_caught() -> None:
    assert _problems("devcell get cells --no-such-flag") == ["no flag --no-such-flag"]
    assert _problems("devcell snapshot delete x") == ["no verb snapshot 'delete'"]
    assert _problems("devcell frobnicate") == ["no command 'frobnicate'"]
    assert _problems("devcell exec -it api -- sh -c 'exit 3'") == []
