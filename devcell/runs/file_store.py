"""The file store: one JSON file per run, at `<root>/runs/<runId>/snapshot.json`.

A save never leaves a half-written snapshot behind, whatever moment the process dies at:
the bytes go to a temporary file in the run's directory (`.snapshot.json.<pid>.<random>.tmp`,
created 0600 with O_EXCL), which is fsynced, renamed over `snapshot.json` (atomic on POSIX)
and followed by an fsync of the directory, so the rename itself is durable. A reader therefore
sees the old snapshot or the new one. A process killed mid-save leaves only its temporary file;
the next save or load of that run removes it.

Removing temporary files is only safe when nobody is writing one, so every save holds an
exclusive flock on the run's directory; a load removes them only when it can take that lock at
once, and otherwise leaves them to the writer. Directories are 0700 and files 0600; paths are
walked with O_NOFOLLOW and `dir_fd`, so a symbolic link planted in the store is refused
(UNSAFE_PATH) rather than followed.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from devcell.errors import StorageError
from devcell.log import logger
from devcell.runs import envelope, model, oserrors, runid

SNAPSHOT_NAME = "snapshot.json"
TEMP_PREFIX = ".snapshot.json."
TEMP_SUFFIX = ".tmp"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SAVE_ATTEMPTS = 100  # each retry means a concurrent delete of this run succeeded


def is_temp_name(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


class FileSnapshotStore:
    """A SnapshotStore over a directory tree; safe for several processes at once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runs_dir = root / "runs"

    def __repr__(self) -> str:
        return f"FileSnapshotStore(root={str(self.root)!r})"

    def path_of(self, run_id: str) -> Path:
        """Where the snapshot of `run_id` lives (whether or not it exists)."""
        return self.runs_dir / runid.check(run_id, store=str(self.runs_dir)) / SNAPSHOT_NAME

    # -- the SnapshotStore protocol ---------------------------------------------------------

    def save(self, snapshot: model.RunSnapshot) -> None:
        envelope.require_snapshot(snapshot, where=str(self.runs_dir))
        run_id = runid.check(snapshot.run_id, store=str(self.runs_dir))
        path = self.runs_dir / run_id / SNAPSHOT_NAME
        data = envelope.encode(snapshot, where=str(path)) + b"\n"
        for _ in range(_SAVE_ATTEMPTS):
            with self._locked_run_dir(run_id) as dir_fd:
                if dir_fd is None:  # deleted while we waited for the lock: start again
                    continue
                self._remove_temps(dir_fd, path.parent)
                _write_and_replace(dir_fd, data, path)
                logger.debug("saved run snapshot {} ({} bytes) to {}", run_id, len(data), path)
                return
        raise StorageError(code=StorageError.IO_ERROR, path=str(path),
                           reason="the run's directory kept being deleted while saving")

    def load(self, run_id: str) -> model.RunSnapshot | None:
        path = self.path_of(run_id)
        dir_fd = self._open_run_dir(run_id)
        if dir_fd is None:
            return None
        try:
            if _try_lock(dir_fd, path.parent):
                try:
                    self._remove_temps(dir_fd, path.parent)
                finally:
                    fcntl.flock(dir_fd, fcntl.LOCK_UN)
            data = _read_snapshot(dir_fd, path)
        finally:
            os.close(dir_fd)
        if data is None:
            return None
        return envelope.decode(data, run_id=run_id, where=str(path))

    def delete(self, run_id: str) -> None:
        path = self.path_of(run_id)
        run_dir = path.parent
        runs_fd = self._open_runs_dir(create=False)
        if runs_fd is None:
            return
        try:
            with oserrors.translated(run_dir, "cannot open the run directory"):
                try:
                    dir_fd = os.open(run_id, _DIR_FLAGS, dir_fd=runs_fd)
                except FileNotFoundError:
                    return
            try:
                with oserrors.translated(run_dir, "cannot lock the run directory"):
                    fcntl.flock(dir_fd, fcntl.LOCK_EX)
                    still_there = _still_there(runs_fd, run_id, dir_fd)
                if not still_there:
                    return  # deleted by someone else while we waited
                with oserrors.translated(path, "cannot remove the snapshot"):
                    for name in os.listdir(dir_fd):
                        if name == SNAPSHOT_NAME or is_temp_name(name):
                            with suppress(FileNotFoundError):
                                os.unlink(name, dir_fd=dir_fd)
                    _fsync(dir_fd)
                with oserrors.translated(run_dir, "cannot remove the run directory"):
                    try:
                        os.rmdir(run_id, dir_fd=runs_fd)
                    except OSError as exc:
                        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                            raise
                        logger.warning("kept {}: it holds files DevCell did not write", run_dir)
                    _fsync(runs_fd)
            finally:
                os.close(dir_fd)
        finally:
            os.close(runs_fd)
        logger.debug("deleted run snapshot {} from {}", run_id, path)

    def close(self) -> None:
        """Nothing is held open between calls."""

    # -- directories ------------------------------------------------------------------------

    def _open_runs_dir(self, *, create: bool) -> int | None:
        """A descriptor of `<root>/runs` (created 0700 if `create`), or None if it is missing."""
        created = False
        if create:
            with oserrors.translated(self.root, "cannot create the store directory"):
                os.makedirs(self.root, mode=0o700, exist_ok=True)
            with oserrors.translated(self.runs_dir, "cannot create the runs directory"):
                try:
                    os.mkdir(self.runs_dir, 0o700)
                    created = True
                except FileExistsError:
                    pass
        with oserrors.translated(self.runs_dir, "cannot open the runs directory"):
            try:
                fd = os.open(self.runs_dir, _DIR_FLAGS)
            except FileNotFoundError:
                if create:
                    raise
                return None
            try:
                _tighten(fd)
                if created:
                    _fsync_path(self.root)
            except BaseException:
                os.close(fd)
                raise
        return fd

    def _open_run_dir(self, run_id: str) -> int | None:
        runs_fd = self._open_runs_dir(create=False)
        if runs_fd is None:
            return None
        try:
            with oserrors.translated(self.runs_dir / run_id, "cannot open the run directory"):
                try:
                    return os.open(run_id, _DIR_FLAGS, dir_fd=runs_fd)
                except FileNotFoundError:
                    return None
        finally:
            os.close(runs_fd)

    @contextmanager
    def _locked_run_dir(self, run_id: str) -> Iterator[int | None]:
        """The run's directory (created 0700 if needed), exclusively locked; None if it was
        deleted by someone else while we waited for the lock."""
        run_dir = self.runs_dir / run_id
        runs_fd = self._open_runs_dir(create=True)
        assert runs_fd is not None
        try:
            with oserrors.translated(run_dir, "cannot create the run directory"):
                created = False
                try:
                    os.mkdir(run_id, 0o700, dir_fd=runs_fd)
                    created = True
                except FileExistsError:
                    pass
                try:
                    dir_fd = os.open(run_id, _DIR_FLAGS, dir_fd=runs_fd)
                except FileNotFoundError:  # deleted between our mkdir and our open
                    yield None
                    return
            try:
                with oserrors.translated(run_dir, "cannot prepare the run directory"):
                    _tighten(dir_fd)
                    if created:
                        _fsync(runs_fd)
                    fcntl.flock(dir_fd, fcntl.LOCK_EX)
                    still_there = _still_there(runs_fd, run_id, dir_fd)
                yield dir_fd if still_there else None
            finally:
                os.close(dir_fd)  # also releases the lock
        finally:
            os.close(runs_fd)

    def _remove_temps(self, dir_fd: int, run_dir: Path) -> None:
        """Remove temporary files left by saves that died. Only with the run's lock held."""
        with oserrors.translated(run_dir, "cannot remove stale temporary files"):
            stale = [name for name in os.listdir(dir_fd) if is_temp_name(name)]
            for name in stale:
                with suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
        if stale:
            logger.warning("removed {} temporary file(s) left in {} by an interrupted save",
                           len(stale), run_dir)


# -- files ------------------------------------------------------------------------------------

def _write_and_replace(dir_fd: int, data: bytes, path: Path) -> None:
    """Temp file, write, fsync, rename over `path`, fsync the directory."""
    name = f"{TEMP_PREFIX}{os.getpid()}.{os.urandom(4).hex()}{TEMP_SUFFIX}"
    temp = path.parent / name
    with oserrors.translated(temp, "cannot create a temporary file"):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
    try:
        try:
            with oserrors.translated(temp, "cannot write the snapshot"):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                _fsync(fd)
        finally:
            with oserrors.translated(temp, "cannot close the temporary file"):
                os.close(fd)
        with oserrors.translated(path, "cannot rename the temporary file into place"):
            os.replace(name, SNAPSHOT_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    with oserrors.translated(path.parent, "cannot flush the run directory"):
        _fsync(dir_fd)


def _read_snapshot(dir_fd: int, path: Path) -> bytes | None:
    """The bytes of `snapshot.json` (at most one past the cap), or None if there is none."""
    with oserrors.translated(path, "cannot read the snapshot"):
        try:
            fd = os.open(SNAPSHOT_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        try:
            chunks: list[bytes] = []
            total = 0
            while total <= envelope.MAX_BYTES:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _try_lock(dir_fd: int, run_dir: Path) -> bool:
    with oserrors.translated(run_dir, "cannot lock the run directory"):
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def _still_there(runs_fd: int, run_id: str, dir_fd: int) -> bool:
    """Is the directory we hold still the one named `run_id` (not deleted, not replaced)?"""
    try:
        named = os.stat(run_id, dir_fd=runs_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(dir_fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _tighten(fd: int) -> None:
    if os.fstat(fd).st_mode & 0o077:
        os.fchmod(fd, 0o700)


def _fsync(fd: int) -> None:
    # On macOS fsync() does not reach the platter; F_FULLFSYNC does. Linux has no such flag.
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
            return
        except OSError:
            pass
    os.fsync(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root may be a link
    try:
        _fsync(fd)
    finally:
        os.close(fd)
