"""Every file in examples/ is applied by a test, so the examples never rot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.backends.engine import require_engine
from tests.conftest import EXAMPLES, Cli

EXAMPLE_FILES = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))


def test_there_are_examples() -> None:
    assert len(EXAMPLE_FILES) >= 3


def _needs_engine(path: Path) -> bool:
    return "backend: container" in path.read_text()


def test_whole_examples_directory_converges(cli: Cli) -> None:
    if any(_needs_engine(p) for p in EXAMPLE_FILES):
        require_engine()
    applied = cli("apply", "-f", "examples/")
    assert applied.returncode == 0, applied.stderr
    assert "cell/api created" in applied.stdout
    cells = json.loads(cli("get", "cells", "-o", "json").stdout)
    assert cells["kind"] == "List"
    by_name = {c["metadata"]["name"]: c for c in cells["items"]}
    for name, item in by_name.items():
        desired = item["spec"]["state"]
        assert item["status"]["phase"] == desired, name
        assert item["status"]["observedGeneration"] == item["metadata"]["generation"]
    assert by_name["experiment"]["status"]["lineage"]["forkedFrom"]["snapshot"] == "api-before-change"
    snaps = cli("get", "snapshots")
    assert "api-before-change" in snaps.stdout and "metadata" in snaps.stdout
    table = cli("get", "cells").stdout
    assert "Running" in table


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda p: p.name)
def test_each_example_applies(cli: Cli, example: Path) -> None:
    """Each file applies on its own, given the files it references (applied first)."""
    if _needs_engine(example):
        require_engine()
    needs = {"experiment.yaml": ["api.yaml"]}.get(example.name, [])
    for dep in needs:
        assert cli("apply", "-f", str(EXAMPLES / dep)).returncode == 0
    result = cli("apply", "-f", str(example))
    assert result.returncode == 0, result.stderr
    again = cli("apply", "-f", str(example))
    assert again.returncode == 0
    assert again.stdout.strip() and all(line.endswith("unchanged")
                                        for line in again.stdout.splitlines())
