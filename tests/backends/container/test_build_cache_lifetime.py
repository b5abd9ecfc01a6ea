"""A built cell's build-digest cache entry (`<state>/build-digests/<cell>.json`) lives as long
as its cell: a recreate keeps it (the next reconcile needs it), deleting the cell removes it,
and the orphan sweep and `devcell gc` drop the entries of cells the database no longer has.
Real engine, real builds, the CLI as a user runs it."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from devcell.backends.container.build_digest_cache import DIRECTORY, RACY_SECONDS
from devcell.controllers.context import Context
from devcell.store.db import Database
from tests.backends.container.test_build import _project, built_images  # noqa: F401
from tests.conftest import Cli
from tests.controllers.support import apply, cell_doc, record


def _entry(state: Path, name: str) -> dict[str, Any] | None:
    path = state / DIRECTORY / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _aged(manifest: Path) -> Path:
    """The project once its files are no longer racy: a file changed (mtime or ctime, which
    no one can set back) within RACY_SECONDS is not cached, as git's index does, which would
    leave no entry to test."""
    time.sleep(RACY_SECONDS + 0.2)
    return manifest


def _cell_id(state: Path, name: str) -> str:
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT id FROM cells WHERE name = ?", (name,)).fetchone()[0])
    finally:
        conn.close()


def _plant(state: Path, outside: Path) -> dict[str, Path]:
    """Entries no live cell owns: a deleted cell's, one that names no cell (written before
    entries named one), a link to a file outside, and a write a kill left an hour ago."""
    cache = state / DIRECTORY
    cache.mkdir(parents=True, exist_ok=True)
    planted = {"gone": cache / "gone.json", "legacy": cache / "legacy.json",
               "linked": cache / "linked.json", "tmp": cache / ".gone.json.123.tmp"}
    planted["gone"].write_text(json.dumps({"version": 1, "cell_id": "cell_gone00000001",
                                           "key": "k", "digest": "d"}))
    planted["legacy"].write_text(json.dumps({"version": 1, "key": "k", "digest": "d"}))
    outside.write_text("not DevCell's")
    planted["linked"].symlink_to(outside)
    planted["tmp"].write_text("{")
    os.utime(planted["tmp"], (1, 1))
    return planted


def test_a_recreate_keeps_the_entry_and_deleting_the_cell_removes_it(
        cli: Cli, tmp_path: Path, state: Path, built_images: Any) -> None:  # noqa: F811
    manifest = _aged(_project(tmp_path))
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    first = _entry(state, "built")
    assert first is not None and first["cell_id"] == _cell_id(state, "built")

    (manifest.parent / "app" / "greeting.txt").write_text("hello v2\n")
    _aged(manifest)
    again = cli("apply", "-f", str(manifest))  # rebuilt, the container recreated
    assert again.returncode == 0, again.stderr
    second = _entry(state, "built")
    assert second is not None and second["digest"] != first["digest"]
    assert second["cell_id"] == first["cell_id"]

    deleted = cli("delete", "cell", "built", "--approve")
    assert deleted.returncode == 0, deleted.stderr
    assert _entry(state, "built") is None
    assert list((state / DIRECTORY).iterdir()) == []


def test_gc_drops_the_entries_of_cells_that_no_longer_exist(
        cli: Cli, tmp_path: Path, state: Path, built_images: Any) -> None:  # noqa: F811
    manifest = _aged(_project(tmp_path))
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert (_entry(state, "built") or {}).get("cell_id") == _cell_id(state, "built")
    outside = tmp_path / "outside.json"
    planted = _plant(state, outside)

    dry = cli("gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert all(p.is_symlink() or p.exists() for p in planted.values()), "a dry run drops nothing"
    collected = cli("gc")
    assert collected.returncode == 0, collected.stderr
    assert not any(p.is_symlink() or p.exists() for p in planted.values())
    assert outside.read_text() == "not DevCell's"  # the link removed, never followed
    assert (_entry(state, "built") or {}).get("cell_id") == _cell_id(state, "built")


def test_the_orphan_sweep_drops_the_entries_of_cells_that_no_longer_exist(
        db: Database, state: Path, tmp_path: Path) -> None:
    from devcell.reconciler import orphans

    apply(db, cell_doc("api", backend="container", image="devcell/busybox:latest"))
    live = record(db, "Cell", "api").id
    cache = state / DIRECTORY
    planted = _plant(state, tmp_path / "outside.json")
    young = cache / ".api.json.456.tmp"  # a put under way right now: left alone
    young.write_text("{")
    (cache / "api.json").write_text(json.dumps({"version": 1, "cell_id": live, "key": "k",
                                                "digest": "d"}))
    ctx = Context(db, trigger="test")
    try:
        assert orphans.sweep(ctx, "container") == []  # no container, volume or checkpoint
    finally:
        ctx.close()
    assert not any(p.is_symlink() or p.exists() for p in planted.values())
    assert (_entry(state, "api") or {}).get("cell_id") == live and young.exists()
