"""Checkpoints that cost what changed, forks that cost nothing up front (no engine needed).

A checkpoint shares each file unchanged since the volume's previous checkpoint (a hard link to
it) and copies the rest; a fork is an overlay on its checkpoint where this machine allows it.
Whatever a process does in a workspace or a fork, through every path it has (rewrite in
place, truncate, append, rename over, hard link, chmod, chown, times put back), no checkpoint
ever changes, and no checkpoint shares an inode with a live workspace.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import pytest

from devcell.backends.container import overlay, workspaces
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import temporaries, treecopy

FILES = 100
can_mount = pytest.mark.skipif(overlay.supported() is not None,
                               reason=f"no overlay here: {overlay.supported()}")


@pytest.fixture
def store(tmp_path: Path) -> WorkspaceStore:
    return WorkspaceStore(Layout(tmp_path / "state"))


def tree(root: Path) -> dict[str, tuple[object, ...]]:
    """Everything a copy must keep of each entry: type, mode, owner, mtime, contents."""
    found: dict[str, tuple[object, ...]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                body: object = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            else:
                body = None
            mtime = None if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            found[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid,
                          st.st_gid, mtime, body)
    return found


def inodes(root: Path) -> set[tuple[int, int]]:
    return {(st.st_dev, st.st_ino) for d, _, files in os.walk(root)
            for st in (os.lstat(Path(d) / f) for f in files)}


def fill(workspace: Path, files: int = FILES) -> None:
    for i in range(files):
        directory = workspace / f"d{i % 10}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{i:03d}").write_bytes(os.urandom(64) + b"%d" % i)
    os.symlink("d0/f000", workspace / "link")
    os.mkfifo(workspace / "fifo")


def change_every_way(workspace: Path) -> set[str]:
    """Change files through every path a process has; the relative paths changed."""
    w = workspace
    with open(w / "d0/f010", "r+b") as f:  # rewrite in place, same size
        f.write(b"X" * 8)
    os.truncate(w / "d1/f011", 3)  # truncate
    with open(w / "d2/f012", "ab") as f:  # append
        f.write(b"more")
    (w / "d3/new").write_bytes(b"replacement")  # rename over
    os.rename(w / "d3/new", w / "d3/f013")
    os.link(w / "d4/f014", w / "d4/alias")  # hard link, then write through the link
    with open(w / "d4/alias", "ab") as f:
        f.write(b"via the link")
    os.chmod(w / "d5/f015", 0o600)  # chmod
    os.chown(w / "d6/f016", 1234, 1234)  # chown
    st = (w / "d7/f017").stat()  # rewritten with the same size, times put back
    (w / "d7/f017").write_bytes(b"Y" * st.st_size)
    os.utime(w / "d7/f017", ns=(st.st_atime_ns, st.st_mtime_ns))
    return {"d0/f010", "d1/f011", "d2/f012", "d3/f013", "d4/f014", "d4/alias", "d5/f015",
            "d6/f016", "d7/f017"}


def take(store: WorkspaceStore, checkpoint_id: str, volume_id: str = "vol_1", *,
         frozen: bool = True) -> Path:
    """A checkpoint as the container backend takes one: its writers (this test) are still
    while it runs (`frozen`)."""
    store.checkpoint(checkpoint_id=checkpoint_id, cell_id="cell_1", volume_id=volume_id,
                     frozen=frozen)
    return store.tree_of(checkpoint_id)


@pytest.fixture
def volume(store: WorkspaceStore) -> Path:
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    workspace = store.layout.workspace("vol_1")
    fill(workspace)
    # older than the checkpoint's clock tick: recorded as sources, not "racily clean"
    for directory, _, files in os.walk(workspace):
        for name in files:
            os.utime(Path(directory) / name, ns=(10**18, 10**18), follow_symlinks=False)
    time.sleep(0.05)  # and their ctimes older than the checkpoint's clock tick
    return workspace


def test_a_second_checkpoint_shares_what_did_not_change(store: WorkspaceStore,
                                                        volume: Path) -> None:
    first = take(store, "snap_1")
    kept = tree(first)
    changed = change_every_way(volume)
    second = take(store, "snap_2")
    assert tree(second) == tree(volume), "the checkpoint is exactly the workspace"
    assert tree(first) == kept, "the earlier checkpoint did not change"
    for rel in tree(second):
        path = second / rel
        if not stat.S_ISREG(path.lstat().st_mode):
            continue
        shared = (first / rel).exists() and path.stat().st_ino == (first / rel).stat().st_ino
        assert shared == (rel not in changed), f"{rel}: shared={shared}"
    assert os.stat(second / "d4/f014").st_ino == os.stat(second / "d4/alias").st_ino
    meta = store.find_checkpoint("snap_2") or {}
    assert meta["base"] == "snap_1" and meta["shared_files"] == FILES - 8


def test_no_checkpoint_shares_an_inode_with_the_live_workspace(store: WorkspaceStore,
                                                               volume: Path) -> None:
    take(store, "snap_1")
    change_every_way(volume)
    take(store, "snap_2")
    saved = {cp: tree(store.tree_of(cp)) for cp in ("snap_1", "snap_2")}
    live = inodes(volume)
    for cp in saved:
        assert not live & inodes(store.tree_of(cp))
    for directory, _, files in os.walk(volume):  # every file rewritten and chmodded in place
        for name in files:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                with open(path, "r+b") as f:
                    f.write(b"overwritten")
                os.chmod(path, 0o777)
    assert {cp: tree(store.tree_of(cp)) for cp in saved} == saved


def test_a_checkpoint_outlives_the_one_it_shares_with(store: WorkspaceStore,
                                                      volume: Path) -> None:
    take(store, "snap_1")
    second = take(store, "snap_2")
    kept = tree(second)
    store.delete_checkpoint("snap_1")
    assert tree(second) == kept
    third = take(store, "snap_3")  # shares with snap_2 now
    assert (store.find_checkpoint("snap_3") or {})["base"] == "snap_2"
    assert tree(third) == tree(volume)


def test_a_file_changed_in_its_checkpoints_tick_is_never_trusted(store: WorkspaceStore,
                                                                 volume: Path) -> None:
    """A file whose times are not older than the checkpoint's clock could change again
    within the same tick unseen: it is copied by the next checkpoint, never shared."""
    os.utime(volume / "d0/f000", ns=(4 * 10**18, 4 * 10**18))  # "now or later"
    take(store, "snap_1")
    second = take(store, "snap_2")
    assert os.stat(second / "d0/f000").st_ino != os.stat(
        store.layout.checkpoint("snap_1") / "workspace/d0/f000").st_ino
    assert os.stat(second / "d1/f001").st_ino == os.stat(
        store.layout.checkpoint("snap_1") / "workspace/d1/f001").st_ino


def _fork(store: WorkspaceStore, snapshot: str, volume_id: str) -> Path:
    store.create_volume(cell_id=f"cell_{volume_id}", cell_name=volume_id, volume_id=volume_id,
                        from_checkpoint=snapshot)
    return store.layout.workspace(volume_id)


@can_mount
def test_a_fork_is_an_overlay_and_never_changes_its_snapshot_or_parent(
        store: WorkspaceStore, volume: Path) -> None:
    snap = take(store, "snap_1")
    saved, parent = tree(snap), tree(volume)
    fork = _fork(store, "snap_1", "vol_f")
    try:
        assert store.storage("vol_f") == workspaces.OVERLAY and overlay.is_mounted(fork)
        assert not any(store.layout.upper("vol_f").iterdir()), "nothing copied up front"
        assert tree(fork) == saved
        changed = change_every_way(fork)
        assert tree(snap) == saved, "the snapshot did not change"
        assert tree(volume) == parent, "the parent did not change"
        mine = take(store, "snap_f", "vol_f")
        assert tree(mine) == tree(fork)
        for rel in ("d0/f000", "d9/f099"):  # unchanged: the snapshot's own file
            assert os.stat(mine / rel).st_ino == os.stat(snap / rel).st_ino
        for rel in changed:
            assert os.stat(mine / rel).st_ino != os.stat(fork / rel).st_ino
            if (snap / rel).exists():
                assert os.stat(mine / rel).st_ino != os.stat(snap / rel).st_ino
        assert tree(snap) == saved
    finally:
        store.delete_volume("vol_f")
    assert not overlay.is_mounted(fork) and not store.layout.volume("vol_f").exists()
    assert tree(snap) == saved


@can_mount
def test_a_fork_of_a_fork_stands_on_one_checkpoint(store: WorkspaceStore,
                                                   volume: Path) -> None:
    """A fork's checkpoint is a complete tree of its own: a fork of it is one layer deep."""
    take(store, "snap_1")
    fork = _fork(store, "snap_1", "vol_f")
    (fork / "d0/f000").write_bytes(b"first fork")
    take(store, "snap_f", "vol_f")
    store.delete_volume("vol_f")
    store.delete_checkpoint("snap_1")  # what the first fork stood on is gone
    again = _fork(store, "snap_f", "vol_g")
    try:
        assert store.lower_of("vol_g") == "snap_f"
        assert (again / "d0/f000").read_bytes() == b"first fork"
        assert (again / "d9/f099").read_bytes() == (volume / "d9/f099").read_bytes()
    finally:
        store.delete_volume("vol_g")


@can_mount
def test_a_fork_is_mounted_again_after_a_reboot(store: WorkspaceStore, volume: Path) -> None:
    take(store, "snap_1")
    fork = _fork(store, "snap_1", "vol_f")
    (fork / "mine").write_text("kept in upper")
    overlay.unmount(fork)  # what a reboot does
    assert not (fork / "mine").exists()
    assert store.volume_exists("vol_f") and store.content("volume", "vol_f") is not None
    assert store.changed_since("vol_f", "snap_1")  # reading it mounts it again first
    assert overlay.is_mounted(fork) and (fork / "mine").read_text() == "kept in upper"
    store.delete_volume("vol_f")


def test_where_overlay_cannot_be_mounted_a_fork_is_a_copy(store: WorkspaceStore, volume: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    snap = take(store, "snap_1")
    saved = tree(snap)
    monkeypatch.setattr(overlay, "supported", lambda: "no overlay on this machine")
    made = store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                               from_checkpoint="snap_1")
    fork = store.layout.workspace("vol_f")
    assert made.storage == workspaces.COPY and made.copy_reason == "no overlay on this machine"
    assert tree(fork) == saved and not inodes(fork) & inodes(snap)
    change_every_way(fork)
    assert tree(snap) == saved


@can_mount
def test_a_mount_left_in_a_dead_temporary_is_detached_when_it_is_removed(
        store: WorkspaceStore, volume: Path) -> None:
    """A crash between mounting a fork and recording it leaves a mount in a temporary:
    removing the temporary detaches it, and the checkpoint below keeps every file."""
    snap = take(store, "snap_1")
    saved = tree(snap)
    dead = store.layout.volumes / f"{temporaries.TMP}vol_x-1.1-ab"
    for sub in ("upper", "work", "workspace"):
        (dead / sub).mkdir(parents=True)
    overlay.mount(lower=snap, upper=dead / "upper", work=dead / "work",
                  target=dead / "workspace")
    treecopy.remove_tree(dead, temporaries.trash(store.layout.volumes))
    assert not dead.exists()
    assert not [n for n in os.listdir(store.layout.volumes) if n.startswith(".")]
    assert tree(snap) == saved


# -- an unchanged workspace: a checkpoint that names the previous tree ----------------------


def test_an_unchanged_workspace_is_checkpointed_by_naming_the_previous_tree(
        store: WorkspaceStore, volume: Path) -> None:
    first = take(store, "snap_1")
    second = take(store, "snap_2")
    meta = store.find_checkpoint("snap_2") or {}
    assert meta[workspaces.SAME_AS] == "snap_1" and meta["base"] == "snap_1"
    assert meta["files"] == FILES + 2 and meta["shared_files"] == FILES + 2
    assert second == first and not (store.layout.checkpoint("snap_2") / "workspace").exists()
    assert store.checkpoint_files("snap_2") == first and tree(second) == tree(volume)
    third = take(store, "snap_3")  # names snap_1 too, never a chain of names
    assert (store.find_checkpoint("snap_3") or {})[workspaces.SAME_AS] == "snap_1"
    (volume / "d0/f000").write_bytes(b"changed")
    fourth = take(store, "snap_4")  # a tree of its own, sharing the rest with snap_1's
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_4") or {})
    assert tree(fourth) == tree(volume) and tree(third) != tree(fourth)
    assert os.stat(fourth / "d1/f001").st_ino == os.stat(first / "d1/f001").st_ino
    assert os.stat(fourth / "d0/f000").st_ino != os.stat(first / "d0/f000").st_ino


def _put_back_times(path: Path, st: os.stat_result) -> None:
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


CHANGES = {
    "rewritten in place, times put back": lambda w: (
        (st := (w / "d0/f000").stat(), (w / "d0/f000").write_bytes(b"Z" * st.st_size),
         _put_back_times(w / "d0/f000", st))),
    "chmod of a file": lambda w: os.chmod(w / "d1/f001", 0o600),
    "chmod of a directory": lambda w: os.chmod(w / "d2", 0o700),
    "chown of a file": lambda w: os.chown(w / "d3/f003", 4321, 4321),
    "a new empty file, directory times put back": lambda w: (
        (st := (w / "d4").stat(), (w / "d4/new").touch(), _put_back_times(w / "d4", st))),
    "a file removed": lambda w: (w / "d5/f005").unlink(),
    "a hard link made": lambda w: os.link(w / "d6/f006", w / "d6/again"),
    "a file renamed over another": lambda w: os.rename(w / "d7/f007", w / "d7/f017"),
    "a symbolic link replaced": lambda w: ((w / "link").unlink(),
                                           os.symlink("d1/f001", w / "link")),
    "an extended attribute set": lambda w: os.setxattr(w / "d8/f008", "user.devcell", b"x"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_makes_a_tree_of_its_own(store: WorkspaceStore, volume: Path,
                                            change: str) -> None:
    first = take(store, "snap_1")
    saved = tree(first)
    CHANGES[change](volume)
    second = take(store, "snap_2")
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_2") or {})
    assert tree(second) == tree(volume) and tree(first) == saved


def test_a_change_in_the_previous_checkpoints_tick_is_never_trusted(
        store: WorkspaceStore, volume: Path) -> None:
    """An entry whose times are not older than the checkpoint's clock could change again
    within that tick unseen: the next checkpoint never merely names that tree."""
    os.utime(volume / "d0/f000", ns=(4 * 10**18, 4 * 10**18))
    take(store, "snap_1")
    take(store, "snap_2")
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_2") or {})


def test_a_named_tree_outlives_the_checkpoint_that_made_it(store: WorkspaceStore,
                                                           volume: Path) -> None:
    take(store, "snap_1")
    take(store, "snap_2")
    take(store, "snap_3")
    saved = tree(volume)
    home = store.layout.checkpoint
    assert store.freed_by_deleting("snap_1") == []  # others name its tree
    assert store.freed_by_deleting("snap_2") == [home("snap_2")]
    store.delete_checkpoint("snap_1")  # snap_2 and snap_3 name its tree: it is retired
    assert store.find_checkpoint("snap_1") is None
    assert [cp for cp, _ in store.all_checkpoints()] == ["snap_2", "snap_3"]
    assert tree(store.tree_of("snap_2")) == saved == tree(store.checkpoint_files("snap_3"))
    store.delete_checkpoint("snap_2")
    assert store.freed_by_deleting("snap_3") == [home("snap_3"), home("snap_1")]
    assert tree(store.tree_of("snap_3")) == saved
    made = store.create_volume(cell_id="cell_f", cell_name="f", volume_id="vol_f",
                               from_checkpoint="snap_3")
    assert tree(store.layout.workspace("vol_f")) == saved
    if made.storage == workspaces.OVERLAY:  # after a reboot it is mounted on the same tree
        overlay.unmount(store.layout.workspace("vol_f"))
        assert store.ensure_mounted("vol_f")
        assert tree(store.layout.workspace("vol_f")) == saved
    store.delete_volume("vol_f")
    store.delete_checkpoint("snap_3")  # the last one naming the tree: it goes too
    assert os.listdir(store.layout.checkpoints) == []


def test_a_retired_tree_nothing_names_is_removed_by_the_next_delete(
        store: WorkspaceStore, volume: Path) -> None:
    """A kill between removing the last checkpoint naming a tree and removing the retired
    tree leaks it; any later delete reclaims it."""
    take(store, "snap_1")
    take(store, "snap_2")
    store.delete_checkpoint("snap_1")
    assert (store.layout.checkpoint("snap_1") / workspaces.RETIRED).is_file()
    treecopy.remove_tree(store.layout.checkpoint("snap_2"),  # what the kill left
                         temporaries.trash(store.layout.checkpoints))
    (volume / "d0/f000").write_bytes(b"changed")
    take(store, "snap_3")
    store.delete_checkpoint("snap_3")
    assert os.listdir(store.layout.checkpoints) == []


def test_a_checkpoint_never_names_a_tree_that_is_gone(store: WorkspaceStore,
                                                      volume: Path) -> None:
    take(store, "snap_1")
    treecopy.remove_tree(store.layout.checkpoint("snap_1") / "workspace",
                         temporaries.trash(store.layout.checkpoints))  # damaged by hand
    second = take(store, "snap_2")
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_2") or {})
    assert tree(second) == tree(volume)


# -- writes a stat does not see -------------------------------------------------------------


@pytest.mark.parametrize("frozen", [True, False])
def test_a_file_written_through_a_shared_mapping_after_a_checkpoint_is_copied(
        store: WorkspaceStore, volume: Path, frozen: bool) -> None:
    """A write through a writable shared mapping moves mtime and ctime only at the page
    fault that makes the page writable; later writes to a page already dirty change nothing
    a stat sees. A checkpoint therefore writes dirty pages back (which write-protects them)
    while the writers are frozen (before its walk too when they may not be), so the next
    write faults and moves the times: the next checkpoint neither names the previous tree
    (SAME_AS) nor shares the file."""
    import mmap

    path = volume / "d0/f000"
    size = path.stat().st_size
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mapped:
        mapped[:4] = b"ONE!"  # the fault: the times move, the page is now writable
        time.sleep(0.05)  # older than the checkpoint's clock tick: recorded as a source
        first = take(store, "snap_1", frozen=frozen)
        mapped[:4] = b"TWO!"  # no fault unless the checkpoint wrote the page back
    second = take(store, "snap_2", frozen=frozen)
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_2") or {})
    assert (second / "d0/f000").read_bytes()[:4] == b"TWO!"
    assert (first / "d0/f000").read_bytes()[:4] == b"ONE!"
    assert tree(second) == tree(volume)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mapped:
        mapped[4:8] = b"3RD!"  # the previous checkpoint was a tree of its own: same again
        time.sleep(0.05)
        take(store, "snap_3")
        mapped[4:8] = b"4TH!"
    fourth = take(store, "snap_4", frozen=frozen)
    assert (fourth / "d0/f000").read_bytes()[:8] == b"TWO!4TH!"


def test_a_mapping_written_across_a_checkpoint_naming_a_tree_is_seen(
        store: WorkspaceStore, volume: Path) -> None:
    """A checkpoint of frozen writers that finds nothing changed names the previous tree
    and writes nothing back: no page can have gone writable since the previous checkpoint
    wrote them back, or its file's times would have moved. So a mapping kept open across it
    still faults at its next write, and the checkpoint after sees the file changed."""
    import mmap

    path = volume / "d0/f000"
    size = path.stat().st_size
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mapped:
        mapped[:4] = b"ONE!"
        time.sleep(0.05)
        take(store, "snap_1")  # a tree: the page written back, write-protected
        time.sleep(0.05)
        take(store, "snap_2")  # nothing changed: names snap_1's tree
        assert (store.find_checkpoint("snap_2") or {}).get(workspaces.SAME_AS) == "snap_1"
        mapped[:4] = b"TWO!"  # faults: the times move
        third = take(store, "snap_3")
    assert workspaces.SAME_AS not in (store.find_checkpoint("snap_3") or {})
    assert (third / "d0/f000").read_bytes()[:4] == b"TWO!"
    assert tree(third) == tree(volume)


# -- the approval gates: what the next checkpoint would call changed ------------------------


def _rewrite_keeping_size_and_mtime(path: Path) -> None:
    st = path.stat()
    path.write_bytes(b"Z" * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("target", ["d3/f003", "d0/twin"])
def test_a_file_rewritten_with_its_size_and_mtime_put_back_counts_as_changed(
        store: WorkspaceStore, volume: Path, target: str) -> None:
    """What the delete and restore approval gates ask: a file rewritten with the same size
    and its mtime put back (cp -p, tar, rsync -t do it) is changed work, which its ctime
    tells (a file with two names too); the next checkpoint copies it, so the gate must not
    call it unchanged, also when that checkpoint only names an earlier tree (SAME_AS)."""
    os.link(volume / "d0/f000", volume / "d0/twin")
    time.sleep(0.05)
    take(store, "snap_0")
    take(store, "snap_1")  # names snap_0's tree: the record read is snap_0's
    assert (store.find_checkpoint("snap_1") or {}).get(workspaces.SAME_AS) == "snap_0"
    assert not store.changed_since("vol_1", "snap_1")
    _rewrite_keeping_size_and_mtime(volume / target)
    assert store.changed_since("vol_1", "snap_1")
    assert target in store.rewritten_since("vol_1", "snap_1")
    take(store, "snap_2")
    assert not store.changed_since("vol_1", "snap_2")


@can_mount
def test_a_fork_rewritten_with_size_and_mtime_put_back_counts_as_changed(
        store: WorkspaceStore, volume: Path) -> None:
    """A fork never checkpointed is compared with the checkpoint below it: a file rewritten
    with its size and mtime put back sits in the upper layer, so deleting the fork asks."""
    take(store, "snap_1")
    fork = _fork(store, "snap_1", "vol_f")
    try:
        assert not store.changed_since("vol_f", None)
        _rewrite_keeping_size_and_mtime(fork / "d3/f003")
        assert store.changed_since("vol_f", None)
        assert store.rewritten_since("vol_f", "snap_1") == {"d3/f003"}
    finally:
        store.delete_volume("vol_f")


# -- files with several links ---------------------------------------------------------------


@can_mount
def test_a_forks_checkpoint_shares_the_files_its_lower_checkpoint_shares_with_others(
        store: WorkspaceStore, volume: Path) -> None:
    """A second checkpoint's unchanged files are links to the first, so in a fork of it they
    have several links; the fork's checkpoint still shares them (what it changed, only, is
    copied), and two names of one file stay one file."""
    os.link(volume / "d0/f000", volume / "d0/twin")
    time.sleep(0.05)
    take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"a change, so snap_2 is a tree of its own")
    take(store, "snap_2")  # shares every other file with snap_1: two links each
    snap = store.tree_of("snap_2")
    assert os.stat(snap / "d9/f099").st_nlink == 2
    fork = _fork(store, "snap_2", "vol_f")
    try:
        (fork / "d5/f005").write_bytes(b"changed in the fork")
        mine = take(store, "snap_f", "vol_f")
        assert tree(mine) == tree(fork)
        meta = store.find_checkpoint("snap_f") or {}
        assert meta["shared_files"] == FILES  # every file but d5/f005, and both twins
        assert os.stat(mine / "d9/f099").st_ino == os.stat(snap / "d9/f099").st_ino
        assert os.stat(mine / "d5/f005").st_ino != os.stat(snap / "d5/f005").st_ino
        assert os.stat(mine / "d0/twin").st_ino == os.stat(mine / "d0/f000").st_ino
    finally:
        store.delete_volume("vol_f")


def test_names_of_one_file_are_shared_only_together(store: WorkspaceStore,
                                                    volume: Path) -> None:
    """Two names of one workspace file, both unchanged, are shared with the previous tree
    (still one file); when a third name is made, or the file changes, all its names are
    copied together, still one file, and the previous tree is untouched."""
    os.link(volume / "d0/f000", volume / "d0/twin")
    time.sleep(0.05)
    first = take(store, "snap_1")
    (volume / "d1/f001").write_bytes(b"a change, so snap_2 is a tree of its own")
    second = take(store, "snap_2")
    assert os.stat(second / "d0/twin").st_ino == os.stat(first / "d0/twin").st_ino
    assert os.stat(second / "d0/f000").st_ino == os.stat(first / "d0/f000").st_ino
    assert (store.find_checkpoint("snap_2") or {})["shared_files"] == FILES  # all but d1/f001
    saved = tree(first)
    os.link(volume / "d0/f000", volume / "d0/third")
    third = take(store, "snap_3")
    assert os.stat(third / "d0/twin").st_ino != os.stat(first / "d0/twin").st_ino
    assert os.stat(third / "d0/twin").st_ino == os.stat(third / "d0/third").st_ino \
        == os.stat(third / "d0/f000").st_ino
    assert tree(third) == tree(volume) and tree(first) == saved
