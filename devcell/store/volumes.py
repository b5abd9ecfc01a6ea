"""Volume and attachment records: which workspace belongs to which cell, and where it came from."""

from __future__ import annotations

import sqlite3

from devcell import ids
from devcell.records import Record
from devcell.store.clock import now


class VolumeRecord(Record):
    """A workspace volume as the database records it (its files are the backend's)."""

    id: str
    cell_id: str
    name: str
    mount_path: str | None
    from_snapshot_id: str | None
    phase: str
    backend_ref: str | None


def _from_row(row: sqlite3.Row) -> VolumeRecord:
    return VolumeRecord(row["id"], row["cell_id"], row["name"], row["mount_path"],
                        row["from_snapshot_id"], row["phase"], row["backend_ref"])


def new_id() -> str:
    return ids.new_id("vol")


def for_cell(conn: sqlite3.Connection, cell_id: str) -> VolumeRecord | None:
    row = conn.execute(
        "SELECT * FROM volumes WHERE cell_id = ? AND deleted_at IS NULL ORDER BY created_at LIMIT 1",
        (cell_id,),
    ).fetchone()
    return _from_row(row) if row is not None else None


def record_created(
    conn: sqlite3.Connection, *, volume_id: str, cell_id: str, name: str, mount_path: str,
    from_snapshot_id: str | None, backend_ref: str | None,
) -> None:
    stamp = now()
    conn.execute(
        "INSERT INTO volumes (id, cell_id, name, mount_path, from_snapshot_id, phase, "
        "backend_ref, created_at) VALUES (?, ?, ?, ?, ?, 'Bound', ?, ?)",
        (volume_id, cell_id, name, mount_path, from_snapshot_id, backend_ref, stamp),
    )
    conn.execute(
        "INSERT INTO attachments (cell_id, volume_id, mount_path, attached_at) VALUES (?, ?, ?, ?)",
        (cell_id, volume_id, mount_path, stamp),
    )


def record_deleted(conn: sqlite3.Connection, volume_id: str) -> None:
    conn.execute("DELETE FROM attachments WHERE volume_id = ?", (volume_id,))
    conn.execute(
        "UPDATE volumes SET phase = 'Deleted', deleted_at = ? WHERE id = ?", (now(), volume_id)
    )
