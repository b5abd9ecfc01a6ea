"""docs/manifests.md lists exactly the fields of the shipped schemas, with their types and defaults."""

from __future__ import annotations

import json
import re

import pytest

from devcell.schemas import fields
from tests.conftest import REPO

DOC = (REPO / "docs" / "manifests.md").read_text()


def _documented(kind: str) -> dict[str, tuple[str, str]]:
    section = DOC.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \| (.*?) \| .* \|$", section, re.M)
    return {path: (typ, default) for path, typ, default in rows}


@pytest.mark.parametrize("kind", ["Cell", "Snapshot"])
def test_reference_matches_schema(kind: str) -> None:
    expected = {}
    for path, typ, default, _ in fields.walk(kind):
        shown = "" if default is None else "`" + (default if isinstance(default, str)
                                                  else json.dumps(default)) + "`"
        expected[path] = (typ, shown)
    documented = _documented(kind)
    missing = sorted(set(expected) - set(documented))
    stale = sorted(set(documented) - set(expected))
    assert not missing, f"fields missing from docs/manifests.md: {missing}"
    assert not stale, f"docs/manifests.md documents fields the schema lacks: {stale}"
    for path, (typ, default) in expected.items():
        assert documented[path] == (typ, default), path


def test_every_field_has_a_description() -> None:
    for kind in ("Cell", "Snapshot"):
        for path, _, _, description in fields.walk(kind):
            if path not in ("metadata", "spec"):
                assert description, f"{kind} {path} has no description in its schema"
