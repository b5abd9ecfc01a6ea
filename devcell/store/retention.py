"""What retention reads and writes: snapshots with a ttl, snapshots a cell's schedule took,
and the record an expired snapshot leaves behind.

An expiry is a deletion with a reason: `mark_expiring` asks for it (deleting_at, and
status.expired saying why), the snapshot's delete plan frees the checkpoint, and the row
stays with phase Expired, so an apply of the manifest that declared it finds it expired and
does not take it again.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from devcell.records import Record
from devcell.store import objects
from devcell.store.clock import now

SCHEDULED_LABEL = "devcell.dev/scheduled-by"
"""Label a scheduled snapshot carries (the cell's name), for `get snapshots -l`. Retention
goes by status.schedule, which only DevCell writes, never by the label a user could copy."""


class Candidate(Record):
    """A live snapshot retention may have to act on (a ttl, or taken by a schedule)."""

    id: str
    cell_id: str | None
    created_at: str
    ttl: str | None
    scheduled_by: str | None
    slot: str | None
    taken: bool


def candidates(conn: sqlite3.Connection) -> list[Candidate]:
    """Live snapshots not already being deleted that carry a ttl or were scheduled."""
    # instr() first: a plain substring test spares parsing the JSON of every other row
    # (this runs on every inline converge); json_extract then decides.
    rows = conn.execute(
        "SELECT id, cell_id, created_at, json_extract(spec, '$.ttl'), "
        "json_extract(status, '$.schedule.by'), json_extract(status, '$.schedule.slot'), "
        "checkpoint_ref FROM snapshots WHERE deleted_at IS NULL AND deleting_at IS NULL AND "
        "((instr(spec, '\"ttl\"') AND json_extract(spec, '$.ttl') IS NOT NULL) OR "
        "(instr(status, '\"schedule\"') AND json_extract(status, '$.schedule') IS NOT NULL)) "
        "ORDER BY rowid").fetchall()
    return [Candidate(r[0], r[1], r[2], r[3], r[4], r[5], r[6] is not None) for r in rows]


def expiring(conn: sqlite3.Connection) -> list[str]:
    """Ids of snapshots whose expiry was recorded but whose deletion is not done (its delete
    failed or was interrupted): retention work still due."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM snapshots WHERE deleted_at IS NULL AND deleting_at IS NOT NULL AND "
        "instr(status, '\"expired\"') AND json_extract(status, '$.expired') IS NOT NULL "
        "ORDER BY rowid")]


def scheduled(conn: sqlite3.Connection, cell_id: str) -> list[objects.ObjectRecord]:
    """The live snapshots the cell's schedule took (or is taking), newest slot first."""
    rows = conn.execute(
        "SELECT * FROM snapshots WHERE deleted_at IS NULL AND cell_id = ? AND "
        "instr(status, '\"schedule\"') AND json_extract(status, '$.schedule.by') = ? "
        "ORDER BY json_extract(status, '$.schedule.slot') DESC, rowid DESC",
        (cell_id, cell_id)).fetchall()
    return [objects.from_row("Snapshot", r) for r in rows]


def cells_with_retain(conn: sqlite3.Connection) -> list[str]:
    """Live cells whose spec sets snapshots.retain."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM cells WHERE deleted_at IS NULL AND deleting_at IS NULL AND "
        "instr(spec, '\"retain\"') AND json_extract(spec, '$.snapshots.retain') IS NOT NULL "
        "ORDER BY rowid")]


def name_used(conn: sqlite3.Connection, name: str) -> bool:
    """Whether any snapshot, live, deleted or expired, was ever called `name` (a scheduled
    snapshot's name is its slot: a slot taken once is never taken again)."""
    return conn.execute("SELECT 1 FROM snapshots WHERE name = ? LIMIT 1",
                        (name,)).fetchone() is not None


def insert_scheduled(conn: sqlite3.Connection, *, name: str, cell: objects.ObjectRecord,
                     slot: str, spec_hash: str, manifest_hash: str) -> str:
    """Record the snapshot a cell's schedule takes for `slot`; its id."""
    labels = {SCHEDULED_LABEL: cell.name}
    snapshot_id = objects.insert(
        conn, kind="Snapshot", name=name, spec={"cell": cell.name}, labels=labels,
        annotations={}, spec_hash=spec_hash, manifest_hash=manifest_hash, source=None,
        extra={"cell_id": cell.id, "owner": cell.extra.get("owner")})
    conn.execute("UPDATE snapshots SET status = ? WHERE id = ?",
                 (json.dumps({"schedule": {"by": cell.id, "slot": slot}}), snapshot_id))
    return snapshot_id


def mark_expiring(conn: sqlite3.Connection, record: objects.ObjectRecord,
                  expired: dict[str, Any]) -> None:
    """Ask for the snapshot's deletion because it expired (status.expired says why)."""
    status = dict(record.status, expired=dict(expired, at=now()))
    status["conditions"] = objects.set_condition(
        status.get("conditions", []), "Ready", "False", "Expired", str(expired["message"]))
    cur = conn.execute(
        "UPDATE snapshots SET deleting_at = ?, status = ?, resource_version = "
        "resource_version + 1, updated_at = ? WHERE id = ? AND deleted_at IS NULL AND "
        "deleting_at IS NULL", (now(), json.dumps(status), now(), record.id))
    if cur.rowcount == 1:
        record.deleting_at = now()
        record.status = status
        record.resource_version += 1


def expired_named(conn: sqlite3.Connection, name: str) -> objects.ObjectRecord | None:
    """The expired snapshot called `name`, when the last snapshot of that name expired (and
    no live one has the name)."""
    if objects.get(conn, "Snapshot", name) is not None:
        return None
    row = conn.execute(
        "SELECT * FROM snapshots WHERE name = ? AND deleted_at IS NOT NULL "
        "ORDER BY deleted_at DESC, rowid DESC LIMIT 1", (name,)).fetchone()
    if row is None or row["phase"] != objects.Phase.EXPIRED:
        return None
    return objects.from_row("Snapshot", row)


def expired(conn: sqlite3.Connection, *, declared_only: bool = True
            ) -> list[objects.ObjectRecord]:
    """Expired snapshots whose name no live snapshot has taken since (declared_only: those
    applied from a manifest, which an apply would otherwise take again)."""
    rows = conn.execute(
        "SELECT * FROM snapshots s WHERE s.phase = ? AND s.deleted_at IS NOT NULL"
        + (" AND s.source IS NOT NULL" if declared_only else "")
        + " AND NOT EXISTS (SELECT 1 FROM snapshots t WHERE t.name = s.name AND "
        "(t.deleted_at IS NULL OR t.deleted_at > s.deleted_at)) ORDER BY s.name",
        (objects.Phase.EXPIRED,)).fetchall()
    return [objects.from_row("Snapshot", r) for r in rows]
