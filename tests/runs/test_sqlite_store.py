"""The SQLite store beyond the shared contract: first use, durability settings, permissions,
sharing a database, and the translation of SQLite and operating system errors."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from devcell.runs import StorageError, create_sqlite_snapshot_store, sqlite_store
from devcell.runs.sqlite_store import SqliteSnapshotStore
from tests.runs.helpers import make_snapshot

RUN_ID = "op_0001"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "runs.db"


@pytest.fixture
def store(db: Path) -> Any:
    s = create_sqlite_snapshot_store(path=db)
    yield s
    s.close()


def tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]


def test_nothing_is_created_until_first_use(store: SqliteSnapshotStore, db: Path) -> None:
    assert not db.exists()
    assert store.load(RUN_ID) is None
    assert tables(db) == ["run_snapshots"]


def test_durable_settings(store: SqliteSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    conn = store._connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_owner_only_permissions(tmp_path: Path) -> None:
    db = tmp_path / "fresh" / "runs.db"
    old_umask = os.umask(0)
    try:
        with create_sqlite_snapshot_store(path=db) as store:
            store.save(make_snapshot(RUN_ID))
            for suffix in ("", "-wal", "-shm"):
                assert stat.S_IMODE(os.stat(f"{db}{suffix}").st_mode) == 0o600, suffix
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


def test_shares_a_database_with_other_tables(db: Path) -> None:
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE objects (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO objects VALUES ('cell_1')")
    with create_sqlite_snapshot_store(path=db) as store:
        store.save(make_snapshot(RUN_ID))
        assert store.load(RUN_ID) == make_snapshot(RUN_ID)
    assert sorted(tables(db)) == ["objects", "run_snapshots"]


def test_two_stores_on_one_file_see_each_other(db: Path) -> None:
    with create_sqlite_snapshot_store(path=db) as a, create_sqlite_snapshot_store(path=db) as b:
        a.save(make_snapshot(RUN_ID))
        assert b.load(RUN_ID) == make_snapshot(RUN_ID)
        b.delete(RUN_ID)
        assert a.load(RUN_ID) is None


def test_a_forked_child_opens_its_own_connection(store: SqliteSnapshotStore) -> None:
    from tests.processes import forked

    store.save(make_snapshot(RUN_ID))

    def child() -> None:  # must not touch the parent's connection
        store.save(make_snapshot("op_child"))
        if store.load(RUN_ID) != make_snapshot(RUN_ID):
            os._exit(2)

    with forked(child) as proc:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                proc.status = status
                break
            time.sleep(0.01)
    assert proc.status is not None and os.waitstatus_to_exitcode(proc.status) == 0
    assert store.load("op_child") == make_snapshot("op_child")


def test_disk_full(store: SqliteSnapshotStore, db: Path) -> None:
    store.save(make_snapshot(RUN_ID))
    conn = store._connection()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # the database may not grow: SQLITE_FULL
    big = make_snapshot(RUN_ID, plan=["x" * 1000] * 200)
    with pytest.raises(StorageError) as info:
        store.save(big)
    assert info.value.code == StorageError.DISK_FULL
    assert info.value.path == str(db)
    assert "full" in info.value.reason
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)


def test_read_only_database(store: SqliteSnapshotStore, db: Path) -> None:
    store.save(make_snapshot(RUN_ID))
    store._connection().execute("PRAGMA query_only = ON")
    with pytest.raises(StorageError) as info:
        store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
    assert info.value.code == StorageError.READ_ONLY
    assert info.value.path == str(db)
    with pytest.raises(StorageError) as info:
        store.delete(RUN_ID)
    assert info.value.code == StorageError.READ_ONLY
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)


@pytest.mark.parametrize("error, code", [
    (PermissionError(errno.EACCES, "Permission denied"), StorageError.PERMISSION_DENIED),
    (OSError(errno.ENOSPC, "No space left on device"), StorageError.DISK_FULL),
    (OSError(errno.EROFS, "Read-only file system"), StorageError.READ_ONLY),
])
def test_cannot_open_the_database_file(store: SqliteSnapshotStore, db: Path, monkeypatch: Any,
                                       error: OSError, code: str) -> None:
    real_open = os.open

    def fake_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if os.fsdecode(path) == str(db):
            raise error
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    for call in (lambda: store.load(RUN_ID), lambda: store.save(make_snapshot(RUN_ID))):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.code == code
        assert info.value.path == str(db)
        assert error.strerror is not None and error.strerror in info.value.reason


def test_corrupt_database_file(store: SqliteSnapshotStore, db: Path) -> None:
    store.save(make_snapshot(RUN_ID))
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 200)
    with pytest.raises(StorageError) as info:
        store.load(RUN_ID)
    assert info.value.code == StorageError.CORRUPT_DATABASE
    assert info.value.path == str(db)
    assert "not a database" in info.value.reason


def test_busy_past_the_timeout(db: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_S", 0.05)
    with create_sqlite_snapshot_store(path=db) as store:
        store.save(make_snapshot(RUN_ID))
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        try:
            with pytest.raises(StorageError) as info:
                store.save(make_snapshot(RUN_ID, plan_id="plan_new"))
            assert info.value.code == StorageError.BUSY
            assert store.load(RUN_ID) == make_snapshot(RUN_ID)  # WAL: readers proceed
        finally:
            other.execute("ROLLBACK")
            other.close()


def test_synchronous_setting_is_checked(db: Path) -> None:
    with pytest.raises(ValueError):
        SqliteSnapshotStore(db, synchronous="OFF")  # type: ignore[arg-type]


def test_memory_path_is_an_in_memory_database_not_a_file(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with create_sqlite_snapshot_store(path=":memory:") as memory:
        memory.save(make_snapshot(RUN_ID))
        assert memory.load(RUN_ID) == make_snapshot(RUN_ID)
        other = create_sqlite_snapshot_store(path=":memory:")
        assert other.load(RUN_ID) is None  # private to its store, as sqlite3's :memory:
        other.close()
    assert list(tmp_path.iterdir()) == []


def test_the_durability_asked_for_is_the_one_set(db: Path) -> None:
    with SqliteSnapshotStore(db, synchronous="NORMAL") as normal:
        normal.save(make_snapshot(RUN_ID))
        assert normal._connection().execute("PRAGMA synchronous").fetchone()[0] == 1


def test_close_closes_the_connection(store: SqliteSnapshotStore) -> None:
    store.save(make_snapshot(RUN_ID))
    conn = store._connection()
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
    assert store.load(RUN_ID) == make_snapshot(RUN_ID)  # reopened on use


@pytest.mark.parametrize(("primary", "code"), [
    (3, StorageError.PERMISSION_DENIED), (5, StorageError.BUSY), (6, StorageError.BUSY),
    (8, StorageError.READ_ONLY), (11, StorageError.CORRUPT_DATABASE),
    (13, StorageError.DISK_FULL), (23, StorageError.PERMISSION_DENIED),
    (26, StorageError.CORRUPT_DATABASE), (1, StorageError.IO_ERROR),
])
def test_sqlite_result_codes_map_to_storage_error_codes(store: SqliteSnapshotStore,
                                                        primary: int, code: str) -> None:
    exc = sqlite3.OperationalError("boom")
    exc.sqlite_errorcode = primary | 0x100  # an extended code: the low byte is the primary
    exc.sqlite_errorname = "SQLITE_X"
    error = store._error(exc, "cannot save")
    assert (error.code, error.reason) == (code, "cannot save: boom (SQLITE_X)")
