"""Restoring a workspace in place (devcell.backends.container.workspace_restore), on the host's real
filesystem: the restored tree is exactly the checkpoint's (contents, modes, links, times), the
checkpoint never changes and shares no inode with the workspace, and a fork's restore keeps
its overlay on its own lower layer."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from devcell.backends.container import overlay, workspace_restore
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.errors import BackendNotFound
from tests.backends.tree_digest import digest, entries, inodes


def _fill(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('v1')\n")
    (root / "README").write_text("hello\n")
    (root / "secret.key").write_bytes(os.urandom(64))
    os.chmod(root / "secret.key", 0o600)
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    os.symlink("src/main.py", root / "entry")
    os.symlink("/etc/passwd", root / "outside")  # a link is kept as a link, never followed
    (root / "empty").mkdir()
    os.utime(root / "README", ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    os.utime(root / "src", ns=(1_600_000_000_000_000_000, 1_600_000_001_000_000_000))


def _change(root: Path) -> None:
    (root / "src" / "main.py").write_text("print('v2')\n")
    (root / "README").unlink()
    (root / "new.txt").write_text("added after the snapshot\n")
    os.chmod(root / "run.sh", 0o700)
    (root / "entry").unlink()
    os.symlink("new.txt", root / "entry")
    (root / "empty").rmdir()


@pytest.fixture
def store(tmp_path: Path) -> WorkspaceStore:
    store = WorkspaceStore(Layout(tmp_path / "state"))
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    _fill(store.layout.workspace("vol_1"))
    time.sleep(0.02)
    store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    return store


def _saved(store: WorkspaceStore, checkpoint_id: str) -> Path:
    return store.layout.checkpoint(checkpoint_id) / "workspace"


def test_restore_brings_back_exactly_the_snapshot_and_the_safety_checkpoint_the_tree_before(
        store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    snap = digest(_saved(store, "snap_1"))
    _change(workspace)
    before = entries(workspace)
    store.checkpoint(checkpoint_id="snap_safety", cell_id="cell_1", volume_id="vol_1")

    made = workspace_restore.restore(store, "vol_1", "snap_1")

    assert made.how == "copy" and made.files == 6
    assert digest(workspace) == snap
    assert entries(_saved(store, "snap_safety")) == before  # the tree before, exactly
    assert not [p for p in store.layout.volumes.iterdir() if p.name.startswith(".")]


def test_a_write_after_restore_never_reaches_the_snapshot(store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    snap = digest(_saved(store, "snap_1"))
    _change(workspace)
    workspace_restore.restore(store, "vol_1", "snap_1")
    assert not inodes(workspace) & inodes(_saved(store, "snap_1")), "no inode shared"

    with open(workspace / "src" / "main.py", "r+") as f:  # rewrite in place
        f.write("XXXXX")
    os.truncate(workspace / "README", 0)
    os.chmod(workspace / "secret.key", 0o666)
    with open(workspace / "run.sh", "a") as f:
        f.write("echo appended\n")
    os.link(workspace / "README", workspace / "README.link")

    assert digest(_saved(store, "snap_1")) == snap


def test_restore_then_checkpoint_again_is_exact(store: WorkspaceStore) -> None:
    """After a restore the next checkpoint shares nothing it should not: it equals the
    restored tree (the safety checkpoint's recorded sources name inodes that are gone)."""
    workspace = store.layout.workspace("vol_1")
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    _change(workspace)
    workspace_restore.restore(store, "vol_1", "snap_1")
    (workspace / "later.txt").write_text("after the restore\n")
    time.sleep(0.02)
    store.checkpoint(checkpoint_id="snap_3", cell_id="cell_1", volume_id="vol_1")
    assert digest(_saved(store, "snap_3")) == digest(workspace)


def test_restore_from_a_missing_checkpoint_changes_nothing(store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    _change(workspace)
    before = digest(workspace)
    with pytest.raises(BackendNotFound):
        workspace_restore.restore(store, "vol_1", "snap_nope")
    assert digest(workspace) == before


def test_exchange_swaps_two_directories_at_once(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    workspace_restore.exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b" / "x").read_text() == "a" and not any((tmp_path / "a").iterdir())


def test_changes_name_what_would_be_replaced(store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    _change(workspace)
    found = workspace_restore.changes(workspace, _saved(store, "snap_1"))
    assert (found.added, found.changed, found.removed) == (1, 3, 2)
    assert "+new.txt" in found.examples and "-README" in found.examples
    assert "~src/main.py" in found.examples
    assert found.summary().startswith("1 added, 3 changed, 2 removed: ")


needs_overlay = pytest.mark.skipif(overlay.supported() is not None,
                                   reason=f"no overlay mounts here: {overlay.supported()}")


@needs_overlay
def test_a_fork_restored_to_its_own_snapshot_gets_an_empty_upper_layer(
        store: WorkspaceStore) -> None:
    store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                        from_checkpoint="snap_1")
    fork = store.layout.workspace("vol_f")
    snap = digest(_saved(store, "snap_1"))
    try:
        _change(fork)
        assert any(store.layout.upper("vol_f").iterdir())
        made = workspace_restore.restore(store, "vol_f", "snap_1")
        assert made.how == "upper-reset" and overlay.is_mounted(fork)
        assert not any(store.layout.upper("vol_f").iterdir()), "nothing copied"
        assert digest(fork) == snap
        (fork / "src" / "main.py").write_text("the fork writes again\n")
        assert digest(_saved(store, "snap_1")) == snap
    finally:
        store.delete_volume("vol_f")


@needs_overlay
def test_a_fork_restored_to_its_own_later_snapshot_is_exactly_that_tree(
        store: WorkspaceStore) -> None:
    store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                        from_checkpoint="snap_1")
    fork = store.layout.workspace("vol_f")
    try:
        _change(fork)
        time.sleep(0.02)
        store.checkpoint(checkpoint_id="snap_f1", cell_id="cell_f", volume_id="vol_f")
        wanted = digest(_saved(store, "snap_f1"))
        lower = digest(_saved(store, "snap_1"))
        shutil.rmtree(fork / "src")  # whatever the fork did since
        (fork / "moved").mkdir()
        (fork / "README2").write_text("x")
        made = workspace_restore.restore(store, "vol_f", "snap_f1")
        assert made.how == "upper-rebuilt" and overlay.is_mounted(fork)
        assert store.lower_of("vol_f") == "snap_1", "still standing on its own lower layer"
        assert digest(fork) == wanted
        (fork / "new.txt").write_text("rewritten")
        assert digest(_saved(store, "snap_f1")) == wanted
        assert digest(_saved(store, "snap_1")) == lower
        overlay.unmount(fork)
        store.ensure_mounted("vol_f")  # as after a reboot: the same tree comes back
        assert entries(fork)["src/main.py"] == entries(_saved(store, "snap_f1"))["src/main.py"]
    finally:
        store.delete_volume("vol_f")


def test_changes_name_hostile_paths_escaped_and_short(store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    (workspace / "evil\x1b[2J\nname").write_text("x")
    (workspace / ("long" * 60)).write_text("x")
    found = workspace_restore.changes(workspace, _saved(store, "snap_1"))
    assert found.added == 2
    assert all("\x1b" not in e and "\n" not in e and len(e) <= 120 for e in found.examples)
    assert any("\\x1b" in e for e in found.examples)


def test_the_checkpoint_after_a_restore_costs_what_changed_since(store: WorkspaceStore) -> None:
    """The restore records the copies it made: the next checkpoint links each file still
    unchanged to the restored checkpoint's (never to the workspace's) and copies the rest,
    including a rewrite that put size and mtime back (its ctime moved)."""
    workspace = store.layout.workspace("vol_1")
    saved = _saved(store, "snap_1")
    _change(workspace)
    time.sleep(0.02)
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    workspace_restore.restore(store, "vol_1", "snap_1")
    sneaky = workspace / "secret.key"
    st = os.stat(sneaky)
    sneaky.write_bytes(os.urandom(64))  # same size...
    os.utime(sneaky, ns=(st.st_atime_ns, st.st_mtime_ns))  # ...and mtime put back
    (workspace / "README").write_text("changed after the restore\n")
    time.sleep(0.02)
    meta = store.checkpoint(checkpoint_id="snap_3", cell_id="cell_1", volume_id="vol_1")
    after = _saved(store, "snap_3")
    assert meta["base"] == "snap_1" and meta["shared_files"] == 2  # main.py, run.sh
    assert os.stat(after / "src" / "main.py").st_ino == os.stat(saved / "src" / "main.py").st_ino
    assert os.stat(after / "secret.key").st_ino != os.stat(saved / "secret.key").st_ino
    assert digest(after) == digest(workspace)
    assert not inodes(workspace) & inodes(after), "never a link into the live workspace"


def test_capacity_counts_a_restored_workspace_clean_until_it_changes(
        store: WorkspaceStore) -> None:
    """`get cells -o wide` (capacity accounting) compares a restored workspace with the
    checkpoint it was restored from, as the next checkpoint does: clean, then one file."""
    from devcell.backends.container import capacity as container_capacity

    workspace = store.layout.workspace("vol_1")
    _change(workspace)
    time.sleep(0.02)
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    workspace_restore.restore(store, "vol_1", "snap_1")
    clean = container_capacity.workspace_usage(store, "vol_1")
    assert clean is not None and clean.since == "snap_1" and clean.changed_files == 0
    (workspace / "README").write_text("changed after the restore\n")
    dirty = container_capacity.workspace_usage(store, "vol_1")
    assert dirty is not None and dirty.changed_files == 1


def test_a_snapshot_of_an_unchanged_workspace_restores_from_the_tree_it_names(
        store: WorkspaceStore) -> None:
    """snap_2 names snap_1's tree (nothing changed between them): restoring it brings that
    tree back, and the next checkpoint links the unchanged files into that tree."""
    workspace = store.layout.workspace("vol_1")
    time.sleep(0.02)
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    assert store.tree_of("snap_2") == store.tree_of("snap_1")
    before = digest(store.tree_of("snap_2"))
    _change(workspace)
    workspace_restore.restore(store, "vol_1", "snap_2")
    assert digest(workspace) == before
    time.sleep(0.02)
    meta = store.checkpoint(checkpoint_id="snap_3", cell_id="cell_1", volume_id="vol_1")
    assert meta["base"] == "snap_2" and meta["shared_files"] > 0
    assert digest(store.tree_of("snap_3")) == before == digest(store.tree_of("snap_2"))


def test_the_gate_sees_a_rewrite_that_put_size_and_mtime_back(store: WorkspaceStore) -> None:
    """`changed_since` (what the restore and delete approval gates ask) reads a restored
    workspace as the snapshot it was restored from until a file changes, even a rewrite with
    its size and mtime put back: otherwise `snapshot restore --no-safety-snapshot` replaced
    that work without asking."""
    workspace = store.layout.workspace("vol_1")
    sneaky = workspace / "secret.key"
    st = os.stat(sneaky)
    sneaky.write_bytes(os.urandom(64))
    os.utime(sneaky, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.changed_since("vol_1", "snap_1")
    workspace_restore.restore(store, "vol_1", "snap_1")
    assert not store.changed_since("vol_1", "snap_1")
    st = os.stat(sneaky)
    sneaky.write_bytes(os.urandom(64))
    os.utime(sneaky, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.changed_since("vol_1", "snap_1")
    shown = workspace_restore.changes(workspace, store.tree_of("snap_1"),
                                      frozenset(store.rewritten_since("vol_1", "snap_1")))
    assert shown.examples == ("~secret.key",)  # what the dry run names
