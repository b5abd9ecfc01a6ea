"""Read the state files a cell's supervisor writes for its services (backends/supervisor.py).

Each service has `NAME` (state, restarts, streak, lastExit, since, backoff) and, while a
readiness check runs, `NAME.ready` (ready, ok, failed, last, at): lines of `key=value`. The
cell writes them, so the host reads them as it reads anything a cell wrote: the directory
and each file opened without following links, regular files only, a bounded number of
bounded files, unknown keys and malformed values ignored. What comes back is plain data for
`Observed.detail["services"]`, judged by the cell controller (controllers/services.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from devcell import safeio

MAX_FILES = 256
MAX_BYTES = 1024
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_STATES = frozenset({"waiting", "running", "restarting", "crash-looping", "exited"})
_INTS = ("restarts", "streak", "lastExit", "since", "backoff", "ok", "failed", "last", "at")


def _parse(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in data.decode("utf-8", "replace").splitlines()[:32]:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in _INTS:
            if re.fullmatch(r"-?[0-9]{1,12}", value):
                out[key] = int(value)
        elif key == "state" and value in _STATES:
            out[key] = value
        elif key == "ready" and value in ("true", "false"):
            out[key] = value == "true"
    return out


def _read(directory: Path, name: str) -> dict[str, Any] | None:
    try:
        fd = safeio.open_regular(directory, name)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        return _parse(safeio.read_some(fd, MAX_BYTES))
    except OSError:  # an I/O error of the disk: no state to report, not a crash
        return None
    finally:
        os.close(fd)


def _names(directory: Path) -> list[str]:
    """Service names with a state file in `directory` (at most MAX_FILES entries looked at)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    found: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_FILES:
                    break
                if _NAME.fullmatch(entry.name):
                    found.append(entry.name)
    except OSError:
        return []
    finally:
        os.close(fd)
    return sorted(found)


def read(directory: Path) -> dict[str, dict[str, Any]]:
    """Service name -> what its state files say ({} when there are none)."""
    out: dict[str, dict[str, Any]] = {}
    for name in _names(directory):
        state = _read(directory, name)
        if not state or "state" not in state:
            continue
        check = _read(directory, f"{name}.ready")
        if check is not None and "ready" in check:
            state["check"] = check
        out[name] = state
    return out
