"""A workspace's size and what changed since its last checkpoint, and checkpoints' sizes and
unique bytes, measured on the filesystem (no engine needed; the container backend's store).

Sizes are checked against GNU du; the DIRTY figure against the files the test changed, in
every way a process can change one (rewrite in place, append, truncate, chmod, new, removed),
and for a fork standing on its snapshot's checkpoint as an overlay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.container import capacity as container_capacity
from devcell.backends.container import overlay
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore

can_mount = pytest.mark.skipif(overlay.supported() is not None,
                               reason=f"no overlay here: {overlay.supported()}")


def _du(*paths: Path, apparent: bool = False) -> int:
    flags = ["-scB1", "--apparent-size"] if apparent else ["-scB1"]
    done = subprocess.run(["du", *flags, *map(str, paths)], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.splitlines()[-1].split()[0])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WorkspaceStore]:
    made = WorkspaceStore(Layout(tmp_path / "state"))
    made.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a", from_checkpoint=None)
    workspace = made.layout.workspace("vol_a")
    (workspace / "src").mkdir()
    for i in range(40):
        (workspace / "src" / f"f{i}").write_bytes(os.urandom(3000 + 100 * i))
    os.link(workspace / "src" / "f0", workspace / "twin")  # two names, one inode
    time.sleep(0.01)  # older than the checkpoint's clock tick: recorded as sources
    yield made
    for volume, _ in made.all_volumes():
        made.delete_volume(volume)


def _take(store: WorkspaceStore, checkpoint_id: str) -> None:
    store.checkpoint(checkpoint_id=checkpoint_id, cell_id="cell_a", volume_id="vol_a")
    time.sleep(0.01)


def test_a_workspace_never_checkpointed_is_all_changed_and_sized_as_du(
        store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_a")
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None and found.since is None
    assert found.workspace.logical == _du(workspace, apparent=True)
    assert found.workspace.disk == _du(workspace)
    assert found.changed_files == 41  # 40 files and the second name of f0
    assert found.own_disk == _du(store.layout.volume("vol_a"))


def test_the_dirty_bytes_are_those_of_the_files_changed_since_the_checkpoint(
        store: WorkspaceStore) -> None:
    _take(store, "ck1")
    clean = container_capacity.workspace_usage(store, "vol_a")
    assert clean is not None and (clean.since, clean.changed_files, clean.changed_bytes) == \
        ("ck1", 0, 0)  # the hard-linked file, not in the record, matches its checkpoint copy
    src = store.layout.workspace("vol_a") / "src"
    with open(src / "f1", "r+b") as f:  # rewritten in place, same size
        f.write(os.urandom(100))
    with open(src / "f2", "ab") as f:  # appended
        f.write(b"x" * 1000)
    os.truncate(src / "f3", 10)  # truncated
    os.chmod(src / "f4", 0o600)  # metadata only: ctime and mode
    (src / "new").write_bytes(b"n" * 5000)
    (src / "f5").unlink()
    changed = {name: (src / name).stat().st_size for name in ("f1", "f2", "f3", "f4", "new")}
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None
    assert found.changed_files == len(changed)
    assert found.changed_bytes == sum(changed.values())
    _take(store, "ck2")
    again = container_capacity.workspace_usage(store, "vol_a")
    assert again is not None and again.since == "ck2" and again.changed_files == 0


def test_checkpoints_sharing_links_match_du_and_unique_bytes_are_what_deleting_frees(
        store: WorkspaceStore) -> None:
    src = store.layout.workspace("vol_a") / "src"
    _take(store, "ck1")
    (src / "f7").write_bytes(os.urandom(9000))
    _take(store, "ck2")
    (src / "f8").write_bytes(os.urandom(8000))
    _take(store, "ck3")
    paths = [store.layout.checkpoint(c) for c in ("ck1", "ck2", "ck3")]
    measured = container_capacity.checkpoints_usage(store, None)
    by_id = {item.checkpoint_id: item for item in measured.items}
    assert measured.total.disk == _du(*paths)  # each shared inode once
    assert measured.total.logical == _du(*paths, apparent=True)
    # ck2 and ck3 are layers over ck1 (each holds what changed since it: f7; f7 and f8),
    # so ck1 is kept while they are, and a layer's size is its own tree and ck1's
    over = {p.name: json.loads((p / "checkpoint.json").read_text()).get("over") for p in paths}
    assert over == {"ck1": None, "ck2": "ck1", "ck3": "ck1"}
    for path in paths:
        below = [store.layout.checkpoint(over[path.name])] if over[path.name] else []
        assert by_id[path.name].usage.disk == sum(_du(p) for p in [path, *below])
    assert measured.freed_together == measured.total.disk
    assert by_id["ck1"].unique == 0
    for checkpoint, path in zip(("ck2", "ck3"), paths[1:], strict=True):
        others = [p for p in paths if p != path]
        before = _du(*paths)
        moved = path.with_name(f".moved-{checkpoint}")
        shutil.move(path, moved)  # as if deleted: what the others still hold
        try:
            assert by_id[checkpoint].unique == before - _du(*others)
        finally:
            shutil.move(moved, path)


@can_mount
def test_a_fork_counts_only_its_own_writes_and_its_checkpoint_frees_nothing(
        store: WorkspaceStore) -> None:
    _take(store, "ck1")
    store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                        from_checkpoint="ck1")
    fork = container_capacity.workspace_usage(store, "vol_f")
    assert fork is not None and fork.fork_of == "ck1" and fork.since == "ck1"
    assert fork.changed_files == 0
    upper_before = fork.own_disk
    (store.layout.workspace("vol_f") / "src" / "f9").write_bytes(os.urandom(20000))
    fork = container_capacity.workspace_usage(store, "vol_f")
    assert fork is not None and (fork.changed_files, fork.changed_bytes) == (1, 20000)
    assert fork.own_disk - upper_before >= 20000
    assert fork.workspace.logical == _du(store.layout.workspace("vol_f"), apparent=True)
    measured = container_capacity.checkpoints_usage(store, ["ck1"])
    assert measured.items[0].unique == 0 and measured.items[0].forks == ("vol_f",)
    assert measured.freed_together == 0


def test_a_hostile_workspace_is_measured_without_following_or_opening_anything(
        store: WorkspaceStore, tmp_path: Path) -> None:
    secret = tmp_path / "host-file"
    secret.write_bytes(os.urandom(1 << 20))
    workspace = store.layout.workspace("vol_a")
    os.symlink(secret, workspace / "escape")  # a link to a host file: counted as a link
    os.symlink(tmp_path, workspace / "escape-dir")
    os.mkfifo(workspace / "pipe")  # never opened (it would block)
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(300):  # deeper than PATH_MAX: made one level at a time, as a cell can
        os.mkdir("d" * 30, dir_fd=fd)
        below = os.open("d" * 30, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    bottom = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(bottom, b"b" * 4096)
    os.close(bottom)
    os.close(fd)
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None
    assert found.workspace.logical == _du(workspace, apparent=True)  # du follows no link
    assert found.workspace.disk == _du(workspace)
    assert found.changed_files == 41 + 4  # nothing checkpointed: every entry counts


def test_a_checkpoint_of_an_unchanged_workspace_shows_the_tree_it_names_counted_once(
        store: WorkspaceStore) -> None:
    """A checkpoint naming an earlier one's tree (nothing changed) is that tree's size; each
    frees only its record while the other names the tree; together they free all of it."""
    _take(store, "ck1")
    _take(store, "ck2")
    assert store.tree_of("ck2") == store.tree_of("ck1")  # the second names the first's tree
    found = container_capacity.checkpoints_usage(store, None)
    by_id = {c.checkpoint_id: c for c in found.items}
    tree = store.tree_of("ck1")
    assert by_id["ck2"].usage.logical == by_id["ck1"].usage.logical >= _du(tree, apparent=True)
    home = store.layout.checkpoint("ck1")
    assert by_id["ck1"].unique == 0  # retired, not removed, while ck2 names its tree
    assert by_id["ck2"].unique == _du(store.layout.checkpoint("ck2"))  # its record only
    both = [home, store.layout.checkpoint("ck2")]
    assert found.total.disk == _du(*both)
    assert found.freed_together == _du(*both)


def test_dirty_bytes_after_an_unchanged_checkpoint_compare_with_the_named_tree(
        store: WorkspaceStore) -> None:
    _take(store, "ck1")
    _take(store, "ck2")
    (store.layout.workspace("vol_a") / "src" / "f7").write_bytes(b"z" * 123)
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None and (found.since, found.changed_files) == ("ck2", 1)
    assert found.changed_bytes == 123


def test_a_workspace_is_measured_against_a_layer_without_mounting_its_view(
        store: WorkspaceStore) -> None:
    src = store.layout.workspace("vol_a") / "src"
    _take(store, "ck1")
    (src / "f7").write_bytes(os.urandom(9000))
    time.sleep(0.01)
    _take(store, "ck2")
    assert (store.find_checkpoint("ck2") or {}).get("over") == "ck1"
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None and (found.since, found.changed_files) == ("ck2", 0)
    (src / "f8").write_bytes(b"changed")
    found = container_capacity.workspace_usage(store, "vol_a")
    assert found is not None and (found.changed_files, found.changed_bytes) == (1, 7)
    assert not overlay.is_mounted(store.layout.checkpoint("ck2") / "view")
    measured = container_capacity.checkpoints_usage(store, None)
    assert measured.total.disk == _du(*sorted(store.layout.checkpoints.iterdir()))
