"""A pruned cell's kept workspace: recorded beside the cell (`cells.pruned`) when a prune asks
for its deletion.

A prune deletes what a manifest no longer declares, and a manifests directory can lose a file
for reasons that are not the user's wish (a checkout swapping the directory, a generator
rewriting it slowly). So a pruned cell's workspace is kept: its delete plan first takes a
safety snapshot of it, whose ttl is the time it is kept (then the snapshot expires like any
other and its storage is reclaimed). The snapshot's id and name are fixed when the prune is
recorded, so a delete interrupted by a crash and planned again takes the same checkpoint
(found complete, not taken twice).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from devcell import ids, names
from devcell.records import Record
from devcell.store import objects
from devcell.store.clock import now
from devcell.store.objects import ObjectRecord

DEFAULT_KEEP_SECONDS = 24 * 3600
SUFFIX = "-pruned-"


class Kept(Record):
    """A pruned cell's workspace, kept as a safety snapshot for `keep_seconds`."""

    keep_seconds: int
    safety_id: str
    safety: str
    """The safety snapshot's name."""

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


def of(record: ObjectRecord) -> Kept | None:
    """What the cell's prune keeps, if it was pruned with a keep time."""
    raw = record.extra.get("pruned")
    if not raw:
        return None
    try:
        data: dict[str, Any] = json.loads(raw)
        return Kept(int(data["keep_seconds"]), str(data["safety_id"]), str(data["safety"]))
    except (ValueError, KeyError, TypeError):
        return None


def record(conn: sqlite3.Connection, cell: ObjectRecord, keep_seconds: int) -> Kept | None:
    """Note that the cell's deletion (just requested by a prune) keeps its workspace for
    `keep_seconds` (0: nothing kept). Called in the prune's transaction."""
    if cell.kind != "Cell" or keep_seconds <= 0:
        return None
    kept = Kept(keep_seconds, ids.new_id("snap"), safety_name(conn, cell.name))
    conn.execute("UPDATE cells SET pruned = ?, updated_at = ? WHERE id = ?",
                 (kept.to_json(), now(), cell.id))
    return kept


def clear(conn: sqlite3.Connection, cell_id: str) -> None:
    """The deletion was withdrawn: nothing to keep."""
    conn.execute("UPDATE cells SET pruned = NULL WHERE id = ? AND pruned IS NOT NULL",
                 (cell_id,))


def safety_name(conn: sqlite3.Connection, cell: str) -> str:
    stem = cell[:names.MAX_NAME_LENGTH - len(SUFFIX) - 4].rstrip("-") + SUFFIX
    n = 1
    while objects.get(conn, "Snapshot", f"{stem}{n}", include_deleted=False) is not None:
        n += 1
    return f"{stem}{n}"
