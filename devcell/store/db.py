"""The state database: where it lives, how it is opened, and how writes are made safe.

Writes go through `Database.write()`, which starts with BEGIN IMMEDIATE: the write lock is
taken up front, so a transaction never fails half-way with "database is locked" when another
process writes at the same time; it waits (busy timeout) instead. WAL lets readers proceed
while a writer works. synchronous=NORMAL in WAL mode survives a process crash (kill -9);
only a power loss can drop the last commits, which is the usual trade for a dev tool.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from devcell.errors import StateError, StateUnusable
from devcell.store import faults, guard
from devcell.store.state_dir import resolve as _resolve

DB_FILENAME = "state.db"
BUSY_TIMEOUT_S = 60.0
_RECORDED_ONLY: list[Path] = []
"""State directories whose database is opened only if it exists (see `recorded_only`)."""


@contextmanager
def recorded_only(state_dir: Path) -> Iterator[None]:
    """Within: a database of `state_dir` is opened only where one exists, else StateError
    saying nothing was applied there. A command that acts on recorded objects (exec, a
    snapshot verb) then checks its own usage first and, refused, leaves a new state directory
    as it was (it used to create the database, then find no such object)."""
    _RECORDED_ONLY.append(state_dir)
    try:
        yield
    finally:
        _RECORDED_ONLY.remove(state_dir)


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def resolve_state_dir(explicit: str | None = None) -> Path:
    """--state-dir, else $DEVCELL_HOME, else $XDG_DATA_HOME/devcell (state_dir.resolve)."""
    return _resolve(explicit)


@contextmanager
def _first_setup(state_dir: Path) -> Iterator[None]:
    """Held while a new database is made, switched to WAL and brought to the latest schema:
    two commands (or two of a server's threads) meeting a state directory with no database
    take turns, and the second finds it made. Racing there, one of two threads applying
    manifests to a new state directory once found the write lock refused for 60 s after the
    other had finished (CI, stop 40). An flock of the directory: released if the process dies."""
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _wait_for_flock(fd, state_dir)
        yield
    finally:
        os.close(fd)


def _wait_for_flock(fd: int, state_dir: Path) -> None:
    """The setup lock, waited for as a write lock is (BUSY_TIMEOUT_S), then refused in words:
    a command stopped while it made the database (Ctrl-Z, SIGSTOP) held every other one
    on this directory for as long as it stayed stopped, saying nothing."""
    import fcntl

    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StateError(
                    f"{state_dir}: another devcell has been making its new database for "
                    f"over {BUSY_TIMEOUT_S:.0f} s (stopped, with Ctrl-Z or SIGSTOP?); let it "
                    "finish or end it, and run the command again") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


def ensure_private_dir(path: Path, *, link: bool = False) -> None:
    """Create `path` (owner-only) or tighten an existing one of this user's.

    Checked on the directory opened, not through its name: a symbolic link at `path` is
    refused (unless `link`: the state directory itself may be one, state_dir.check), never
    followed, and a directory another user owns is refused, never chmodded. The ssh
    directory beside the contexts file was followed to a link's target and chmodded there,
    and as root one owned by another account was taken as it was: that account could then
    replace the known_hosts pin it holds (attack43, D)."""
    with contextlib.suppress(FileExistsError):  # a dangling link, or a file: said below
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if link else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (NotADirectoryError, FileNotFoundError) as exc:
        raise _not_private(path, exc) from None
    try:
        found = os.fstat(fd)
        if found.st_uid != os.geteuid():
            from devcell.store.state_dir import _user

            raise StateError(
                f"{path} belongs to {_user(found.st_uid)}, not to {_user(os.geteuid())} who "
                "runs devcell: DevCell keeps its keys and pins in a directory of its own "
                "(another account could replace what is written there); move it away (as "
                "its owner or root) and run the command again, and a new one is made")
        if found.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _not_private(path: Path, exc: OSError) -> StateError:
    """`path`, which ensure_private_dir could not open as a directory, said as what it is."""
    if path.is_symlink():
        return StateError(f"{path} is a symbolic link (to {os.readlink(path)}): DevCell keeps "
                          "its keys and pins in a directory of its own, never through a link; "
                          "remove the link and run the command again, and a directory is made")
    return StateError(f"{path} is not a directory ({exc.strerror}): move it away and run the "
                      "command again, and a directory is made")


class Database:
    """A connection to `state.db` with the pragmas and the write discipline DevCell relies on."""

    def __init__(self, state_dir: Path, *, create: bool = True, memory: bool = False) -> None:
        self.state_dir = state_dir
        self.path = state_dir / DB_FILENAME
        self.memory = memory
        if memory:
            # Validation against an empty state without creating anything on disk.
            self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self._depth = 0
            from devcell.store import migrations

            migrations.ensure_current(self)
            return
        fresh = not self.path.exists() or _empty(self.path)
        if fresh:
            guard.refuse_leftovers(state_dir, self.path)
        if create and not self.path.exists() and state_dir in _RECORDED_ONLY:
            raise StateError(f"no DevCell state in {state_dir}: nothing has been applied "
                             "there yet (apply a manifest first, or give the right "
                             "--state-dir)")
        if create:
            ensure_private_dir(state_dir, link=True)  # a link to a directory: state_dir.check
        elif not self.path.exists():
            raise StateError(f"no DevCell state in {state_dir} (nothing has been applied yet)")
        with _first_setup(state_dir) if fresh else nullcontext():
            self._connect(state_dir)

    def _connect(self, state_dir: Path) -> None:
        """Open the file, check it is DevCell's, switch it to WAL and migrate it."""
        self.conn = faults.connect(self.path, timeout=BUSY_TIMEOUT_S)  # made owner-only
        self.conn.row_factory = sqlite3.Row
        self._depth = 0
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            from devcell.store import migrations

            if self.conn.execute("PRAGMA user_version").fetchone()[0] != migrations.LATEST:
                guard.refuse_foreign(self.conn, state_dir, self.path)  # before any write
            self._ensure_wal()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StateError(f"{self.path} is not a usable DevCell database: {exc}") from None
        except StateError:
            self.conn.close()
            raise
        migrations.ensure_current(self)

    def _ensure_wal(self) -> None:
        # Switching to WAL needs an exclusive lock and SQLite does not always wait for it, so
        # several commands racing on a brand-new state directory retry here instead of failing.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.005
        while True:
            try:
                mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
                if mode != "wal":
                    self.conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    @property
    def hash_key(self) -> bytes:
        """The key of every hash that covers a secret (devcell.store.hashkey), read once."""
        key: bytes | None = getattr(self, "_hash_key", None)
        if key is None:
            from devcell.store import hashkey

            key = os.urandom(hashkey.SIZE) if self.memory else hashkey.load(self.state_dir)
            self._hash_key = key
        return key

    def data_version(self) -> int:
        """Moves only when another connection commits: a nearly free "did anything change?"."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (BEGIN IMMEDIATE), or a savepoint when nested."""
        if self._depth:
            name = f"sp{self._depth}"
            self.conn.execute(f"SAVEPOINT {name}")
            self._depth += 1
            try:
                yield self.conn
            except BaseException:
                self._quietly(f"ROLLBACK TO {name}", f"RELEASE {name}")
                raise
            else:
                self.conn.execute(f"RELEASE {name}")
            finally:
                self._depth -= 1
            return
        self._begin_immediate()
        self._depth = 1
        try:
            yield self.conn
            self.conn.execute("COMMIT")
        except BaseException:
            # A COMMIT that failed (disk full) leaves the transaction open; a statement that
            # failed may have ended it already. Either way nothing of it is kept.
            if self.conn.in_transaction:
                self._quietly("ROLLBACK")
            raise
        finally:
            self._depth = 0

    def _quietly(self, *statements: str) -> None:
        """Undo statements run while an error is already on its way: theirs must not hide it."""
        for sql in statements:
            try:
                self.conn.execute(sql)
            except (sqlite3.Error, StateUnusable):
                return

    def _begin_immediate(self) -> None:
        # busy_timeout already waits inside SQLite; this loop covers the rare case where
        # SQLite returns SQLITE_BUSY at once (e.g. a WAL recovery in progress elsewhere).
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        delay = 0.005
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() > deadline:
                    code = getattr(exc, "sqlite_errorname", "SQLITE_BUSY")
                    raise StateError(
                        f"{self.path} stayed locked by another writer for "
                        f"{BUSY_TIMEOUT_S:.0f} s ({code})") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.25)

    def execute(self, sql: str, params: tuple[object, ...] | dict[str, object] = ()
                ) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)


def open_database(state_dir: str | Path | None = None, *, create: bool = True) -> Database:
    path = state_dir if isinstance(state_dir, Path) else resolve_state_dir(state_dir)
    return Database(path, create=create)
