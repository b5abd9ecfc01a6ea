"""The daemon's directory sync: what it applies, and what it refuses to touch."""

from __future__ import annotations

from pathlib import Path

from devcell.reconciler.gitops import DirectorySync
from devcell.store import objects
from devcell.store.db import Database

CELL = "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\nspec: {backend: fake}\n"


def test_a_broken_configuration_applies_and_prunes_nothing(db: Database, tmp_path: Path) -> None:
    watched = tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(CELL % "api")
    sync = DirectorySync(db, watched, prune_grace=0)
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
