"""`devcell df` and `get -o wide` on the fake backend (it keeps no files: every size is 0 and
every measured column <none>), in every output format, and on a state directory that does not
exist yet (nothing is created)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import Cli

MANIFEST = textwrap.dedent("""\
    apiVersion: devcell.dev/v1alpha1
    kind: Cell
    metadata: {name: api}
    spec:
      backend: fake
      workspace: {mountPath: /workspace}
    ---
    apiVersion: devcell.dev/v1alpha1
    kind: Snapshot
    metadata: {name: s1}
    spec: {cell: api}
    """)


@pytest.fixture
def applied(cli: Cli, tmp_path: Path) -> Path:
    path = tmp_path / "api.yaml"
    path.write_text(MANIFEST)
    done = cli("apply", "-f", str(path))
    assert done.returncode == 0, done.stderr
    return path


def test_df_counts_what_the_fake_backend_holds(cli: Cli, applied: Path) -> None:
    done = cli("df")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["TYPE", "TOTAL", "ACTIVE", "SIZE", "RECLAIMABLE"]
    rows = {line.split("   ")[0].strip(): line.split() for line in lines[1:]}
    assert rows["Workspaces"][1:3] == ["1", "1"] and rows["Checkpoints"][1] == "1"
    assert rows["Runtimes"][1:3] == ["1", "1"]  # the fake cell runs
    doc = json.loads(cli("df", "-v", "-o", "json").stdout)
    assert doc["totalBytes"] == doc["reclaimableBytes"] == 0
    owners = {(i["type"], i["owner"]) for i in doc["items"]}
    assert {("Workspaces", "api"), ("Checkpoints", "api"), ("Runtimes", "api")} <= owners
    assert yaml.safe_load(cli("df", "-o", "yaml").stdout) == json.loads(
        cli("df", "-o", "json").stdout)
    verbose = cli("df", "-v")
    assert "Checkpoints:" in verbose.stdout and "s1" in verbose.stdout


def test_get_wide_shows_none_for_what_the_fake_backend_cannot_measure(
        cli: Cli, applied: Path) -> None:
    cells = cli("get", "cells", "-o", "wide")
    header, row = cells.stdout.splitlines()
    for column in ("WORKSPACE", "DISK", "DIRTY", "MEMORY", "CPU"):
        assert column in header
    columns = dict(zip(header.split(), row.split(), strict=True))
    assert [columns[c] for c in ("WORKSPACE", "DISK", "DIRTY", "MEMORY", "CPU")] == ["<none>"] * 5
    assert cells.stderr == ""
    snaps = cli("get", "snapshots", "-o", "wide")
    header, row = snaps.stdout.splitlines()
    assert header.split()[-2:] == ["SIZE", "UNIQUE"] and row.split()[-2:] == ["<none>"] * 2


def test_df_of_a_state_directory_never_used_creates_nothing(cli: Cli, state_dir: Path) -> None:
    done = cli("df")
    assert done.returncode == 0, done.stderr
    assert all(line.split()[-3:] == ["0", "B", "(0%)"] for line in done.stdout.splitlines()[1:])
    assert not state_dir.exists()
