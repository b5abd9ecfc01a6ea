"""The reconcile lock: one process at a time executes operations in a state directory.

An exclusive flock on `<state>/reconcile.lock`, taken around every converge (inline by a
command, or by the daemon): the kernel drops it when its holder dies, so an operation left
Running while nobody holds the lock was left by a dead process (reconciler/recovery.py).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILE_NAME = "reconcile.lock"


@contextmanager
def holding(state_dir: Path) -> Iterator[None]:
    """Within: this process alone executes operations in `state_dir` (waits for its turn)."""
    fd = os.open(state_dir / FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def held(state_dir: Path) -> bool:
    """Whether some process (this one included, through another descriptor) holds the lock
    now: its Running operations are in flight, not left by a crash."""
    try:
        fd = os.open(state_dir / FILE_NAME, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # never made: nobody has reconciled here yet
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a shared lock just taken
    return False
