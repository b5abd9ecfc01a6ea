"""A faulty machine under the state database, translated into one error that names the fix.

SQLite reports a full disk, a read-only directory, a damaged file or a failed read by result
code, deep inside whatever statement met it. Every connection DevCell opens on a state file is
a `Connection` from here: its statements and fetches turn those codes into `StateUnusable`
(cause, path, what to do), so the error keeps its class up to the CLI, which prints one line
and exits 1. Other SQLite errors (a busy database, a bug's bad SQL) pass through untouched:
busy has its own waits, and a bug keeps its traceback.

"disk I/O error" is SQLite's word for several causes; the file system is asked which one
(read-only mount, no write permission, no space left) so the message names the real cause.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
from _thread import get_ident  # threading itself is not imported on every command
from pathlib import Path

from devcell import names, storage_causes
from devcell.errors import StateUnusable, StorageError

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

LOW_SPACE = 1 << 20
"""Below this much free space, an I/O failure is taken for a full disk."""


def _free_bytes(directory: Path) -> int | None:
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def diagnose(directory: Path) -> str | None:
    """What the file system says is wrong with writing in `directory`, if anything."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return StorageError.READ_ONLY
    if not os.access(directory, os.W_OK):
        return StorageError.PERMISSION_DENIED
    if st.f_bavail * st.f_frsize < LOW_SPACE:
        return StorageError.DISK_FULL
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "unknown space"
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} bytes"  # pragma: no cover


def message(cause: str, path: Path, detail: str) -> str:
    """One line: what is wrong, where, and what to do; what was recorded stays as it was."""
    directory = path.parent
    if cause == StorageError.DISK_FULL:
        return (f"cannot write {path}: the disk is full ({_size(_free_bytes(directory))} free "
                f"on the file system holding {directory}); free some space there and run the "
                "command again (what was recorded before is intact)")
    if cause == StorageError.READ_ONLY:
        return (f"cannot write {path}: {directory} is on a read-only file system; remount it "
                "read-write, or point --state-dir (or $DEVCELL_HOME) at a writable directory")
    if cause == StorageError.PERMISSION_DENIED:
        return (f"cannot write {path}: permission denied in {directory}; give this user write "
                "access to it (the owner of the state directory runs devcell), or point "
                "--state-dir (or $DEVCELL_HOME) elsewhere")
    if cause == StorageError.CORRUPT_DATABASE:
        return (f"{path} is damaged or is not a DevCell database ({detail}); DevCell will not "
                "guess what it held: restore state.db from a backup (sqlite3's .recover can "
                "salvage the rows it still holds) and run the command again")
    return (f"cannot use {path}: {detail} (the file system failed a read or a write); check "
            "the disk and run the command again")


_state_db: Path | None = None
"""The state database this process opened last: rows are decoded far from their connection,
and a process serves one state directory, so a damaged value is named with this path."""


def loads(text: str | bytes, path: Path | None = None) -> Any:
    """A JSON column's value. DevCell wrote it as JSON, so one that does not parse is damage
    (a bad page, a hand edit): named like any damaged database, never a traceback."""
    path = path or _state_db or Path("state.db")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as exc:
        raise StateUnusable(message(StorageError.CORRUPT_DATABASE, path,
                                    f"a stored JSON value does not parse: {exc}"),
                            cause=StorageError.CORRUPT_DATABASE, path=str(path)) from exc


def translate(exc: sqlite3.Error, path: Path) -> StateUnusable | None:
    """`exc` as StateUnusable when it speaks of the machine; None for anything else."""
    cause = storage_causes.machine_cause(exc)
    if cause is None and "malformed JSON" in str(exc):  # SQL's json functions met damage
        cause = StorageError.CORRUPT_DATABASE
    if cause is None:
        return None
    if cause != StorageError.CORRUPT_DATABASE:
        cause = diagnose(path.parent) or cause
    return StateUnusable(message(cause, path, str(exc)), cause=cause, path=str(path))


def _raise(exc: sqlite3.Error, conn: Any) -> None:
    translated = translate(exc, Path(getattr(conn, "db_path", "state.db")))
    if translated is None:
        raise exc
    raise translated from exc


class Cursor(sqlite3.Cursor):
    """A cursor whose statements and fetches raise StateUnusable for a faulty machine."""

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def executemany(self, sql: str, seq: Any, /) -> Cursor:
        try:
            return super().executemany(sql, seq)
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def executescript(self, script: str, /) -> Any:
        try:
            return super().executescript(script)
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.Error as exc:
            _raise(exc, self.connection)
            raise


class Connection(sqlite3.Connection):
    """A connection whose every statement goes through `Cursor`; `db_path` names the file."""

    db_path: Path

    def cursor(self, factory: Any = Cursor) -> Any:
        return super().cursor(factory)

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any, /) -> Cursor:
        return self.cursor().executemany(sql, seq)

    def executescript(self, script: str, /) -> Cursor:
        return self.cursor().executescript(script)


def connect(path: Path, *, timeout: float, read_only: bool = False) -> Connection:
    """Open `path` as a translating connection (autocommit: DevCell issues BEGIN itself);
    `read_only` opens it so that nothing can be written (and no file is created)."""
    # In a URI `%`, `?` and `#` are not part of the path: quoted, so that a directory named
    # `a#b` or `x?mode=rwc&` is the file opened (read-only), not another one (or a new one).
    quoted = str(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    target, uri = (f"file:{quoted}?mode=ro", True) if read_only else (str(path), False)
    if not read_only:
        _create_owner_only(path)
    try:
        conn = sqlite3.connect(target, isolation_level=None, timeout=timeout, uri=uri,
                               check_same_thread=False, factory=Connection)
    except sqlite3.Error as exc:
        translated = translate(exc, path)
        if translated is None:
            raise
        raise translated from exc
    assert isinstance(conn, Connection)
    conn.db_path = path
    if path.name == "state.db":
        global _state_db
        _state_db = path
    return conn


def _create_owner_only(path: Path) -> None:
    """Make a missing database file owner-only before SQLite opens it: SQLite gives the -wal,
    -shm and journal the database file's mode, so they are owner-only too. (Not by setting the
    umask around the connect: the umask is the process's, shared by its threads, and two
    overlapping set-and-restore pairs can leave it narrowed for good.) The file is made under
    a name of this thread's own and linked into place, so no descriptor of the database itself
    is ever closed here: closing one drops every POSIX lock this process holds on the file,
    another thread's SQLite locks included. A file already there is checked instead
    (`_existing`); so is what lies at its -wal and -shm before anything is made."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError:
        return  # SQLite's own open says what is wrong, translated
    else:
        _existing(path)
        return
    _check_companions(str(path))  # a FIFO at -shm was "disk I/O error" (once, then named)
    made = path.with_name(f".{path.name}.new-{os.getpid()}-{get_ident()}")
    try:
        fd = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        _make_in_place(path)  # a leftover of a killed process's, say
        return
    try:
        try:
            os.fchmod(fd, 0o600)  # a umask of 0200 would have left the owner unable to write
        finally:
            os.close(fd)
        os.link(made, path, follow_symlinks=False)
    except FileExistsError:
        _existing(path)  # made meanwhile by another thread or process
    except OSError:
        _make_in_place(path)  # no hard links on this file system
    finally:
        with contextlib.suppress(OSError):
            os.unlink(made)


def _make_in_place(path: Path) -> None:
    """Make `path` itself, 0600, where it cannot be linked into place (a file system without
    hard links; a name of this thread's taken by a killed process's leftover): else SQLite
    made it with the umask's mode, 0644, and its -wal and -shm with it. The descriptor closed
    is of a file this call made: a new state database is made under the flock of its state
    directory (db._first_setup), so no other thread of this process has it open yet."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except FileExistsError:
        _existing(path)
        return
    except OSError:
        return  # it cannot be made: SQLite's own open says why, translated
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def _existing(path: Path) -> None:
    """Refuse what at `path` (or at its -wal or -shm) is no such file; tighten one that
    others may read, before SQLite opens it (the -wal and -shm it makes take its mode). Only
    stat and chmod: no descriptor opened and closed on a database this process may hold
    (closing one drops the process's POSIX locks on the file). A link to the file is the
    owner's choice (the state directory is theirs alone) and is followed, as SQLite does."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        try:
            target = os.readlink(path)
        except OSError:
            return  # removed meanwhile: SQLite makes it
        # SQLite would make the link's target: a fresh database where the recorded one is
        # missing (on a disk not mounted, say), which no command should take for a new state
        raise StateUnusable(
            f"{path} is a symbolic link to {names.printable(target)}, which does not exist; "
            "DevCell will not start a new database there: mount or restore what the link "
            "names (or remove the link to start afresh) and run the command again",
            cause=StorageError.UNSAFE_PATH, path=str(path)) from None
    except OSError:
        return  # SQLite's own open says what is wrong, translated
    _refuse_unless_file(path, found, "a database file")
    _tighten(path, found)
    _check_companions(os.path.realpath(path))  # where SQLite keeps the -wal and -shm


def _check_companions(real: str) -> None:
    """Refuse what at the -wal or -shm of the database at `real` is no regular file; tighten
    one that others may read."""
    for suffix in ("-wal", "-shm"):
        try:
            found = os.lstat(f"{real}{suffix}")
        except OSError:
            continue
        _refuse_unless_file(Path(f"{real}{suffix}"), found, "SQLite's file of the database")
        _tighten(Path(f"{real}{suffix}"), found)


def _refuse_unless_file(path: Path, found: os.stat_result, what: str) -> None:
    if not stat.S_ISREG(found.st_mode):
        kind = _KINDS.get(stat.S_IFMT(found.st_mode), "not a regular file")
        raise StateUnusable(
            f"{path} is {kind}, not {what}; move it out of the way (restore the database from "
            "a backup if it was one) and run the command again",
            cause=StorageError.UNSAFE_PATH, path=str(path))


def _tighten(path: Path, found: os.stat_result) -> None:
    """A file of this user's that others may read or write made owner-only (0600)."""
    if found.st_mode & 0o077 and found.st_uid == os.geteuid():
        with contextlib.suppress(OSError):  # gone meanwhile: SQLite's open meets what is there
            os.chmod(path, 0o600)


_OS_MACHINE_CAUSES = (StorageError.DISK_FULL, StorageError.READ_ONLY)
"""Of the operating system's causes, those that speak of the machine whichever file met them."""


def from_os_error(exc: OSError, state_dir: Path) -> StateUnusable | None:
    """`exc` as StateUnusable when it is a full or read-only disk; None for anything else.

    For the CLI's edge: a lease, lock, log or workspace file in the state directory met a
    full or read-only disk (the database's own errors are translated where they occur)."""
    cause = storage_causes.os_cause(exc)
    if cause not in _OS_MACHINE_CAUSES:
        return None
    path = Path(exc.filename) if isinstance(exc.filename, str) else state_dir / "state.db"
    return StateUnusable(message(cause, path, exc.strerror or str(exc)), cause=cause,
                         path=str(path))
