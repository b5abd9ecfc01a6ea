"""Retention on the container backend (real engine, the CLI as a user runs it): a snapshot
whose ttl ran out is deleted by the next converge and its checkpoint's bytes are freed; one a
live fork depends on stays until the fork is gone."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from devcell.backends.container.layout import Layout
from tests.backends.container.test_storage_freed import _cell
from tests.conftest import Cli

TTL_S = 12


def _snap(name: str, cell: str) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {{name: {name}}}\n"
            f"spec: {{cell: {cell}, ttl: {TTL_S}s}}\n")


def _meta(cli: Cli, name: str) -> dict[str, str]:
    got = cli("get", "snapshots", name, "-o", "json")
    assert got.returncode == 0, got.stderr
    return dict(json.loads(got.stdout)["metadata"])


def _checkpoint_dir(state: Path, snapshot_id: str) -> Path:
    return Layout(state).checkpoints / snapshot_id


def _du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file())


def test_ttl_expiry_frees_the_checkpoint_and_spares_what_a_fork_needs(
        engine: None, cli: Cli, state: Path, tmp_path: Path) -> None:
    docs = tmp_path / "m"
    docs.mkdir()
    (docs / "a.yaml").write_text(_cell("base"))
    assert cli("apply", "-f", str(docs / "a.yaml")).returncode == 0
    wrote = cli("exec", "base", "--", "sh", "-c", "head -c 2000000 /dev/urandom > /workspace/blob")
    assert wrote.returncode == 0, wrote.stderr
    (docs / "s.yaml").write_text(_snap("s1", "base") + "---\n" + _snap("s2", "base"))
    applied = cli("apply", "-f", str(docs / "s.yaml"))
    assert applied.returncode == 0, applied.stderr
    (docs / "fork.yaml").write_text(_cell("fork", fork_of="s2"))
    assert cli("apply", "-f", str(docs / "fork.yaml")).returncode == 0
    s1, s2 = _meta(cli, "s1")["id"], _meta(cli, "s2")["id"]
    created = max(datetime.fromisoformat(_meta(cli, n)["creationTimestamp"].replace("Z", "+00:00"))
                  for n in ("s1", "s2"))
    assert _du(_checkpoint_dir(state, s1)) >= 2_000_000
    assert _checkpoint_dir(state, s2).is_dir()

    time.sleep(max(0.0, (created - datetime.now(UTC)).total_seconds() + TTL_S + 0.3))
    again = cli("apply", "-f", str(docs))  # the next converge applies what expired
    assert again.returncode == 0, again.stderr
    assert "snapshot/s1 expired" in again.stdout
    # No checkpoint any more; its files stay only while s2, taken with nothing changed in
    # between, names its tree (docs/backends.md: retiring), and go with s2 below.
    assert not (_checkpoint_dir(state, s1) / "checkpoint.json").exists()
    listed = cli("get", "snapshots")
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["s1"][3] == "Expired" and rows["s2"][3] == "Ready", listed.stdout
    described = cli("describe", "snapshot", "s2")
    assert "ForkDependsOnIt" in described.stdout and "fork" in described.stdout
    assert _checkpoint_dir(state, s2).is_dir()
    read = cli("exec", "fork", "--", "sh", "-c", "wc -c < /workspace/blob")
    assert read.stdout.strip() == "2000000", read.stderr

    gone = cli("delete", "cell", "fork", "--approve")
    assert gone.returncode == 0, gone.stderr
    assert "snapshot/s2 expired" in gone.stdout
    assert not _checkpoint_dir(state, s2).exists()
    assert not _checkpoint_dir(state, s1).exists()  # the tree s2 named: its bytes are freed
    # A re-apply of the manifests does not take the expired snapshots again.
    third = cli("apply", "-f", str(docs / "s.yaml"))
    assert third.returncode == 0, third.stderr
    assert "snapshot/s1 expired" in third.stdout and "snapshot/s2 expired" in third.stdout
    assert sorted(p.name for p in Layout(state).checkpoints.iterdir()) == []
