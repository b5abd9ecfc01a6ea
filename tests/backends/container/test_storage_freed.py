"""Deleting frees the bytes on disk (container backend, real engine, the CLI as a user runs it).

After every snapshot and cell is deleted, nothing is left under the state directory's
workspace and checkpoint folders; a fork keeps its files when its parent cell and the other
snapshots go; a snapshot deleted with a fork whose deletion waited for approval goes (with
its checkpoint) as soon as the fork is approved.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from devcell.backends.container.layout import Layout
from tests.backends.engine import IMAGE
from tests.conftest import Cli


def _cell(name: str, *, fork_of: str | None = None, write: str = "") -> str:
    source = f"\n{' ' * 12}from: {{snapshot: {fork_of}}}" if fork_of else ""
    command = f"{write}; sleep 600" if write else "sleep 600"
    return textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
          workspace:
            mountPath: /workspace{source}
          services:
            - name: main
              command: [sh, -c, "{command}"]
        """)


def _snap(name: str, cell: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Snapshot
        metadata: {{name: {name}}}
        spec: {{cell: {cell}}}
        """)


def _entries(state: Path) -> list[str]:
    layout = Layout(state)
    return sorted(str(p.relative_to(state)) for folder in (layout.volumes, layout.checkpoints)
                  for p in folder.iterdir())


@pytest.fixture
def world(engine: None, cli: Cli, tmp_path: Path) -> Path:
    docs = tmp_path / "m"
    docs.mkdir()
    base = _cell("base", write="echo base > /workspace/base.txt; head -c 300000 /dev/urandom "
                               "> /workspace/.blob; mv /workspace/.blob /workspace/blob")
    (tmp_path / "base.yaml").write_text(base)
    applied = cli("apply", "-f", str(tmp_path / "base.yaml"))
    assert applied.returncode == 0, applied.stderr
    # s1 only once the cell wrote its files (whole, by rename) and a clock tick passed: a
    # snapshot is the workspace at its freeze, and one taken mid-write would hold half
    waited = cli("exec", "base", "--", "sh", "-c",
                 "while [ ! -e /workspace/blob ]; do sleep 0.05; done; sleep 0.05")
    assert waited.returncode == 0, waited.stderr
    (docs / "a.yaml").write_text(base + "---\n" + _snap("s1", "base"))
    applied = cli("apply", "-f", str(docs / "a.yaml"))
    assert applied.returncode == 0, applied.stderr
    (docs / "b.yaml").write_text(_snap("s2", "base") + "---\n" + _cell("fork", fork_of="s1"))
    applied = cli("apply", "-f", str(docs / "b.yaml"))
    assert applied.returncode == 0, applied.stderr
    return docs


def test_deleting_everything_leaves_no_workspace_and_no_checkpoint(
        cli: Cli, state: Path, world: Path) -> None:
    assert cli("cell", "sleep", "fork").returncode == 0  # a sleep checkpoint too
    assert len([e for e in _entries(state) if e.startswith("images")]) == 3
    deleted = cli("delete", "-f", str(world), "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert _entries(state) == []


def test_a_snapshot_deleted_with_a_gated_fork_is_freed_once_the_fork_is_approved(
        cli: Cli, state: Path, world: Path) -> None:
    assert cli("exec", "fork", "--", "sh", "-c", "echo mine > /workspace/new").returncode == 0
    pair = world.parent / "pair.yaml"  # the fork and the snapshot it came from
    pair.write_text(_snap("s1", "base") + "---\n" + _cell("fork", fork_of="s1"))
    deleted = cli("delete", "-f", str(pair))
    assert deleted.returncode == 1 and "awaiting approval" in deleted.stderr
    assert cli("get", "snapshots", "s1").returncode == 0  # waits for its fork
    op = next(line.split()[0] for line in cli("get", "ops").stdout.splitlines()
              if "Suspended" in line)
    resumed = cli("op", "resume", op, "--input", "confirm=fork")
    assert resumed.returncode == 0, resumed.stderr
    assert cli("get", "snapshots", "s1").returncode == 1
    assert cli("get", "snapshots", "s2").returncode == 0
    complete = [e for e in _entries(state)
                if e.startswith("images") and (state / e / "checkpoint.json").is_file()]
    assert len(complete) == 1  # s2's: s1's checkpoint is gone
    # s2 was taken with nothing changed since s1, so it names s1's tree: that tree stays
    # (retired, no checkpoint any more) until s2 goes, then nothing is left
    assert cli("delete", "snapshot", "s2").returncode == 0
    assert [e for e in _entries(state) if e.startswith("images")] == []


def test_a_fork_keeps_working_after_its_parent_and_other_snapshots_are_deleted(
        cli: Cli, state: Path, world: Path) -> None:
    assert cli("delete", "cell", "base", "--approve").returncode == 0
    assert cli("delete", "snapshot", "s2").returncode == 0
    kept = cli("delete", "snapshot", "s1")
    assert kept.returncode == 1 and "fork" in kept.stderr  # the fork still names it
    read = cli("exec", "fork", "--", "cat", "/workspace/base.txt")
    assert read.returncode == 0 and read.stdout == "base\n", read.stderr
    assert cli("cell", "sleep", "fork").returncode == 0
    assert cli("cell", "start", "fork").returncode == 0
    read = cli("exec", "fork", "--", "sh", "-c", "cat /workspace/base.txt; wc -c < /workspace/blob")
    assert read.stdout.split() == ["base", "300000"], read.stderr
    assert cli("snapshot", "create", "fork", "--name", "s3").returncode == 0


def test_a_fork_of_an_unchanged_snapshot_outlives_the_snapshot_whose_tree_it_names(
        cli: Cli, state: Path, world: Path) -> None:
    """s2 was taken with nothing changed since s1, so it names s1's tree: a fork of s2 keeps
    working when s1, the fork of s1 and the parent cell are deleted, through a sleep and a
    start, and deleting the rest then leaves nothing behind."""
    metas = [json.loads(p.read_text()) for p in state.glob("images/checkpoints/*/checkpoint.json")]
    assert len(metas) == 2 and len([m for m in metas if m.get("same_as")]) == 1, (
        "s2 names s1's tree")
    (world / "c.yaml").write_text(_cell("fork2", fork_of="s2"))
    applied = cli("apply", "-f", str(world / "c.yaml"))
    assert applied.returncode == 0, applied.stderr
    for gone in (("cell", "fork"), ("cell", "base"), ("snapshot", "s1")):
        deleted = cli("delete", *gone, "--approve")
        assert deleted.returncode == 0, deleted.stderr
    read = cli("exec", "fork2", "--", "sh", "-c", "cat /workspace/base.txt; wc -c < /workspace/blob")
    assert read.stdout.split() == ["base", "300000"], read.stderr
    assert cli("cell", "sleep", "fork2").returncode == 0
    assert cli("cell", "start", "fork2").returncode == 0
    read = cli("exec", "fork2", "--", "cat", "/workspace/base.txt")
    assert read.stdout == "base\n", read.stderr
    deleted = cli("delete", "-f", str(world / "c.yaml"), "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert cli("delete", "snapshot", "s2").returncode == 0
    assert _entries(state) == []
