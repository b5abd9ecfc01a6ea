"""Every command and sub-verb of the CLI is in docs/cli.md (as sqlite-utils tests its docs)."""

from __future__ import annotations

import argparse

from devcell.cli.parser import build_parser
from tests.conftest import REPO


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(f"{prefix}{name}")
                found.extend(_commands(sub, f"{prefix}{name} "))
    return found


def test_every_command_is_documented() -> None:
    doc = (REPO / "docs" / "cli.md").read_text()
    missing = [c for c in _commands(build_parser()) if f"devcell {c}" not in doc
               and f"## {c}" not in doc]
    assert not missing, f"commands missing from docs/cli.md: {missing}"
