"""A LIVE workspace volume on the host alone (no engine): its marker records the developer's
folder and nothing else of it lives in the state directory, a checkpoint copies the folder
without following its links, and every way DevCell removes or replaces a workspace (volume
delete, what the orphan sweep may remove, restore) leaves the folder and its files as they
were."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcell.backends.container import workspace_restore
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import LIVE, WorkspaceStore
from devcell.backends.host.live_folder import LiveFolder
from devcell.errors import BackendRefused


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print('hi')\n")
    (folder / "to-etc").symlink_to("/etc")
    os.mkfifo(folder / "pipe")
    return folder


def _listing(folder: Path) -> list[tuple[str, int]]:
    return [(str(p.relative_to(folder)), p.lstat().st_mtime_ns) for p in sorted(folder.rglob("*"))]


def test_a_live_volume_is_only_recorded_and_nothing_removes_or_restores_its_folder(
        tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    before = _listing(folder)
    store = WorkspaceStore(Layout(tmp_path / "state"))
    made = store.create_volume(cell_id="cell_1", cell_name="c", volume_id="vol_1",
                               from_checkpoint=None, live=LiveFolder(str(folder)))
    assert made.storage == LIVE and made.stats.files == 3  # a file, a link, a FIFO
    assert store.workspace_dir("vol_1") == folder and store.live_path("vol_1") == folder
    assert not store.layout.workspace("vol_1").exists()  # no tree, link or mount of its own
    assert store.content("volume", "vol_1") is None  # the sweep sees no files of DevCell's
    assert not store.changed_since("vol_1", None)  # deleting the cell loses nothing

    meta = store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    tree = store.tree_of("snap_1")
    assert (tree / "src" / "main.py").read_text() == "print('hi')\n"
    assert os.readlink(tree / "to-etc") == "/etc" and meta["files"] >= 1
    assert (tree / "src" / "main.py").stat().st_ino != (folder / "src" / "main.py").stat().st_ino

    with pytest.raises(BackendRefused, match="never overwrites"):
        workspace_restore.restore(store, "vol_1", "snap_1")
    store.delete_volume("vol_1")
    assert not store.layout.volume("vol_1").exists()
    store.delete_checkpoint("snap_1")
    assert _listing(folder) == before
    assert (folder / "src" / "main.py").read_text() == "print('hi')\n"
