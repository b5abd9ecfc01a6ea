"""The file store beyond the shared contract: layout, permissions, atomic writes, temp files,
symbolic links, and the translation of operating system errors."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from devcell.runs import StorageError, create_file_snapshot_store, file_store
from devcell.runs.file_store import FileSnapshotStore
from tests.runs.helpers import make_snapshot

RUN_ID = "op_0001"


@pytest.fixture
def store(tmp_path: Path) -> FileSnapshotStore:
    return create_file_snapshot_store(root=tmp_path / "state")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def temps(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if file_store.is_temp_name(p.name))


def plant_temp(run_dir: Path, pid: int = 999999) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = run_dir / f"{file_store.TEMP_PREFIX}{pid}.deadbeef{file_store.TEMP_SUFFIX}"
    temp.write_bytes(b'{"checksum":"sha256:half-writ')
    return temp


# -- layout and permissions -------------------------------------------------------------------

def test_layout_and_owner_only_permissions(tmp_path: Path) -> None:
    old_umask = os.umask(0)  # even with the most permissive umask
    try:
        store = create_file_snapshot_store(root=tmp_path / "state")
        store.save(make_snapshot(RUN_ID))
    finally:
        os.umask(old_umask)
    path = tmp_path / "state" / "runs" / RUN_ID / "snapshot.json"
    assert store.path_of(RUN_ID) == path
    assert mode(tmp_path / "state" / "runs") == 0o700
    assert mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert sorted(os.listdir(path.parent)) == ["snapshot.json"]


def test_loose_directories_are_tightened(store: FileSnapshotStore) -> None:
    run_dir = store.runs_dir / RUN_ID
    run_dir.mkdir(parents=True)
    os.chmod(store.runs_dir, 0o755)
    os.chmod(run_dir, 0o777)
    store.save(make_snapshot(RUN_ID))
    assert mode(store.runs_dir) == 0o700
    assert mode(run_dir) == 0o700


def test_existing_root_is_left_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    create_file_snapshot_store(root=root).save(make_snapshot(RUN_ID))
    assert mode(root) == 0o755


def test_file_format(store: FileSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    data = store.path_of(RUN_ID).read_bytes()
    assert data.endswith(b"}\n") and data.count(b"\n") == 1
    document = json.loads(data)
    assert list(document) == ["checksum", "snapshot"]
    assert document["checksum"].startswith("sha256:")
    assert document["snapshot"]["runId"] == RUN_ID
    assert document["snapshot"]["version"] == 1
    assert document["snapshot"]["status"] == "suspended"


def test_reformatted_file_still_loads(store: FileSnapshotStore) -> None:
    """The checksum covers the snapshot's content, not its whitespace: a human may pretty-print."""
    store.save(make_snapshot(RUN_ID))
    path = store.path_of(RUN_ID)
    path.write_text(json.dumps(json.loads(path.read_bytes()), indent=4))
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)


# -- stale temporary files --------------------------------------------------------------------

def test_save_removes_stale_temp_files(store: FileSnapshotStore) -> None:
    run_dir = store.runs_dir / RUN_ID
    plant_temp(run_dir)
    (run_dir / "notes.txt").write_text("not ours to remove")
    store.save(make_snapshot(RUN_ID))
    assert temps(run_dir) == []
    assert (run_dir / "notes.txt").exists()


def test_load_removes_stale_temp_files(store: FileSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    run_dir = store.runs_dir / RUN_ID
    plant_temp(run_dir, pid=1)
    plant_temp(run_dir, pid=2)
    assert len(temps(run_dir)) == 2
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)
    assert temps(run_dir) == []


def test_removing_stale_temp_files_is_logged(store: FileSnapshotStore) -> None:
    messages: list[str] = []
    logger.enable("devcell")
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING",
                      diagnose=False)
    try:
        plant_temp(store.runs_dir / RUN_ID)
        store.save(make_snapshot(RUN_ID))
    finally:
        logger.remove(sink)
    assert len(messages) == 1
    assert "removed 1 temporary file(s)" in messages[0] and "interrupted save" in messages[0]


def test_load_of_a_run_with_only_a_temp_file(store: FileSnapshotStore) -> None:
    """A first save killed before its rename: nothing to load, and the leftover goes."""
    run_dir = store.runs_dir / RUN_ID
    plant_temp(run_dir)
    assert store.load(RUN_ID) is None
    assert temps(run_dir) == []


def test_load_leaves_temp_files_to_an_active_writer(store: FileSnapshotStore) -> None:
    """While a save holds the run's lock its temp file is live: a load must not remove it."""
    store.save(make_snapshot(RUN_ID))
    run_dir = store.runs_dir / RUN_ID
    live = plant_temp(run_dir)
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what a concurrent save holds
        assert store.load(RUN_ID) == make_snapshot(RUN_ID)
        assert live.exists()
    finally:
        os.close(fd)
    store.load(RUN_ID)
    assert not live.exists()


def test_delete_removes_the_run_directory(store: FileSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    plant_temp(store.runs_dir / RUN_ID)
    store.delete(RUN_ID)
    assert not (store.runs_dir / RUN_ID).exists()


def test_delete_keeps_files_it_did_not_write(store: FileSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    (store.runs_dir / RUN_ID / "notes.txt").write_text("keep me")
    store.delete(RUN_ID)
    assert store.load(RUN_ID) is None
    assert (store.runs_dir / RUN_ID / "notes.txt").exists()


def test_no_store_directory_until_first_save(tmp_path: Path) -> None:
    store = create_file_snapshot_store(root=tmp_path / "state")
    assert store.load(RUN_ID) is None
    store.delete(RUN_ID)
    assert not (tmp_path / "state").exists()


# -- symbolic links ---------------------------------------------------------------------------

def test_symlinked_run_directory_is_refused(store: FileSnapshotStore, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store.runs_dir.mkdir(parents=True)
    (store.runs_dir / RUN_ID).symlink_to(elsewhere)
    for call in (lambda: store.save(make_snapshot(RUN_ID)), lambda: store.load(RUN_ID)):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.code == StorageError.UNSAFE_PATH
        assert info.value.path == str(store.runs_dir / RUN_ID)
    assert list(elsewhere.iterdir()) == []


def test_symlinked_snapshot_file_is_refused(store: FileSnapshotStore, tmp_path: Path) -> None:
    other = create_file_snapshot_store(root=tmp_path / "other")
    other.save(make_snapshot(RUN_ID))
    run_dir = store.runs_dir / RUN_ID
    run_dir.mkdir(parents=True)
    (run_dir / "snapshot.json").symlink_to(other.path_of(RUN_ID))
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.UNSAFE_PATH
    assert info.value.path == str(store.path_of(RUN_ID))


def test_symlinked_runs_directory_is_refused(store: FileSnapshotStore, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    store.root.mkdir()
    store.runs_dir.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID))
    assert info.value.code == StorageError.UNSAFE_PATH


def test_symlinked_root_is_followed(tmp_path: Path) -> None:
    """The root is the caller's choice (a state directory may well be a link)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    store = create_file_snapshot_store(root=tmp_path / "link")
    store.save(make_snapshot(RUN_ID))
    assert (tmp_path / "real" / "runs" / RUN_ID / "snapshot.json").exists()


# -- operating system errors ------------------------------------------------------------------

def failing(real: Callable[..., Any], error: OSError, when: Callable[..., bool]
            ) -> Callable[..., Any]:
    def fake(*args: Any, **kwargs: Any) -> Any:
        if when(*args, **kwargs):
            raise error
        return real(*args, **kwargs)
    return fake


def is_temp(path: Any, *args: Any, **kwargs: Any) -> bool:
    return file_store.is_temp_name(os.path.basename(os.fsdecode(path)))


def is_snapshot(path: Any, *args: Any, **kwargs: Any) -> bool:
    return os.path.basename(os.fsdecode(path)) == "snapshot.json"


def always(*args: Any, **kwargs: Any) -> bool:
    return True


def assert_old_snapshot_intact(store: FileSnapshotStore) -> None:
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)
    assert temps(store.runs_dir / RUN_ID) == []


@pytest.mark.parametrize("error, code", [
    (PermissionError(errno.EACCES, "Permission denied"), StorageError.PERMISSION_DENIED),
    (PermissionError(errno.EPERM, "Operation not permitted"), StorageError.PERMISSION_DENIED),
    (OSError(errno.ENOSPC, "No space left on device"), StorageError.DISK_FULL),
    (OSError(errno.EROFS, "Read-only file system"), StorageError.READ_ONLY),
])
def test_save_cannot_create_its_temp_file(store: FileSnapshotStore, monkeypatch: Any,
                                          error: OSError, code: str) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "open", failing(os.open, error, is_temp))
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    assert info.value.code == code
    assert Path(info.value.path).parent == store.runs_dir / RUN_ID
    assert file_store.is_temp_name(Path(info.value.path).name)
    assert error.strerror is not None and error.strerror in info.value.reason
    monkeypatch.undo()
    assert_old_snapshot_intact(store)


@pytest.mark.parametrize("err, code", [(errno.ENOSPC, StorageError.DISK_FULL),
                                       (errno.EDQUOT, StorageError.DISK_FULL),
                                       (errno.EIO, StorageError.IO_ERROR)])
def test_disk_full_while_writing(store: FileSnapshotStore, monkeypatch: Any, err: int,
                                 code: str) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "write", failing(os.write, OSError(err, os.strerror(err)), always))
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    assert info.value.code == code
    assert "cannot write the snapshot" in info.value.reason
    monkeypatch.undo()
    assert_old_snapshot_intact(store)


def test_fsync_failure_is_reported_and_cleaned_up(store: FileSnapshotStore, monkeypatch: Any
                                                  ) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "fsync", failing(os.fsync, OSError(errno.EIO, "I/O error"), always))
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    assert info.value.code == StorageError.IO_ERROR
    monkeypatch.undo()
    assert_old_snapshot_intact(store)


def test_rename_failure(store: FileSnapshotStore, monkeypatch: Any) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "replace", failing(os.replace, PermissionError(
        errno.EACCES, "Permission denied"), always))
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    assert info.value.code == StorageError.PERMISSION_DENIED
    assert info.value.path == str(store.path_of(RUN_ID))
    monkeypatch.undo()
    assert_old_snapshot_intact(store)


def test_cannot_create_the_runs_directory(store: FileSnapshotStore, monkeypatch: Any) -> None:
    store.root.mkdir()
    monkeypatch.setattr(os, "mkdir", failing(os.mkdir, PermissionError(
        errno.EACCES, "Permission denied"), lambda path, *a, **k: str(path).endswith("runs")))
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID))
    assert info.value.code == StorageError.PERMISSION_DENIED
    assert info.value.path == str(store.runs_dir)
    assert "cannot create the runs directory" in info.value.reason


def test_load_permission_denied(store: FileSnapshotStore, monkeypatch: Any) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "open", failing(os.open, PermissionError(
        errno.EACCES, "Permission denied"), is_snapshot))
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.PERMISSION_DENIED
    assert info.value.path == str(store.path_of(RUN_ID))
    assert "Permission denied" in info.value.reason


def test_load_read_error(store: FileSnapshotStore, monkeypatch: Any) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "read", failing(os.read, OSError(errno.EIO, "I/O error"), always))
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.IO_ERROR
    assert info.value.path == str(store.path_of(RUN_ID))


def test_delete_permission_denied(store: FileSnapshotStore, monkeypatch: Any) -> None:
    store.save(make_snapshot(RUN_ID))
    monkeypatch.setattr(os, "unlink", failing(os.unlink, PermissionError(
        errno.EPERM, "Operation not permitted"), is_snapshot))
    with pytest.raises(StorageError) as info:
        store.delete(RUN_ID)
    assert info.value.code == StorageError.PERMISSION_DENIED
    assert info.value.path == str(store.path_of(RUN_ID))
    monkeypatch.undo()
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unreadable_run_directory(store: FileSnapshotStore) -> None:  # pragma: no cover (root CI)
    store.save(make_snapshot(RUN_ID))
    os.chmod(store.runs_dir / RUN_ID, 0)
    try:
        with pytest.raises(StorageError) as info:
            store.load(RUN_ID)
        assert info.value.code == StorageError.PERMISSION_DENIED
    finally:
        os.chmod(store.runs_dir / RUN_ID, 0o700)


# -- concurrency ------------------------------------------------------------------------------

def test_concurrent_saves_loads_and_deletes(store: FileSnapshotStore) -> None:
    """Writers, a reader and a deleter on one run: no errors, and only whole snapshots."""
    variants = [make_snapshot(RUN_ID, plan_id=f"plan_{i}") for i in range(3)]
    errors: list[BaseException] = []

    def run(action: Callable[[int], None]) -> None:
        try:
            for i in range(40):
                action(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def read(_: int) -> None:
        loaded = store.load(RUN_ID)
        assert loaded is None or loaded in variants

    threads = [threading.Thread(target=run, args=(lambda i, v=v: store.save(v),))
               for v in variants]
    threads.append(threading.Thread(target=run, args=(read,)))
    threads.append(threading.Thread(target=run, args=(lambda i: store.delete(RUN_ID)
                                                      if i % 5 == 0 else None,)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    final = store.load(RUN_ID)
    assert final is None or final in variants
    if (store.runs_dir / RUN_ID).exists():
        assert temps(store.runs_dir / RUN_ID) == []


# -- what a crash or a long-lived process would notice (mutation survivors) ---------------------


def test_only_names_with_both_the_temp_prefix_and_suffix_are_temporaries() -> None:
    assert file_store.is_temp_name(".snapshot.json.123.ab12cd34.tmp")
    for name in ("snapshot.json", ".snapshot.json.notes", "keep.tmp", ".snapshot.json.tmp.bak"):
        assert not file_store.is_temp_name(name), name


def test_a_save_fsyncs_the_file_before_the_rename_and_the_directory_after(
        store: FileSnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Durable means: the bytes reach the disk before the rename makes them the snapshot, and
    the rename itself reaches it before save returns."""
    synced: list[str] = []
    real = file_store._fsync

    def noting(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(file_store, "_fsync", noting)
    store.save(make_snapshot(RUN_ID))
    run_dir = str(store.runs_dir / RUN_ID)
    temp = [p for p in synced if file_store.is_temp_name(os.path.basename(p))]
    assert len(temp) == 1 and os.path.dirname(temp[0]) == run_dir
    assert synced.index(temp[0]) < synced.index(run_dir)  # the file, then its directory
    assert synced[-1] == run_dir


def test_saves_loads_and_deletes_leak_no_descriptor(store: FileSnapshotStore) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    store.save(make_snapshot(RUN_ID))
    store.load(RUN_ID)
    before = open_fds()
    for _ in range(20):
        store.save(make_snapshot(RUN_ID))
        assert store.load(RUN_ID) is not None
        assert store.load("op_missing") is None
    store.delete(RUN_ID)
    store.delete(RUN_ID)
    assert open_fds() == before


def test_a_delete_fsyncs_the_run_directory_and_the_runs_directory(
        store: FileSnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete that returned stays done after a power loss (else a spent approval could
    come back and be resumed twice)."""
    store.save(make_snapshot(RUN_ID))
    synced: list[str] = []
    real = file_store._fsync

    def noting(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(file_store, "_fsync", noting)
    store.delete(RUN_ID)
    run_dir = str(store.runs_dir / RUN_ID)
    # the run directory is fsynced after its files are removed, before it is itself removed
    assert synced == [run_dir, str(store.runs_dir)]


def test_a_huge_snapshot_file_is_refused_after_a_bounded_read(
        store: FileSnapshotStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 MiB (sparse) snapshot.json is refused as too large, reading at most one chunk
    past the limit, never the whole file."""
    from devcell.runs import envelope

    store.save(make_snapshot(RUN_ID))
    with open(store.path_of(RUN_ID), "r+b") as f:
        f.truncate(64 << 20)
    read = 0
    real = os.read

    def counting(fd: int, n: int) -> bytes:
        nonlocal read
        data = real(fd, n)
        read += len(data)
        return data

    monkeypatch.setattr(os, "read", counting)
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.CORRUPT_SNAPSHOT and "limit" in info.value.reason
    assert read <= envelope.MAX_BYTES + (1 << 20)


def test_a_failed_rename_leaves_no_temporary_file(store: FileSnapshotStore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store.save(make_snapshot(RUN_ID))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(StorageError):
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    monkeypatch.undo()
    assert temps(store.runs_dir / RUN_ID) == []
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)
