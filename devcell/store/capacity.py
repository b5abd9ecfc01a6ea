"""What `get -o wide` and `devcell df` need to know from the database to label what they
measure: whose volume, which snapshot's checkpoint, on which backend. Sizes are never read
from here: they come from the filesystem and the engine (backends/host/census.py)."""

from __future__ import annotations

import sqlite3


def live_volumes(conn: sqlite3.Connection, cell_ids: list[str] | None = None
                 ) -> dict[str, list[str]]:
    """Cell id -> ids of its live volumes (the backend's volume ids)."""
    out: dict[str, list[str]] = {}
    for volume_id, cell_id in conn.execute(
            "SELECT id, cell_id FROM volumes WHERE deleted_at IS NULL ORDER BY created_at"):
        if cell_ids is None or cell_id in cell_ids:
            out.setdefault(str(cell_id), []).append(str(volume_id))
    return out


def checkpoints_of(conn: sqlite3.Connection, snapshot_ids: list[str]) -> dict[str, str]:
    """Snapshot id -> the backend holding its checkpoint (which has the snapshot's id): its
    cell's, or for an imported snapshot the one its import recorded; only those taken and not
    gone (an expired snapshot's record has no checkpoint left to measure)."""
    out: dict[str, str] = {}
    for start in range(0, len(snapshot_ids), 500):
        chunk = snapshot_ids[start:start + 500]
        marks = ",".join("?" for _ in chunk)
        for snap_id, backend in conn.execute(
                "SELECT s.id, COALESCE(c.backend, "
                "json_extract(s.status, '$.origin.backend'), 'fake') FROM snapshots s "
                f"LEFT JOIN cells c ON c.id = s.cell_id WHERE s.id IN ({marks}) "
                "AND s.checkpoint_ref IS NOT NULL AND s.deleted_at IS NULL", chunk):
            out[str(snap_id)] = str(backend)
    return out


def names(conn: sqlite3.Connection) -> tuple[dict[str, str], dict[str, str]]:
    """(cell id -> name, snapshot id -> name), deleted ones included (a leftover's owner)."""
    cells = {str(r[0]): str(r[1]) for r in conn.execute("SELECT id, name FROM cells")}
    snaps = {str(r[0]): str(r[1]) for r in conn.execute("SELECT id, name FROM snapshots")}
    return cells, snaps
