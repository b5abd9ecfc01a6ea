"""The SQLite store: one row per run in the `run_snapshots` table of the database at `path`.

The table is created on first use, so the store can live in a file of its own or beside other
tables (the state database). Each row holds exactly the bytes the file store would write (see
`envelope.py`), so both persistent stores make the same checks on load; a corrupt row raises
CORRUPT_SNAPSHOT with the path `<database path>#<run id>`.

Durability: WAL with synchronous=FULL. In WAL mode NORMAL already survives a crash of the
process (kill -9), but a power loss or an OS crash can roll back the last commits; FULL
fsyncs the WAL at every commit, so a save that returned is on disk, as with the file store.
A snapshot is written once per suspension (a graceful shutdown, an approval gate), so the extra
fsync costs nothing that matters, while a snapshot lost after its operation was recorded as
suspended would leave that operation impossible to resume. (The state database keeps
synchronous=NORMAL for its frequent writes: see devcell/store/db.py.)
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from types import TracebackType
from typing import Literal

from devcell import storage_causes
from devcell.errors import StorageError
from devcell.log import logger
from devcell.runs import envelope, model, oserrors, runid

TABLE = "run_snapshots"
CREATE_TABLE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    run_id   TEXT PRIMARY KEY NOT NULL,
    envelope BLOB NOT NULL,
    saved_at TEXT NOT NULL
)"""
BUSY_TIMEOUT_S = 60.0
Synchronous = Literal["FULL", "NORMAL"]

MEMORY = ":memory:"
"""The path that asks SQLite for a private in-memory database (no file), as sqlite3 itself."""


class SqliteSnapshotStore:
    """A SnapshotStore over one SQLite table; one connection per store object (and process),
    opened on first use, shared by threads under a lock. With the path `:memory:` the
    database lives in memory and ends with the store (as sqlite3.connect(":memory:"))."""

    def __init__(self, path: Path, *, synchronous: Synchronous = "FULL") -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SqliteSnapshotStore(path={str(self.path)!r})"

    def __enter__(self) -> SqliteSnapshotStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def where(self, run_id: str) -> str:
        """The path a StorageError about the row of `run_id` carries."""
        return f"{self.path}#{run_id}"

    # -- the SnapshotStore protocol ---------------------------------------------------------

    def save(self, snapshot: model.RunSnapshot) -> None:
        envelope.require_snapshot(snapshot, where=str(self.path))
        run_id = runid.check(snapshot.run_id, store=str(self.path))
        data = envelope.encode(snapshot, where=self.where(run_id))
        with self._lock:
            conn = self._connection()
            try:
                conn.execute(
                    f"INSERT INTO {TABLE} (run_id, envelope, saved_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE "
                    "SET envelope = excluded.envelope, saved_at = excluded.saved_at",
                    (run_id, data, model.utc_timestamp()),
                )
            except sqlite3.Error as exc:
                raise self._error(exc, "cannot save the snapshot") from exc
        logger.debug("saved run snapshot {} ({} bytes) to {}", run_id, len(data), self.path)

    def load(self, run_id: str) -> model.RunSnapshot | None:
        runid.check(run_id, store=str(self.path))
        with self._lock:
            conn = self._connection()
            try:
                row = conn.execute(
                    f"SELECT typeof(envelope), CAST(envelope AS BLOB) FROM {TABLE} "
                    "WHERE run_id = ?", (run_id,),
                ).fetchone()
            except sqlite3.Error as exc:
                raise self._error(exc, "cannot read the snapshot") from exc
        if row is None:
            return None
        kind, data = row
        if kind not in ("blob", "text"):
            raise StorageError(code=StorageError.CORRUPT_SNAPSHOT, path=self.where(run_id),
                               reason=f"the stored value is {kind}, not the bytes of a snapshot")
        return envelope.decode(data, run_id=run_id, where=self.where(run_id), stored_under="key")

    def delete(self, run_id: str) -> None:
        runid.check(run_id, store=str(self.path))
        with self._lock:
            conn = self._connection()
            try:
                conn.execute(f"DELETE FROM {TABLE} WHERE run_id = ?", (run_id,))
            except sqlite3.Error as exc:
                raise self._error(exc, "cannot delete the snapshot") from exc
        logger.debug("deleted run snapshot {} from {}", run_id, self.path)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- the connection ---------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection inherited across fork() must be neither used nor closed in the child.
        self._conn = None
        if str(self.path) == MEMORY:
            return self._open_memory()
        parent = self.path.parent
        if not parent.is_dir():
            with oserrors.translated(parent, "cannot create the database directory"):
                os.makedirs(parent, mode=0o700, exist_ok=True)
        # Create the file ourselves: owner-only whatever the umask, and a precise errno
        # (EACCES, ENOSPC, EROFS) where SQLite would only say "unable to open database file".
        # The -wal and -shm files inherit the database file's permissions.
        # Only when the file does not exist yet: opening and closing a descriptor on a database
        # this process already has open would drop the process's POSIX locks on it (close()
        # releases every fcntl lock of the process on that file), after which another
        # process may delete the live WAL.
        if not self.path.exists():
            with oserrors.translated(self.path, "cannot open the database"):
                try:
                    os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                                     0o600))
                except FileExistsError:
                    pass
        try:
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc, "cannot open the database") from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA fullfsync = ON")  # macOS: a real flush; ignored elsewhere
            conn.execute(CREATE_TABLE)
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc, "cannot prepare the database") from exc
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _open_memory(self) -> sqlite3.Connection:
        """A private in-memory database: no file, no WAL, nothing to make durable."""
        try:
            conn = sqlite3.connect(MEMORY, isolation_level=None, check_same_thread=False)
            conn.execute(CREATE_TABLE)
        except sqlite3.Error as exc:
            raise self._error(exc, "cannot open the in-memory database") from exc
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _error(self, exc: sqlite3.Error, doing: str) -> StorageError:
        code = storage_causes.machine_cause(exc) or (
            StorageError.BUSY if storage_causes.primary_code(exc) in storage_causes.BUSY_CODES
            else StorageError.IO_ERROR)
        name = getattr(exc, "sqlite_errorname", None)
        reason = f"{doing}: {exc}" + (f" ({name})" if name else "")
        return StorageError(code=code, path=str(self.path), reason=reason)
