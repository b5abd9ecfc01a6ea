"""The state database on a faulty machine: a full disk, a read-only directory, garbage inside
state.db, a truncated state.db. Each is one StateUnusable naming the cause, the path and the
fix (never a raw sqlite3 error, never "disk I/O error" for a full or read-only disk), and what
was recorded before is still there once the fault is mended."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from devcell.errors import StateUnusable, StorageError
from devcell.store import events
from devcell.store.db import DB_FILENAME, Database, open_database
from tests.store import faulty


def note(db: Database, message: str = "noted") -> None:
    with db.write() as conn:
        events.record(conn, kind="Cell", object_id="cell_x", name="x", reason="Noted",
                      message=message)


def noted(db: Database) -> list[str]:
    return [r["message"][:20] for r in db.execute("SELECT message FROM events ORDER BY id")]


def test_a_full_disk_is_named_and_loses_nothing(tmp_path: Path) -> None:
    with faulty.small_disk(tmp_path / "disk") as disk:
        state = disk / "state"
        db = open_database(state)
        note(db, "before")
        filler = faulty.fill(disk)

        with pytest.raises(StateUnusable) as caught:
            note(db, "x" * (2 << 20))  # needs pages the disk no longer has

        assert caught.value.cause == StorageError.DISK_FULL
        message = str(caught.value)
        assert "the disk is full" in message and str(state / DB_FILENAME) in message
        assert "free some space" in message and "disk I/O error" not in message
        assert noted(db) == ["before"]  # readable, nothing lost, nothing half-written
        filler.unlink()
        note(db, "after")  # mended: the same connection records again
        assert noted(db) == ["before", "after"]
        db.close()


def test_a_read_only_state_directory_is_named(tmp_path: Path) -> None:
    with faulty.small_disk(tmp_path / "disk") as disk:
        state = disk / "state"
        db = open_database(state)
        note(db, "before")
        db.close()
        faulty.remount(disk, "ro")
        try:
            with pytest.raises(StateUnusable) as caught:
                again = open_database(state)
                note(again)
            assert caught.value.cause == StorageError.READ_ONLY
            message = str(caught.value)
            assert "read-only file system" in message and str(state) in message
            assert "disk I/O error" not in message
        finally:
            faulty.remount(disk, "rw")
        again = open_database(state)
        assert noted(again) == ["before"]
        again.close()


def test_a_state_directory_this_user_cannot_write_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through directory permissions")
    state = tmp_path / "state"
    open_database(state).close()
    os.chmod(state, 0o500)
    try:
        with pytest.raises(StateUnusable) as caught:
            note(open_database(state))
        assert caught.value.cause in (StorageError.PERMISSION_DENIED, StorageError.READ_ONLY)
    finally:
        os.chmod(state, 0o700)


def _recorded(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    db = open_database(state)
    for i in range(50):
        note(db, f"event {i}")
    db.close()
    faulty.checkpoint(state / DB_FILENAME)
    return state


def test_garbage_inside_state_db_is_named_on_read_and_on_write(tmp_path: Path) -> None:
    state = _recorded(tmp_path)
    path = state / DB_FILENAME
    faulty.damage_table(path, "events")
    damaged = path.read_bytes()

    db = open_database(state)  # the schema page is intact: opening works
    for action in (lambda: noted(db), lambda: note(db)):
        with pytest.raises(StateUnusable) as caught:
            action()
        assert caught.value.cause == StorageError.CORRUPT_DATABASE
        assert str(path) in str(caught.value) and "restore state.db" in str(caught.value)
    db.close()
    assert path.read_bytes() == damaged  # DevCell wrote nothing into a damaged file


@pytest.mark.parametrize("keep", [4096, 100, 16])
def test_a_truncated_state_db_is_named(tmp_path: Path, keep: int) -> None:
    state = _recorded(tmp_path)
    path = state / DB_FILENAME
    os.truncate(path, keep)
    with pytest.raises(StateUnusable) as caught:
        db = open_database(state)
        noted(db)
    assert caught.value.cause == StorageError.CORRUPT_DATABASE
    assert str(path) in str(caught.value)
    assert path.stat().st_size == keep


def test_another_programs_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    conn = sqlite3.connect(state / DB_FILENAME)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = (state / DB_FILENAME).read_bytes()
    with pytest.raises(StateUnusable, match="is not a DevCell database"):
        open_database(state)
    assert (state / DB_FILENAME).read_bytes() == before  # no DevCell table written into it


def test_every_state_connection_translates_faults() -> None:
    """The class behind a full disk's traceback in `cell start` (the fake's observe_all opened
    fake.db with sqlite3 directly): state and backend databases are opened only through
    store.faults (the run stores in devcell/runs have their own error edge). cell_glance, the
    exec fast path's read-only look, translates nothing because it raises nothing: any SQLite
    error there sends the command to the full path, which opens through store.faults."""
    package = Path(__file__).resolve().parents[2] / "devcell"
    allowed = {package / "store" / "faults.py", package / "store" / "cell_glance.py"}
    raw = []
    for source in package.rglob("*.py"):
        if source in allowed or package / "runs" in source.parents:
            continue
        for number, line in enumerate(source.read_text().splitlines(), 1):
            if "sqlite3.connect(" in line and '":memory:"' not in line:
                raw.append(f"{source.relative_to(package)}:{number}")
    assert raw == []
