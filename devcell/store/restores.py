"""A cell's pending `snapshot restore`: desired state recorded beside the cell (`cells.restore`).

The request names the snapshot to restore and, unless the user declined one, the id and name
the safety snapshot will have. Both are fixed when the request is recorded, so a restore
interrupted by a crash and planned again takes the same safety checkpoint (found complete,
not taken twice) and ends in the same workspace. The cell controller plans from it and clears
it in the transaction that finishes the restore (or its cancellation clears it).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from devcell.errors import Conflict
from devcell.records import Record
from devcell.store.clock import now
from devcell.store.objects import Key, ObjectRecord


class Request(Record):
    """A restore asked of a cell (the snapshot to put back, the safety snapshot taken
    first), kept with the cell until the restore is done."""

    snapshot_id: str
    snapshot: str
    """The snapshot's name when the restore was asked for (shown; the id is what counts)."""
    safety_id: str | None
    safety: str | None
    """The safety snapshot's name (None: `--no-safety-snapshot`)."""
    requested_at: str
    away_from: str | None = None
    """A move (`devcell node drain`): the node the workspace leaves; the snapshot is then the
    one taken first, of the stopped cell (safety_id), and no approval is asked (nothing is
    replaced)."""

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)


def of(record: ObjectRecord) -> Request | None:
    """The cell's pending restore, if any."""
    raw = record.extra.get("restore")
    if not raw:
        return None
    data: dict[str, Any] = json.loads(raw)
    return Request(**{k: data.get(k) for k in Request._fields})  # type: ignore[arg-type]


def new_request(*, snapshot_id: str, snapshot: str, safety_id: str | None,
                safety: str | None, away_from: str | None = None) -> Request:
    return Request(snapshot_id, snapshot, safety_id, safety, now(), away_from)


def record(conn: sqlite3.Connection, cell: ObjectRecord, request: Request) -> None:
    """Write the request (a stale `cell` is refused: re-read and retry)."""
    cur = conn.execute(
        "UPDATE cells SET restore = ?, resource_version = resource_version + 1, updated_at = ? "
        "WHERE id = ? AND resource_version = ? AND deleted_at IS NULL",
        (request.to_json(), now(), cell.id, cell.resource_version))
    if cur.rowcount != 1:
        raise Conflict(f'cell "{cell.name}" was modified by someone else; try again')


def clear(conn: sqlite3.Connection, cell_id: str) -> None:
    conn.execute("UPDATE cells SET restore = NULL, resource_version = resource_version + 1, "
                 "updated_at = ? WHERE id = ? AND restore IS NOT NULL", (now(), cell_id))


def pending_keys(conn: sqlite3.Connection) -> list[Key]:
    """Live cells with a restore to carry out (the daemon queues them)."""
    return [("Cell", r[0]) for r in conn.execute(
        "SELECT id FROM cells WHERE restore IS NOT NULL AND deleted_at IS NULL "
        "AND deleting_at IS NULL")]


def restoring_to(conn: sqlite3.Connection, snapshot_id: str) -> list[str]:
    """Names of the live cells with a pending restore to this snapshot (its deletion waits
    for them: the restore reads its checkpoint)."""
    found = []
    for name, raw in conn.execute("SELECT name, restore FROM cells WHERE restore IS NOT NULL "
                                  "AND deleted_at IS NULL ORDER BY name"):
        try:
            target = json.loads(raw).get("snapshot_id")
        except (ValueError, AttributeError):
            continue
        if target == snapshot_id:
            found.append(str(name))
    return found
