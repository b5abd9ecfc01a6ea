"""The workspace store never removes a user's files on its own: a directory standing where a
new volume or checkpoint goes, without DevCell's marker, is removed only when it holds no
files; one that holds files is refused, named, and left as it was (the marker may be what was
lost). No engine needed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.errors import BackendError, BackendRefused


@pytest.fixture
def store(tmp_path: Path) -> WorkspaceStore:
    return WorkspaceStore(Layout(tmp_path / "state"))


def test_an_unmarked_volume_with_files_is_refused_and_kept(store: WorkspaceStore) -> None:
    workspace = store.layout.workspace("vol_1")
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("a week of work")  # volume.json was lost
    with pytest.raises(BackendRefused, match="holds files .* but no volume.json"):
        store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                            from_checkpoint=None)
    assert (workspace / "notes.txt").read_text() == "a week of work"
    assert [p.name for p in store.layout.volumes.iterdir()] == ["vol_1"]  # no temporary left


def test_an_unmarked_checkpoint_with_files_is_refused_and_kept(store: WorkspaceStore) -> None:
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    stray = store.layout.checkpoint("snap_1") / "workspace"
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("the only copy")
    with pytest.raises(BackendRefused, match="no checkpoint.json"):
        store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    assert (stray / "notes.txt").read_text() == "the only copy"


def test_an_empty_unmarked_leftover_makes_way(store: WorkspaceStore) -> None:
    (store.layout.workspace("vol_1")).mkdir(parents=True)
    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    assert store.volume_exists("vol_1")
    (store.layout.checkpoint("snap_1")).mkdir(parents=True)
    assert store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    assert store.find_checkpoint("snap_1") is not None


def test_a_full_disk_is_a_step_error_and_leaves_nothing_half_made(tmp_path: Path) -> None:
    """No space for a checkpoint or a volume: a BackendError naming the cause (the step's
    recorded error), no temporary left behind, the workspace intact."""
    from devcell.backends.host import temporaries
    from tests.store import faulty

    with faulty.small_disk(tmp_path / "disk", "8m") as disk:
        store = WorkspaceStore(Layout(disk / "state"))
        store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                            from_checkpoint=None)
        work = store.layout.workspace("vol_1")
        (work / "data.bin").write_bytes(b"x" * (3 << 20))
        faulty.fill(disk)
        with pytest.raises(BackendError, match="No space left on device"):
            store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
        with pytest.raises(BackendError, match="No space left on device"):
            store.create_volume(cell_id="cell_2", cell_name="db", volume_id="vol_2",
                                from_checkpoint=None)
        for parent in (store.layout.checkpoints, store.layout.volumes):
            assert [n for n in os.listdir(parent) if n.startswith(
                (temporaries.TMP, temporaries.TRASH))] == []
        assert (work / "data.bin").stat().st_size == 3 << 20


def _recorded_volume(store: WorkspaceStore) -> Path:
    import time

    store.create_volume(cell_id="cell_1", cell_name="api", volume_id="vol_1",
                        from_checkpoint=None)
    work = store.layout.workspace("vol_1")
    for i in range(8):
        (work / f"f{i}").write_bytes(b"%d" % i * 100)
    time.sleep(0.05)  # older than the checkpoint's clock tick: vouched for
    store.checkpoint(checkpoint_id="snap_1", cell_id="cell_1", volume_id="vol_1")
    return work


def test_a_sources_record_altered_by_one_byte_vouches_for_nothing(store: WorkspaceStore) -> None:
    from devcell.backends.container import workspaces

    work = _recorded_volume(store)
    record = store.layout.checkpoint("snap_1") / workspaces.SOURCES
    assert workspaces._read_sources(record, "vol_1") is not None
    assert workspaces._read_sources(record, "vol_2") is None  # another volume's
    data = bytearray(record.read_bytes())
    data[-3] ^= 0x01
    record.write_bytes(bytes(data))
    assert workspaces._read_sources(record, "vol_1") is None
    record.write_bytes(bytes(data[:len(data) // 2]))  # cut short
    assert workspaces._read_sources(record, "vol_1") is None
    (work / "f0").write_bytes(b"changed")
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    meta = store.find_checkpoint("snap_2") or {}
    assert meta["shared_files"] == 0 and "over" not in meta  # a full copy, never a wrong one
    assert (store.tree_of("snap_2") / "f1").read_bytes() == b"1" * 100


def test_a_record_in_an_earlier_builds_json_is_still_shared_from(store: WorkspaceStore) -> None:
    import json

    from devcell.backends.container import workspaces

    work = _recorded_volume(store)
    home = store.layout.checkpoint("snap_1")
    sources = workspaces._read_sources(home / workspaces.SOURCES, "vol_1")
    assert sources is not None
    (home / workspaces.SOURCES).unlink()
    (home / workspaces.LEGACY_SOURCES).write_text(json.dumps({
        "version": workspaces.SOURCES_VERSION, "volume": "vol_1", "stamp": sources.stamp,
        "entries": sources.entries}))
    (work / "f0").write_bytes(b"changed")
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_1", volume_id="vol_1")
    assert (store.find_checkpoint("snap_2") or {})["shared_files"] == 7


def test_a_checkpoint_lists_the_checkpoints_once_and_shares_with_its_volumes_latest(
        store: WorkspaceStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every volume's checkpoints share one directory, and finding a volume's latest reads
    each one's record: a checkpoint after a change looks once (it looked three times, each
    ~0.1 ms of CPU per checkpoint in the state directory), and still links its unchanged
    files to its own volume's latest checkpoint, not to another volume's newer one."""
    for volume in ("vol_1", "vol_2"):
        store.create_volume(cell_id=f"cell_{volume}", cell_name=volume, volume_id=volume,
                            from_checkpoint=None)
        (store.layout.workspace(volume) / "kept.txt").write_text(f"kept in {volume}")
        (store.layout.workspace(volume) / "changed.txt").write_text("first")
    store.checkpoint(checkpoint_id="snap_1", cell_id="cell_vol_1", volume_id="vol_1")
    store.checkpoint(checkpoint_id="snap_2", cell_id="cell_vol_2", volume_id="vol_2")
    (store.layout.workspace("vol_1") / "changed.txt").write_text("second")
    listed = []
    original = store.latest_checkpoint_of_volume

    def counted(volume_id: str) -> str | None:
        listed.append(volume_id)
        return original(volume_id)

    monkeypatch.setattr(store, "latest_checkpoint_of_volume", counted)
    meta = store.checkpoint(checkpoint_id="snap_3", cell_id="cell_vol_1", volume_id="vol_1")
    assert listed == ["vol_1"]
    assert meta["base"] == "snap_1" and meta["shared_files"] == 1
    new, old = (store.layout.checkpoint(c) / "workspace" for c in ("snap_3", "snap_1"))
    assert (new / "kept.txt").stat().st_ino == (old / "kept.txt").stat().st_ino
    assert (new / "changed.txt").read_text() == "second"
