"""What DevCell saw people do with a cell (`<state>/activity/<cell_id>/`), for idle sleep.

Kept beside the database, not in it, because recording must cost almost nothing on the paths
that are measured (`devcell exec` on a running cell): one small write of a file, no database
transaction, no observe pass. Two kinds of file per cell:

- `last`: the latest activity that ended, in words ("exec session closed"); its mtime is when.
  Rewritten whole by each recorder (a torn or foreign file only loses the words, not the time).
- `open.<pid>.<kind>`: a session open now (an SSH connection, an exec, a port-forward with a
  connection open), written when it opens and removed when it closes, when `last` is written.
  A session whose process is gone (killed) is closed by the next reader, at that reader's time.

Only DevCell's own processes write here, and they are the host's: nothing a cell writes is
read. Files are still opened without following links and read in bounded amounts, as every
file of the state directory is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from devcell.store.activity_sessions import (
    DIRECTORY as DIRECTORY,
)
from devcell.store.activity_sessions import (
    LAST,
    MAX_BYTES,
    MAX_FILES,
    OPEN,
    WORDS,
    Session,
    _directory,
    note,
    open_session,
)


@dataclass(frozen=True)
class Activity:
    """One thing DevCell saw happen, and when (UTC)."""

    what: str
    at: datetime


@dataclass(frozen=True)
class Seen:
    """A cell's activity as recorded: sessions open now, and the latest that ended."""

    open: tuple[Activity, ...]
    """What is open now: `what` names it ("ssh session"), `at` when it opened."""
    last: Activity | None


class Connections:
    """The session of a process serving many connections (a port-forward): open while at
    least one connection is, closed (and its close recorded) when the last one ends."""

    def __init__(self, state_dir: Path | str, cell_id: str, kind: str) -> None:
        import threading

        self.state_dir = state_dir
        self.cell_id = cell_id
        self.kind = kind
        self._count = 0
        self._session: Session | None = None
        self._lock = threading.Lock()

    def opened(self) -> None:
        with self._lock:
            self._count += 1
            if self._count == 1:
                self._session = open_session(self.state_dir, self.cell_id, self.kind)

    def closed(self) -> None:
        with self._lock:
            self._count -= 1
            if self._count == 0 and self._session is not None:
                self._session.close()
                self._session = None


def seen(state_dir: Path | str, cell_id: str) -> Seen:
    """The cell's recorded activity; sessions of processes gone are closed now."""
    directory = _directory(state_dir, cell_id)
    try:
        names = sorted(os.listdir(directory))[:MAX_FILES]
    except OSError:
        return Seen((), None)
    opened: list[Activity] = []
    last = _read(directory, LAST)
    for name in names:
        if not name.startswith(OPEN):
            continue
        pid, _, kind = name[len(OPEN):].partition(".")
        if not pid.isdigit() or kind not in WORDS:
            continue
        found = _read(directory, name)
        if found is None:
            continue
        if _alive(int(pid)) and not _reused(int(pid), found.at):
            opened.append(Activity(WORDS[kind], found.at))
            continue
        ended = Activity(f"{WORDS[kind]} ended (its process was gone)", _now())
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass
        note(state_dir, cell_id, ended.what)
        if last is None or ended.at > last.at:
            last = ended
    return Seen(tuple(opened), last)


def forget(state_dir: Path | str, cell_id: str) -> None:
    """Drop a deleted cell's activity (its sessions' own processes may still remove theirs)."""
    directory = _directory(state_dir, cell_id)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names[:MAX_FILES]:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass
    try:
        os.rmdir(directory)
    except OSError:
        pass


def _read(directory: str, name: str) -> Activity | None:
    try:
        fd = os.open(os.path.join(directory, name),
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        words = os.read(fd, MAX_BYTES).decode("utf-8", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return Activity(words or "activity", datetime.fromtimestamp(st.st_mtime, UTC))


def _now() -> datetime:
    return datetime.now(UTC)


def _reused(pid: int, written: datetime) -> bool:
    """Whether `pid` now names a process started after its session file was written (the
    session's own process died and the number was given to another)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read(4096).rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f.read(1 << 16).splitlines()
                        if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > written.timestamp() + 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
