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


def test_a_slept_cell_stays_asleep_when_another_file_changes(db: Database, ctx: Context,
                                                            tmp_path: Path) -> None:
    """`cell sleep` is a hold beside the spec (store/holds.py): neither an incremental sync
    of another file nor a full resync of the directory wakes the cell (both did, issue 30)."""
    from devcell import admission

    watched = tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(CELL % "api")
    (watched / "web.yaml").write_text(CELL % "web")
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    assert converge(ctx, sync.sync().to_reconcile).ok
    change = admission.set_cell_state(db, "api", "Sleeping")
    assert converge(ctx, [("Cell", change.object_id or "")]).ok
    assert objects.require(db.conn, "Cell", "api").phase == "Sleeping"

    (watched / "web.yaml").write_text((CELL % "web").replace("{name: web}",
                                                             "{name: web, labels: {v: '2'}}"))
    for result in (sync.sync_paths([str(watched / "web.yaml")]), sync.sync()):
        assert not result.problems
        outcomes = {c.name: c.outcome for c in result.changes}
        assert outcomes.get("api", "unchanged") == "unchanged"
        assert outcomes["web"] == ("unchanged" if result.full else "configured")
        assert converge(ctx, result.to_reconcile).ok
        api = objects.require(db.conn, "Cell", "api")
        assert api.phase == "Sleeping" and api.extra["held"]


def test_adopting_a_cell_applied_from_elsewhere_is_said(db: Database, ctx: Context,
                                                        tmp_path: Path) -> None:
    from devcell import admission
    from devcell.manifests import loader
    from devcell.store import events

    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(CELL % "api")
    assert admission.apply(db, loader.read_sources([str(elsewhere)])).changes
    watched = tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(CELL % "api")
    result = DirectorySync(db, watched, allow_empty=True, prune_grace=0).sync()
    [change] = result.changes
    assert change.adopted_from == str(elsewhere)
    api = objects.require(db.conn, "Cell", "api")
    assert api.source == str(watched / "api.yaml")
    said = [e["message"] for e in events.for_object(db.conn, api.id) if e["reason"] == "Adopted"]
    assert said == [f"now applied from {watched / 'api.yaml'}; it was applied from {elsewhere}"]
