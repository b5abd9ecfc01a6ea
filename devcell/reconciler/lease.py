"""The controller lease: one reconciler per state directory.

An exclusive flock on `<state>/controller.lease`, held for the daemon's lifetime: the kernel
drops it when the process dies, so a crashed daemon never leaves a stale lease behind. The
file holds the holder's pid, host and start time, so a second daemon can say who is in charge.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from devcell.errors import DevCellError
from devcell.records import Record
from devcell.store.clock import now

LEASE_FILE = "controller.lease"


class Holder(Record):
    """The process holding a state directory's lease (the daemon)."""

    pid: int
    host: str
    since: str
    manifests: str | None = None

    def describe(self) -> str:
        where = f" watching {self.manifests}" if self.manifests else ""
        return f"pid {self.pid} on {self.host}, since {self.since}{where}"


class LeaseHeld(DevCellError):
    def __init__(self, state_dir: Path, holder: Holder | None) -> None:
        who = holder.describe() if holder else "another process"
        super().__init__(f"another DevCell controller already reconciles {state_dir}: {who}")
        self.holder = holder


def _read(path: Path) -> Holder | None:
    try:
        data = json.loads(path.read_text() or "{}")
        return Holder(int(data["pid"]), str(data["host"]), str(data["since"]),
                      data.get("manifests"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Lease:
    """Held while the object lives (use as a context manager)."""

    def __init__(self, state_dir: Path, *, manifests: str | None = None) -> None:
        self.path = state_dir / LEASE_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise LeaseHeld(state_dir, _read(self.path)) from None
        self.holder = Holder(os.getpid(), os.uname().nodename, now(), manifests)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(self.holder.__dict__).encode(), 0)
        os.fsync(self._fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def current_holder(state_dir: Path) -> Holder | None:
    """Who holds the lease right now, or None when no controller runs."""
    path = state_dir / LEASE_FILE
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(path) or Holder(0, "?", "?")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
