"""The state database: migrations, pragmas, permissions and the write discipline."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from devcell.errors import StateError, StateUnusable, StorageError
from devcell.store import faults, migrations
from devcell.store.db import DB_FILENAME, Database, open_database, resolve_state_dir

TABLES = {"cells", "snapshots", "volumes", "attachments", "operations", "operation_steps",
          "events", "applied_sources", "migrations"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- migrations ------------------------------------------------------------------------------


def test_migrations_are_recorded(db: Database) -> None:
    rows = db.execute("SELECT version, name, applied_at FROM migrations ORDER BY version"
                      ).fetchall()
    assert [(r["version"], r["name"]) for r in rows] == [
        (number, name) for number, name, _ in migrations.MIGRATIONS]
    assert all(r["applied_at"].endswith("Z") for r in rows)
    assert db.execute("PRAGMA user_version").fetchone()[0] == migrations.LATEST
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert TABLES <= tables


def test_reopening_does_not_migrate_again(db: Database, state: Path) -> None:
    before = [tuple(r) for r in db.execute("SELECT * FROM migrations")]
    db.close()
    again = open_database(state)
    try:
        assert [tuple(r) for r in again.execute("SELECT * FROM migrations")] == before
        assert again.execute("PRAGMA user_version").fetchone()[0] == migrations.LATEST
    finally:
        again.close()


def test_older_database_is_upgraded_with_only_the_missing_migrations(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = migrations.MIGRATIONS[:1]
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", first)
        m.setattr(migrations, "LATEST", first[-1][0])
        old = open_database(state)
        assert old.execute("PRAGMA user_version").fetchone()[0] == first[-1][0]
        applied_first = old.execute("SELECT applied_at FROM migrations WHERE version = ?",
                                    (first[0][0],)).fetchone()[0]
        old.close()
    upgraded = open_database(state)
    try:
        rows = upgraded.execute("SELECT version, applied_at FROM migrations ORDER BY version"
                                ).fetchall()
        assert [r[0] for r in rows] == [n for n, _, _ in migrations.MIGRATIONS]
        assert rows[0][1] == applied_first  # the first migration was not run again
        assert upgraded.execute("PRAGMA user_version").fetchone()[0] == migrations.LATEST
    finally:
        upgraded.close()


def test_database_from_a_newer_devcell_is_refused(db: Database, state: Path) -> None:
    db.execute(f"PRAGMA user_version = {migrations.LATEST + 1}")
    db.close()
    with pytest.raises(StateError, match="newer DevCell"):
        open_database(state)


def test_live_name_index_exists(db: Database) -> None:
    indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"idx_cells_live_name", "idx_snapshots_live_name"} <= indexes


# -- pragmas ---------------------------------------------------------------------------------


def test_wal_and_foreign_keys_are_on(db: Database) -> None:
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_foreign_keys_are_enforced(db: Database) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        with db.write() as conn:
            conn.execute(
                "INSERT INTO volumes (id, cell_id, name, phase, created_at) "
                "VALUES ('vol_x', 'cell_nobody', 'v', 'Bound', 'now')")
    assert db.execute("SELECT count(*) FROM volumes").fetchone()[0] == 0


def test_wal_is_persistent_for_other_connections(db: Database) -> None:
    other = sqlite3.connect(str(db.path))
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()


# -- permissions -----------------------------------------------------------------------------


def test_state_dir_and_files_are_owner_only(state: Path) -> None:
    old = os.umask(0)  # even a permissive umask must not leak the state
    try:
        database = open_database(state)
        with database.write() as conn:
            conn.execute("INSERT INTO events (created_at, object_kind, object_name, type, "
                         "reason) VALUES ('t', 'Cell', 'x', 'Normal', 'r')")
    finally:
        os.umask(old)
    try:
        assert mode(state) == 0o700
        assert mode(state / DB_FILENAME) == 0o600
        for suffix in ("-wal", "-shm"):
            path = state / (DB_FILENAME + suffix)
            if path.exists():
                assert mode(path) == 0o600, path
    finally:
        database.close()


def test_opening_the_database_leaves_the_process_umask_alone(state: Path) -> None:
    """The umask is the process's, shared by its threads (the API server's): set and restored
    around each open, two overlapping opens once left it at 077 for good, and every file made
    afterwards (a feature's install.sh, a cell's supervisor) lost its group and other bits."""
    old = os.umask(0o022)
    try:
        with open_database(state).write() as conn:
            conn.execute("INSERT INTO events (created_at, object_kind, object_name, type, "
                         "reason) VALUES ('t', 'Cell', 'x', 'Normal', 'r')")
        seen = os.umask(0o022)
    finally:
        os.umask(old)
    assert seen == 0o022
    assert all(mode(p) == 0o600 for p in state.iterdir() if p.name.startswith(DB_FILENAME))


def test_loose_permissions_are_tightened_on_open(state: Path) -> None:
    open_database(state).close()
    os.chmod(state, 0o755)
    os.chmod(state / DB_FILENAME, 0o644)
    open_database(state).close()
    assert mode(state) == 0o700
    assert mode(state / DB_FILENAME) == 0o600


def test_a_loose_database_and_its_wal_are_tightened_before_sqlite_opens_them(
        state: Path) -> None:
    """A state.db that others may read (restored with cp under umask 022, say) is made 0600
    before SQLite opens it: the -wal and -shm SQLite makes take its mode, so they are never
    0644, even for a moment, nor for a database DevCell opens without Database (fake.db)."""
    open_database(state).close()
    for suffix in ("", "-wal", "-shm"):
        path = state / (DB_FILENAME + suffix)
        path.touch()
        os.chmod(path, 0o644)
    conn = faults.connect(state / DB_FILENAME, timeout=5)  # nothing run on it yet
    try:
        assert {p.name: mode(p) for p in state.iterdir() if p.name.startswith(DB_FILENAME)} == {
            DB_FILENAME: 0o600, f"{DB_FILENAME}-wal": 0o600, f"{DB_FILENAME}-shm": 0o600}
    finally:
        conn.close()


def test_a_database_made_under_a_umask_without_the_owners_write_bit_is_0600(
        state: Path) -> None:
    state.mkdir(mode=0o700)
    old = os.umask(0o277)
    try:
        faults.connect(state / "made.db", timeout=5).close()
    finally:
        os.umask(old)
    assert mode(state / "made.db") == 0o600


@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_something_that_is_not_a_database_file_is_refused_not_waited_on(
        state: Path, kind: str) -> None:
    """A FIFO at state.db was "disk I/O error ... check the disk" (a FIFO at -shm too)."""
    state.mkdir(mode=0o700)
    path = state / DB_FILENAME
    os.mkfifo(path) if kind == "FIFO" else path.mkdir()
    with pytest.raises(StateUnusable, match=f"{path} is a {kind}, not a database file; move "
                       "it out of the way") as caught:
        open_database(state)
    assert caught.value.cause == StorageError.UNSAFE_PATH
    assert stat.S_IFMT(os.lstat(path).st_mode) == (stat.S_IFIFO if kind == "FIFO"
                                                   else stat.S_IFDIR)


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("kind", ["FIFO", "symbolic link"])
def test_something_that_is_not_sqlites_file_beside_the_database_is_refused(
        state: Path, tmp_path: Path, suffix: str, kind: str) -> None:
    """A FIFO at state.db-shm was "disk I/O error ... check the disk"; a link there was
    followed by the tightening."""
    open_database(state).close()
    path = state / (DB_FILENAME + suffix)
    path.unlink(missing_ok=True)
    victim = tmp_path / "victim"
    victim.write_text("")
    os.chmod(victim, 0o644)
    os.mkfifo(path) if kind == "FIFO" else path.symlink_to(victim)
    with pytest.raises(StateUnusable, match=f"{path} is a {kind}, not SQLite's file of the "
                       "database; move it out of the way"):
        open_database(state)
    assert mode(victim) == 0o644


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
@pytest.mark.parametrize("kind", ["FIFO", "symbolic link"])
def test_something_beside_a_missing_database_is_refused_before_it_is_made(
        state: Path, tmp_path: Path, suffix: str, kind: str) -> None:
    """A FIFO or a link at state.db-shm of a new state directory was "disk I/O error ...
    check the disk" (the file made first, SQLite meeting the FIFO after), named only by the
    next command; an empty state.db and a -wal were left behind."""
    state.mkdir(mode=0o700)
    path = state / (DB_FILENAME + suffix)
    os.mkfifo(path) if kind == "FIFO" else path.symlink_to(tmp_path / "victim")
    with pytest.raises(StateUnusable, match=f"{path} is a {kind}, not SQLite's file of the "
                       "database; move it out of the way"):
        open_database(state)
    assert sorted(p.name for p in state.iterdir()) == [path.name]


@pytest.mark.parametrize("cause", ["no hard links", "a leftover at the temporary name"])
def test_a_database_that_cannot_be_linked_into_place_is_still_0600(
        state: Path, monkeypatch: pytest.MonkeyPatch, cause: str) -> None:
    """On a file system without hard links (or where a killed process's leftover holds the
    temporary name) SQLite made state.db with the umask's mode, 0644, its -wal and -shm too."""
    state.mkdir(mode=0o700)
    if cause == "no hard links":
        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(1, "Operation not permitted")
        monkeypatch.setattr(os, "link", refuse)
    else:
        from _thread import get_ident
        os.mkfifo(state / f".{DB_FILENAME}.new-{os.getpid()}-{get_ident()}")
    old = os.umask(0o022)
    try:
        with open_database(state).write() as conn:
            conn.execute("INSERT INTO events (created_at, object_kind, object_name, type, "
                         "reason) VALUES ('t', 'Cell', 'x', 'Normal', 'r')")
    finally:
        os.umask(old)
    made = {p.name: mode(p) for p in state.iterdir() if p.name.startswith(DB_FILENAME)}
    assert made[DB_FILENAME] == 0o600
    assert set(made.values()) == {0o600}, made


def test_a_link_to_a_missing_database_is_refused_not_made_afresh(
        state: Path, tmp_path: Path) -> None:
    """A state.db linked to a disk that is not mounted: SQLite made a new, empty database at
    the link's target, 0644, and DevCell took it for a fresh state."""
    target = tmp_path / "unmounted" / "state.db"
    target.parent.mkdir()
    state.mkdir(mode=0o700)
    (state / DB_FILENAME).symlink_to(target)
    with pytest.raises(StateUnusable, match=f"is a symbolic link to {target}, which does not "
                       "exist; DevCell will not start a new database there"):
        open_database(state)
    assert not target.exists()


def test_a_link_to_a_database_is_followed(state: Path, tmp_path: Path) -> None:
    open_database(tmp_path / "elsewhere").close()
    state.mkdir(mode=0o700)
    (state / DB_FILENAME).symlink_to(tmp_path / "elsewhere" / DB_FILENAME)
    open_database(state).close()
    assert mode(tmp_path / "elsewhere" / DB_FILENAME) == 0o600


# -- opening ---------------------------------------------------------------------------------


def test_open_without_create_needs_existing_state(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="nothing has been applied yet"):
        open_database(tmp_path / "empty", create=False)
    assert not (tmp_path / "empty").exists()


def test_a_file_that_is_not_a_database_is_refused(state: Path) -> None:
    state.mkdir(mode=0o700)
    (state / DB_FILENAME).write_bytes(b"this is not sqlite, " * 100)
    with pytest.raises(StateError, match="is damaged or is not a DevCell database"):
        open_database(state)


def test_state_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEVCELL_HOME", str(tmp_path / "home"))
    assert resolve_state_dir(None) == tmp_path / "home"
    assert resolve_state_dir(str(tmp_path / "explicit")) == tmp_path / "explicit"
    monkeypatch.delenv("DEVCELL_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert resolve_state_dir(None) == tmp_path / "xdg" / "devcell"


# -- write transactions ----------------------------------------------------------------------


def _count(db: Database) -> int:
    return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


def _event(conn: sqlite3.Connection, reason: str) -> None:
    conn.execute("INSERT INTO events (created_at, object_kind, object_name, type, reason) "
                 "VALUES ('t', 'Cell', 'x', 'Normal', ?)", (reason,))


def test_write_commits_on_success_and_rolls_back_on_error(db: Database) -> None:
    with db.write() as conn:
        _event(conn, "kept")
    with pytest.raises(RuntimeError):
        with db.write() as conn:
            _event(conn, "lost")
            raise RuntimeError("abort")
    assert [r[0] for r in db.execute("SELECT reason FROM events")] == ["kept"]
    assert db.conn.in_transaction is False


def test_nested_write_is_a_savepoint(db: Database) -> None:
    with db.write() as conn:
        _event(conn, "outer")
        with pytest.raises(ValueError):
            with db.write() as inner:
                _event(inner, "inner")
                raise ValueError("inner fails")
        with db.write() as inner:
            _event(inner, "inner-ok")
    assert [r[0] for r in db.execute("SELECT reason FROM events ORDER BY id")] == [
        "outer", "inner-ok"]


def test_write_takes_the_write_lock_up_front(db: Database) -> None:
    other = sqlite3.connect(str(db.path), timeout=0, isolation_level=None)
    try:
        with db.write():
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
            # readers are not blocked (WAL)
            assert other.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    finally:
        other.close()
    assert _count(db) == 0


def test_a_setup_held_by_a_stopped_command_is_said_not_waited_on_for_ever(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command stopped (Ctrl-Z) while it made a new database held the directory's setup
    flock, and every other command on it waited without end, saying nothing (found by
    attack41)."""
    import fcntl

    from devcell.store import db as dbmod

    state.mkdir(mode=0o700)
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_S", 0.3)
    held = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(StateError, match="another devcell has been making its new "
                           "database for over 0 s"):
            open_database(state)
    finally:
        os.close(held)
    assert not (state / DB_FILENAME).exists()
    open_database(state).close()  # once let go, made as ever


def test_a_private_directory_is_never_a_link_nor_another_users(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ssh directory beside the contexts file was followed to a link's target (chmodded
    there, the pin written there), and one another account owned was taken as it was: as
    root, that account could then replace the pin (attack43, D). Refused, each saying what
    to do; the state directory itself may still be a link to a directory of this user's."""
    from devcell.store.db import ensure_private_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    os.chmod(elsewhere, 0o777)
    (tmp_path / "ssh").symlink_to(elsewhere)
    with pytest.raises(StateError, match=r"ssh is a symbolic link .*remove the link"):
        ensure_private_dir(tmp_path / "ssh")
    assert mode(elsewhere) == 0o777  # the target left as it was
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(StateError, match="dangling is a symbolic link"):
        ensure_private_dir(tmp_path / "dangling")
    ensure_private_dir(tmp_path / "ssh", link=True)  # the state directory's own case
    assert mode(elsewhere) == 0o700
    (tmp_path / "file").write_text("x")
    with pytest.raises(StateError, match="file is not a directory"):
        ensure_private_dir(tmp_path / "file")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chmod(theirs, 0o1777)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(theirs).st_uid + 4242)
    with pytest.raises(StateError, match=r"theirs belongs to .* who runs devcell: .*move it"):
        ensure_private_dir(theirs)
    assert stat.S_IMODE(os.stat(theirs).st_mode) == 0o1777  # never chmodded
