"""Sessions on a cell, recorded as they open and close (`<state>/activity/<cell_id>/`): the
writing half of store/activity.py, which reads them for idle sleep.

Apart because `devcell exec`'s fast path records its session and its whole budget is a few
milliseconds: this imports nothing but `os` (the reading half builds dataclasses and loads
datetime, ~7 ms). store/activity.py says what the files are.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~2 ms to import; mypy reads this as True
if TYPE_CHECKING:
    from pathlib import Path

DIRECTORY = "activity"
LAST = "last"
OPEN = "open."
MAX_BYTES = 256
MAX_FILES = 4096
WORDS = {"ssh": "ssh session", "exec": "exec session",
         "port-forward": "port-forward connection"}
"""A session's kind -> what it is called ("ssh session closed at ...")."""


def _directory(state_dir: Path | str, cell_id: str) -> str:
    return os.path.join(state_dir, DIRECTORY, cell_id)


def _write(path: str, text: str) -> None:
    """One small write; the directories are made on the first one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, text.encode()[:MAX_BYTES])
    finally:
        os.close(fd)


def note(state_dir: Path | str, cell_id: str, what: str) -> bool:
    """Record that `what` happened now ("exec session closed"); False when it could not be
    (nothing is ever refused because its activity could not be written)."""
    try:
        _write(os.path.join(_directory(state_dir, cell_id), LAST), what)
    except OSError:
        return False
    return True


class Session:
    """An open session of this process (`kind`: ssh, exec, port-forward) on a cell: recorded
    when made, its close recorded by close() (idempotent). A context manager too."""

    def __init__(self, state_dir: Path | str, cell_id: str, kind: str) -> None:
        self.directory = _directory(state_dir, cell_id)
        self.kind = kind
        self.path = os.path.join(self.directory, f"{OPEN}{os.getpid()}.{kind}")
        self.closed = False
        _write(self.path, WORDS[kind])

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        note(os.path.dirname(os.path.dirname(self.directory)), os.path.basename(self.directory),
             f"{WORDS[self.kind]} closed")
        try:
            os.unlink(self.path)
        except OSError:  # the state directory went away: nothing left to keep awake
            pass

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_session(state_dir: Path | str, cell_id: str, kind: str) -> Session | None:
    """A Session, or None when the state directory cannot take one (read-only, full): a
    command is never refused because its activity could not be written."""
    try:
        return Session(state_dir, cell_id, kind)
    except OSError:
        return None
