"""What the database says still needs a backend's volumes and checkpoints (`devcell gc`).

A reference is read from recorded rows, never guessed from a resource's name: live cells own
their volumes and sleep checkpoints, live snapshots their checkpoints, and a live fork (or a
live volume restored from a checkpoint) depends on the checkpoint it came from even after
its snapshot is gone. Deleted rows stay in the database (deleted_at), so "its object was
deleted" (a recorded decision) is told apart from "no object ever named it" (an orphan).
Ids are never reused, so once nothing references a resource nothing ever will again: what
garbage collection decided stays true while it runs.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class References:
    live_cells: frozenset[str]
    deleted_cells: frozenset[str]
    live_snapshots: frozenset[str]
    deleted_snapshots: frozenset[str]
    depended_on: frozenset[str]
    """Checkpoints a live cell was forked from or a live volume was restored from."""
    sleep_checkpoints: frozenset[str]
    """Sleep checkpoints live cells' status names (the current one and a superseded one)."""
    kept_runtimes: frozenset[str] = frozenset()
    """Live cells asleep with their runtime kept, stopped (a container's root filesystem the
    sleep kept): in use, not reclaimable, though nothing runs."""


def _ids(conn: sqlite3.Connection, sql: str) -> frozenset[str]:
    return frozenset(str(r[0]) for r in conn.execute(sql) if r[0])


def read(conn: sqlite3.Connection) -> References:
    """Every reference, read in one transaction (a consistent picture)."""
    conn.execute("BEGIN")
    try:
        return References(
            live_cells=_ids(conn, "SELECT id FROM cells WHERE deleted_at IS NULL"),
            deleted_cells=_ids(conn, "SELECT id FROM cells WHERE deleted_at IS NOT NULL"),
            live_snapshots=_ids(conn, "SELECT id FROM snapshots WHERE deleted_at IS NULL"),
            deleted_snapshots=_ids(conn,
                                   "SELECT id FROM snapshots WHERE deleted_at IS NOT NULL"),
            depended_on=_ids(conn, "SELECT forked_from FROM cells WHERE deleted_at IS NULL "
                                   "UNION SELECT from_snapshot_id FROM volumes "
                                   "WHERE deleted_at IS NULL"),
            sleep_checkpoints=_ids(
                conn, "SELECT json_extract(status, '$.sleep.checkpointId') FROM cells "
                      "WHERE deleted_at IS NULL UNION SELECT json_extract(status, "
                      "'$.sleep.supersedes') FROM cells WHERE deleted_at IS NULL"),
            kept_runtimes=_ids(
                conn, "SELECT id FROM cells WHERE deleted_at IS NULL AND phase = 'Sleeping' "
                      "AND json_extract(status, '$.sleep.rootfs')"),
        )
    finally:
        conn.execute("COMMIT")
