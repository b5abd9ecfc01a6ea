"""The port forwards running for a state directory (`<state>/forwards/<pid>.json`): which
local ports a `devcell port-forward` process relays to which cell ports, so `describe` shows
them. Kept beside the database, not in it: a forward is a process, not desired state, and it
ends with that process (its file is removed; one a killed process left is ignored and removed
by the next reader, as its pid is gone).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from devcell.records import Record

DIRECTORY = "forwards"
MAX_BYTES = 64 * 1024
MAX_FILES = 1024


class Forward(Record):
    pid: int
    cell_id: str
    address: str
    ports: tuple[tuple[int, int], ...]
    """(local, remote) pairs."""


def record(state_dir: Path, forward: Forward) -> Path:
    directory = Path(state_dir) / DIRECTORY
    directory.mkdir(mode=0o700, exist_ok=True)
    path = directory / f"{forward.pid}.json"
    path.unlink(missing_ok=True)  # a dead process's, under a reused pid
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": forward.pid, "cellId": forward.cell_id, "address": forward.address,
                   "ports": [list(p) for p in forward.ports]}, f)
    return path


def of_cell(state_dir: Path, cell_id: str) -> list[Forward]:
    """The live forwards to cell `cell_id` (stale files are removed)."""
    return live(state_dir).get(cell_id, [])


def live(state_dir: Path) -> dict[str, list[Forward]]:
    """Cell id -> its live forwards (stale files are removed)."""
    directory = Path(state_dir) / DIRECTORY
    try:
        names = sorted(os.listdir(directory))[:MAX_FILES]
    except OSError:
        return {}
    found: dict[str, list[Forward]] = {}
    for name in names:
        forward = _read(directory, name)
        if forward is None:
            continue
        if not _alive(forward.pid):
            (directory / name).unlink(missing_ok=True)
            continue
        found.setdefault(forward.cell_id, []).append(forward)
    return found


def _read(directory: Path, name: str) -> Forward | None:
    if not name.endswith(".json") or not name[:-5].isdigit():
        return None
    try:
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        data = json.loads(os.read(fd, MAX_BYTES))
        ports = tuple((int(a), int(b)) for a, b in data["ports"])
        return Forward(int(data["pid"]), str(data["cellId"]), str(data["address"]), ports)
    except (ValueError, KeyError, TypeError, OSError):
        return None
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
