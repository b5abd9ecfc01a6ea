"""The daemon's directory sync: what it applies, and what it refuses to touch."""

from __future__ import annotations

from pathlib import Path

from devcell.backends.fake import FakeBackend
from devcell.controllers.context import Context
from devcell.reconciler.converge import converge
from devcell.reconciler.gitops import DirectorySync
from devcell.store import objects
from devcell.store.db import Database

CELL = "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\nspec: {backend: fake}\n"


def test_a_broken_configuration_applies_and_prunes_nothing(db: Database, tmp_path: Path) -> None:
    watched = tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(CELL % "api")
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    assert not sync.sync().problems
    assert objects.get(db.conn, "Cell", "api") is not None

    config = db.state_dir / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity: {allowHostNet: 1}\n")
    config.chmod(0o600)
    (watched / "api.yaml").unlink()
    (watched / "web.yaml").write_text(CELL % "web")
    result = sync.sync()
    assert [p.file for p in result.problems] == [str(config)]
    assert "security.allowHostNet: unknown field" in str(result.problems[0])
    assert result.changes == [] and result.pruned == []
    assert objects.get(db.conn, "Cell", "web") is None
    assert not objects.get(db.conn, "Cell", "api").deleting  # type: ignore[union-attr]

    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n")
    result = sync.sync()
    assert not result.problems
    assert objects.get(db.conn, "Cell", "web") is not None
    assert [c.name for c in result.pruned] == ["api"]


SNAP = "apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: %s}\nspec: {cell: %s}\n"
FORK = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\n"
        "spec: {backend: fake, workspace: {from: {snapshot: %s}}}\n")


def test_pruning_a_fork_and_its_snapshot_frees_the_checkpoint(db: Database, ctx: Context,
                                                              tmp_path: Path) -> None:
    """GitOps prune frees bytes as `delete` does: the fork goes, then the snapshot and its
    checkpoint; a snapshot whose fork stays is kept (its prune retried) until the fork goes."""
    watched = tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(CELL % "api")
    (watched / "s1.yaml").write_text(SNAP % ("s1", "api"))
    (watched / "exp.yaml").write_text(FORK % ("exp", "s1"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    assert converge(ctx, sync.sync().to_reconcile).ok
    backend = FakeBackend(state_dir=db.state_dir)
    snap_id = objects.require(db.conn, "Snapshot", "s1").id
    assert backend.checkpoint_exists(snap_id)
    (watched / "s1.yaml").unlink()
    result = sync.sync()
    assert result.pruned == [] and result.refused  # the fork still names it: kept
    assert backend.checkpoint_exists(snap_id)
    (watched / "exp.yaml").unlink()
    result = sync.sync()
    assert sorted(c.name for c in result.pruned) == ["exp", "s1"]
    assert converge(ctx, result.to_reconcile).ok
    assert not backend.checkpoint_exists(snap_id)
    assert objects.get(db.conn, "Snapshot", "s1") is None
    backend.close()
