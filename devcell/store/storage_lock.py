"""The lock between what places storage and what collects it (`devcell gc`).

A creating path makes its storage visible (a checkpoint renamed into place, a volume, an
imported tree) before the record that references it commits. A collection judging in between
took it for an orphan: `gc --approve` removed the checkpoint an import was placing, the import
said success and the snapshot showed Ready over nothing. So every operation and every import
holds `storage.lock` shared from before it places anything until its record is written, and a
collection holds it exclusive while it judges and removes: it waits for the work in flight, and
new work waits for it. The thread that holds it exclusive runs its own removal steps through
the same executor, so `creating()` there does not wait on itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = "storage.lock"
_collecting = threading.local()


def _open(state_dir: Path) -> int:
    return os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                   0o600)


@contextlib.contextmanager
def creating(state_dir: Path) -> Iterator[None]:
    """Held shared around placing storage and recording its reference."""
    if getattr(_collecting, "depth", 0):
        yield
        return
    fd = _open(state_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def collecting(state_dir: Path) -> Iterator[None]:
    """Held exclusive while a collection judges what nothing references and removes it."""
    fd = _open(state_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _collecting.depth = getattr(_collecting, "depth", 0) + 1
        try:
            yield
        finally:
            _collecting.depth -= 1
    finally:
        os.close(fd)
