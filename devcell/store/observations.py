"""When each cell's recorded phase was last confirmed by observing its backend.

`get` shows it (OBSERVED), so a user can tell a phase seen a moment ago from one written long
ago and never checked since. It is kept beside the database, in `<state>/observed.json`
(cell id -> epoch seconds), not in it: a no-op re-apply observes every cell it names and must
still write nothing to the database (a write there costs a transaction and wakes a daemon). A
confirmation is best effort: two writers at once keep the newer file, never a torn one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

FILENAME = "observed.json"
MAX_BYTES = 64 * 1024 * 1024


def _path(state_dir: Path) -> Path:
    return Path(state_dir) / FILENAME


def load(state_dir: Path) -> dict[str, float]:
    """Cell id -> when its phase was last confirmed (epoch seconds); {} when never."""
    try:
        with open(_path(state_dir), "rb") as f:
            data = json.loads(f.read(MAX_BYTES))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float)}


def confirm(state_dir: Path, cell_ids: Iterable[str], *, at: float | None = None,
            forget: Iterable[str] = ()) -> None:
    """Record that these cells' phases were confirmed at `at` (now), and drop `forget`."""
    ids = list(cell_ids)
    gone = set(forget)
    if not ids and not gone:
        return
    stamp = round(time.time() if at is None else at, 3)
    data = load(state_dir)
    for cell_id in gone:
        data.pop(cell_id, None)
    data.update(dict.fromkeys(ids, stamp))
    path = _path(state_dir)
    tmp = path.with_name(f".observed-{os.getpid()}-{time.monotonic_ns()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return  # a read-only state directory: the age shown stays older, nothing breaks
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
