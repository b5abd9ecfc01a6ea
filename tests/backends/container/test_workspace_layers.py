"""Checkpoints as layers: after a small change a checkpoint holds only what changed since the
volume's last full tree, read back whole through a read-only overlay (no engine needed).

A layer must read back exactly as the workspace was (contents, modes, owners, times, links),
whatever the change; a deletion, a change of type or a file overlay would misread makes a
full tree instead; a layer keeps its full tree alive through deletes, and the last delete
frees both; a fork of a layer stands on both layers and never changes either.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from devcell.backends.container import overlay
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import treecopy
from tests.backends.container.test_cow_storage import change_every_way, inodes, tree

pytestmark = pytest.mark.skipif(overlay.supported() is not None,
                                reason=f"no overlay here: {overlay.supported()}")
FILES = 80


@pytest.fixture
def store(tmp_path: Path) -> WorkspaceStore:
    return WorkspaceStore(Layout(tmp_path / "state"))


@pytest.fixture
def volume(store: WorkspaceStore) -> Path:
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    workspace = store.layout.workspace("vol_1")
    for i in range(FILES):
        directory = workspace / f"d{i % 10}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{i:03d}").write_bytes(os.urandom(64) + b"%d" % i)
    os.symlink("d0/f000", workspace / "link")
    os.link(workspace / "d9/f009", workspace / "d9/twin")
    _age(workspace)
    return workspace


def _age(workspace: Path) -> None:
    """Times older than the next checkpoint's clock tick: recorded as sources."""
    time.sleep(0.05)


def take(store: WorkspaceStore, checkpoint_id: str) -> Path:
    store.checkpoint(checkpoint_id=checkpoint_id, cell_id="cell_1", volume_id="vol_1")
    return store.tree_of(checkpoint_id)


def own_tree(store: WorkspaceStore, checkpoint_id: str) -> Path:
    return store.layout.checkpoint(checkpoint_id) / "workspace"


def files_in(root: Path) -> set[str]:
    return {str((Path(d) / f).relative_to(root)) for d, _, names in os.walk(root)
            for f in names}


def meta(store: WorkspaceStore, checkpoint_id: str) -> dict[str, object]:
    return store.find_checkpoint(checkpoint_id) or {}


def test_a_checkpoint_after_a_small_change_holds_only_that_change(
        store: WorkspaceStore, volume: Path) -> None:
    first = take(store, "snap_1")
    kept = tree(first)
    changed = change_every_way(volume)
    expected = tree(volume)
    second = take(store, "snap_2")
    assert meta(store, "snap_2").get("over") == "snap_1"
    assert files_in(own_tree(store, "snap_2")) == changed
    assert tree(second) == expected, "the layer reads back as the workspace was"
    assert tree(first) == kept, "the full tree below did not change"
    assert os.stat(second / "d4/f014").st_ino == os.stat(second / "d4/alias").st_ino
    assert not inodes(own_tree(store, "snap_2")) & inodes(volume), "no link into the workspace"
    with pytest.raises(OSError):
        (second / "d0/new").write_text("the view is read-only")


def test_the_next_layer_links_what_the_last_one_holds_and_lies_over_the_same_tree(
        store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"one")
    _age(volume)
    take(store, "snap_2")
    (volume / "d2/f002").write_bytes(b"two")
    (volume / "d2/sub").mkdir()
    (volume / "d2/sub/new").write_bytes(b"new")
    expected = tree(volume)
    third = take(store, "snap_3")
    assert meta(store, "snap_3").get("over") == "snap_1", "depth stays two"
    assert files_in(own_tree(store, "snap_3")) == {"d1/f001", "d2/f002", "d2/sub/new"}
    assert (own_tree(store, "snap_3") / "d1/f001").stat().st_ino == \
        (own_tree(store, "snap_2") / "d1/f001").stat().st_ino
    assert tree(third) == expected


def test_a_directorys_own_change_is_in_the_layer(store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    os.chmod(volume / "d3", 0o700)
    os.utime(volume / "d5", ns=(10**18, 10**18))
    expected = tree(volume)
    second = take(store, "snap_2")
    assert meta(store, "snap_2").get("over") == "snap_1"
    assert tree(second) == expected
    assert (second / "d3").stat().st_mode & 0o777 == 0o700
    assert (second / "d5").stat().st_mtime_ns == 10**18


@pytest.mark.parametrize("change", ["delete", "dir-to-file", "fifo", "a-third"])
def test_what_a_layer_cannot_say_makes_a_full_tree(store: WorkspaceStore, volume: Path,
                                                   change: str) -> None:
    take(store, "snap_1")
    if change == "delete":
        (volume / "d1/f001").unlink()
    elif change == "dir-to-file":
        for name in os.listdir(volume / "d2"):
            os.unlink(volume / "d2" / name)
        os.rmdir(volume / "d2")
        (volume / "d2").write_bytes(b"a file now")
    elif change == "fifo":
        os.mkfifo(volume / "d3/pipe")
    else:
        for i in range(0, FILES, 3):
            (volume / f"d{i % 10}" / f"f{i:03d}").write_bytes(b"changed")
    expected = tree(volume)
    second = take(store, "snap_2")
    assert "over" not in meta(store, "snap_2")
    assert second == own_tree(store, "snap_2")
    assert tree(second) == expected


def test_a_layer_keeps_its_full_tree_and_the_last_delete_frees_both(
        store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"one")
    expected = tree(volume)
    take(store, "snap_2")
    assert store.freed_by_deleting("snap_1") == []  # the layer stands on it
    store.delete_checkpoint("snap_1")
    assert store.find_checkpoint("snap_1") is None
    assert tree(store.tree_of("snap_2")) == expected, "still readable"
    assert store.freed_by_deleting("snap_2") == [store.layout.checkpoint("snap_2"),
                                                 store.layout.checkpoint("snap_1")]
    store.delete_checkpoint("snap_2")
    assert [p.name for p in store.layout.checkpoints.iterdir()] == []
    assert not any(str(store.layout.checkpoints) in line
                   for line in Path("/proc/self/mountinfo").read_text().splitlines())


def test_an_unchanged_layer_is_named_and_its_full_tree_outlives_both_deletes(
        store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"one")
    _age(volume)  # not racily clean: snap_2's record vouches for its whole tree
    take(store, "snap_2")
    expected = tree(volume)
    take(store, "snap_3")  # nothing changed: names snap_2's tree
    assert meta(store, "snap_3").get("same_as") == "snap_2"
    for gone in ("snap_1", "snap_2"):
        store.delete_checkpoint(gone)
        assert tree(store.tree_of("snap_3")) == expected
    store.delete_checkpoint("snap_3")
    assert list(store.layout.checkpoints.iterdir()) == []


def test_a_fork_of_a_layer_stands_on_both_and_changes_neither(
        store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"one")
    take(store, "snap_2")
    below, layer = tree(own_tree(store, "snap_1")), tree(own_tree(store, "snap_2"))
    expected = tree(volume)
    store.create_volume(cell_id="cell_2", cell_name="fork", volume_id="vol_2",
                        from_checkpoint="snap_2")
    fork = store.layout.workspace("vol_2")
    assert overlay.is_mounted(fork) and tree(fork) == expected
    changed = change_every_way(fork)
    (fork / "d1/f001").write_bytes(b"fork's own")
    assert tree(own_tree(store, "snap_1")) == below
    assert tree(own_tree(store, "snap_2")) == layer
    assert tree(volume) == expected, "the parent did not change"
    store.checkpoint(checkpoint_id="snap_f", cell_id="cell_2", volume_id="vol_2")
    mine = store.tree_of("snap_f")
    assert tree(mine) == tree(fork)
    shared = files_in(mine) - changed - {"d1/f001"}
    for rel in shared - {"link"}:  # the unchanged files are links to where they lie
        real = store.earlier("snap_2", {}).file(rel)
        assert (mine / rel).stat().st_ino == os.stat(real).st_ino, rel
    store.delete_volume("vol_2")


def test_a_damaged_layer_record_shares_nothing_but_reads_back_whole(
        store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"one")
    take(store, "snap_2")
    (store.layout.checkpoint("snap_2") / "layer.json").write_text("{not json")
    _age(volume)
    (volume / "d2/f002").write_bytes(b"two")
    expected = tree(volume)
    third = take(store, "snap_3")
    assert "over" not in meta(store, "snap_3")
    assert tree(third) == expected
    assert json.loads((store.layout.checkpoint("snap_1") / "checkpoint.json").read_text())


def test_a_layer_plan_refuses_a_deleted_path(tmp_path: Path) -> None:
    root = tmp_path / "w"
    (root / "a").mkdir(parents=True)
    (root / "a/x").write_bytes(b"x")
    record = treecopy.scan(root).record
    (root / "a/x").unlink()
    earlier = treecopy.Earlier(str(tmp_path / "nowhere"), {}, record=record, stamp=0)
    assert treecopy.plan_layer(treecopy.scan(root), earlier) is None


@pytest.mark.parametrize("change", ["chmod", "empty-dir", "new-file"])
def test_a_change_deep_in_the_tree_brings_every_directory_above_it(
        store: WorkspaceStore, volume: Path, change: str) -> None:
    deep = volume / "a/b/c"
    deep.mkdir(parents=True)
    for i in range(5):
        (deep / f"f{i}").write_bytes(b"%d" % i)
    _age(volume)
    take(store, "snap_1")
    if change == "chmod":  # the directory's own attributes, nothing under it
        os.chmod(deep, 0o700)
    elif change == "empty-dir":  # its mtime, and a directory with no file
        (deep / "empty").mkdir()
    else:
        os.chmod(deep, 0o750)
        (deep / "new").write_bytes(b"new")
    expected = tree(volume)
    second = take(store, "snap_2")
    assert meta(store, "snap_2").get("over") == "snap_1"
    assert tree(second) == expected
    _age(volume)
    (deep / "f0").write_bytes(b"again")
    expected = tree(volume)
    assert tree(take(store, "snap_3")) == expected, "and the next layer over the same tree"


def test_a_fork_of_a_tree_holding_a_whiteout_device_is_a_copy_that_shows_it(
        store: WorkspaceStore, volume: Path) -> None:
    import stat as st

    os.mknod(volume / "d1/wh", 0o600 | st.S_IFCHR, os.makedev(0, 0))  # what a cell can make
    take(store, "snap_1")
    assert meta(store, "snap_1").get("whiteouts") == 1
    made = store.create_volume(cell_id="cell_2", cell_name="fork", volume_id="vol_2",
                               from_checkpoint="snap_1")
    assert made.storage == "copy" and "0/0" in (made.copy_reason or "")
    fork = store.layout.workspace("vol_2")
    assert st.S_ISCHR(os.lstat(fork / "d1/wh").st_mode)
    assert tree(fork) == tree(volume)
    store.delete_volume("vol_2")


def test_a_layers_view_is_unmounted_when_its_last_reader_is_done(
        store: WorkspaceStore, volume: Path) -> None:
    """An export or a restore reads a layer through its merged view: left mounted, the view
    of a retired checkpoint outlived every export until the last snapshot over it was
    deleted, and `rm -rf` of the state directory failed on it."""
    take(store, "snap_1")
    (volume / "d0" / "f000").write_bytes(b"changed")
    _age(volume)
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    assert meta(store, "snap_2").get("over") == "snap_1"
    store.delete_checkpoint("snap_1")  # retired: snap_2 stands on its tree
    view = store.layout.checkpoint("snap_2") / "view"
    other = WorkspaceStore(store.layout)  # a second reader (another process's store)
    assert (store.checkpoint_files("snap_2") / "d0" / "f000").read_bytes() == b"changed"
    assert (other.checkpoint_files("snap_2") / "d0" / "f000").read_bytes() == b"changed"
    assert overlay.is_mounted(view)
    store.release_view("snap_2")
    assert overlay.is_mounted(view), "the other reader still reads through it"
    other.release_view("snap_2")
    assert not overlay.is_mounted(view)
    store.release_view("snap_2")  # again, or for a checkpoint with no view: nothing to do
    store.release_view("snap_2")
    assert (store.checkpoint_files("snap_2") / "d0" / "f010").exists()  # mounted again
    store.release_view("snap_2")
    assert not overlay.is_mounted(view)
    treecopy.remove_tree(store.layout.state_dir, store.layout.state_dir.parent / "trash")
    assert not store.layout.state_dir.exists()
