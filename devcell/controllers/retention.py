"""Retention: which snapshots have expired, and when a cell's schedule takes the next one.

Three rules, judged from recorded state and the reconcile's clock (Context.clock), never
from a timer's memory, so a restart finds exactly what is due:

- `spec.ttl` of a Snapshot: it expires that long after it was created (its record's
  creation time);
- `spec.snapshots.retain` of a Cell: of the snapshots its schedule took, only the newest N
  that were taken are kept (a newer one still being taken is kept too); snapshots declared
  by hand are never counted nor expired by it;
- `spec.snapshots.every` of a Cell: periods counted from the cell's creation; the snapshot of
  a period is named after its start (`CELL-auto-YYYYMMDD-HHMMSS`), and only the latest
  period is ever due, so a reconciler that was down for ten periods takes one snapshot, and
  a period whose name was ever used (taken, deleted or expired) is never taken again.

A snapshot a live fork depends on never expires: it is kept, with the condition
`Expired=False, reason ForkDependsOnIt` and an `ExpiryDeferred` event, until the forks are
gone. An expiry is recorded as an operation with one `expire` step (which judges again
inside its write) that asks for the snapshot's deletion; its delete plan then frees the
checkpoint, as any deletion does, and the row stays with phase Expired.
"""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any

from devcell.manifests import model, quantities
from devcell.records import Record
from devcell.store import events, objects
from devcell.store import retention as stored
from devcell.store.objects import ObjectRecord

Key = objects.Key
DEFERRED = "ForkDependsOnIt"


def parse_time(stamp: str) -> datetime:
    """A recorded timestamp (`2026-12-01T03:07:03.123Z`) as an aware datetime."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Expiry(Record):
    """Why a snapshot expires (reason TTLExpired or RetainExceeded), in words for the user."""

    reason: str
    message: str

    def record(self) -> dict[str, Any]:
        return {"reason": self.reason, "message": self.message}


def expires_at(snap: ObjectRecord) -> datetime | None:
    """When the snapshot's ttl runs out (None without one)."""
    ttl = snap.spec.get("ttl")
    if not ttl:
        return None
    return parse_time(snap.created_at) + timedelta(seconds=quantities.duration_seconds(ttl))


def ttl_expiry(snap: ObjectRecord, now: datetime) -> Expiry | None:
    due = expires_at(snap)
    if due is None or now < due:
        return None
    return Expiry("TTLExpired", f"its ttl of {snap.spec['ttl']} ran out at {_stamp(due)}")


def over_retain(conn: sqlite3.Connection, cell: ObjectRecord) -> dict[str, Expiry]:
    """Snapshot id -> why, for the cell's scheduled snapshots beyond its `retain`."""
    retain = cell.spec.get("snapshots", {}).get("retain")
    if not retain:
        return {}
    out: dict[str, Expiry] = {}
    taken = 0
    for snap in stored.scheduled(conn, cell.id):
        if snap.deleting:
            continue  # going already (expired, or deleted by hand)
        if taken >= retain:
            out[snap.id] = Expiry(
                "RetainExceeded", f"cell {cell.name} retains the newest {retain} "
                f"scheduled snapshots and {retain} newer ones were taken")
        elif snap.extra.get("checkpoint_ref") is not None:
            taken += 1
    return out


def judge(conn: sqlite3.Connection, snap: ObjectRecord, now: datetime) -> Expiry | None:
    """Whether the snapshot has expired (ttl, or beyond its cell's retain), and why."""
    if snap.deleting or snap.deleted_at is not None:
        return None
    expiry = ttl_expiry(snap, now)
    if expiry is not None:
        return expiry
    by = snap.status.get("schedule", {}).get("by")
    if by is None:
        return None
    cell = objects.get(conn, "Cell", by)
    return over_retain(conn, cell).get(snap.id) if cell is not None else None


def forks(conn: sqlite3.Connection, snap: ObjectRecord) -> list[str]:
    """Live cells forked from the snapshot: while there are any, it never expires."""
    return objects.forks_of(conn, snap.id)


def note_deferred(conn: sqlite3.Connection, snap: ObjectRecord, expiry: Expiry,
                  depending: list[str]) -> None:
    """Say (once per change) that the snapshot expired but is kept for its forks."""
    message = (f"{expiry.message}, but it is kept while cells forked from it exist: "
               f"{', '.join(depending)}; it expires once they are gone")
    current = snap.condition("Expired") or {}
    if current.get("reason") == DEFERRED and current.get("message") == message:
        return
    fresh = objects.get(conn, "Snapshot", snap.id)
    if fresh is None:
        return
    status = dict(fresh.status)
    status["conditions"] = objects.set_condition(
        status.get("conditions", []), "Expired", "False", DEFERRED, message)
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)
    events.record(conn, kind="Snapshot", object_id=snap.id, name=snap.name,
                  reason="ExpiryDeferred", message=message)


def clear_deferred(conn: sqlite3.Connection, snap: ObjectRecord) -> None:
    """The snapshot is no longer expired (its ttl was extended, its cell retains more):
    drop the condition that said it was kept for its forks."""
    if snap.condition("Expired") is None:
        return
    fresh = objects.get(conn, "Snapshot", snap.id)
    if fresh is None:
        return
    status = dict(fresh.status)
    status["conditions"] = [c for c in status.get("conditions", []) if c.get("type") != "Expired"]
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)


def expire(conn: sqlite3.Connection, snapshot_id: str, now: datetime,
           op_id: str | None = None) -> str:
    """The `expire` step's write: judged again under the write lock; asks for the
    snapshot's deletion when it is still expired and nothing depends on it. Says what it did."""
    snap = objects.get(conn, "Snapshot", snapshot_id)
    if snap is None or snap.deleting:
        return "gone"
    expiry = judge(conn, snap, now)
    if expiry is None:
        return "kept: no longer expired"
    depending = forks(conn, snap)
    if depending:
        note_deferred(conn, snap, expiry, depending)
        return f"kept: cells forked from it exist ({', '.join(depending)})"
    stored.mark_expiring(conn, snap, expiry.record())
    events.record(conn, kind="Snapshot", object_id=snap.id, name=snap.name, reason="Expired",
                  message=f"{expiry.message}; its checkpoint is deleted", op_id=op_id)
    return "expired"


# -- schedules ----------------------------------------------------------------------------------

def every_seconds(cell: ObjectRecord) -> int | None:
    every = cell.spec.get("snapshots", {}).get("every")
    return quantities.duration_seconds(every) if every else None


def latest_slot(cell: ObjectRecord, now: datetime) -> datetime | None:
    """Start of the latest whole period since the cell's creation (None before the first)."""
    every = every_seconds(cell)
    if every is None:
        return None
    anchor = parse_time(cell.created_at)
    periods = int((now - anchor).total_seconds() // every)
    return anchor + timedelta(seconds=periods * every) if periods >= 1 else None


def next_slot(cell: ObjectRecord, now: datetime) -> datetime | None:
    every = every_seconds(cell)
    if every is None:
        return None
    anchor = parse_time(cell.created_at)
    periods = int((now - anchor).total_seconds() // every)
    return anchor + timedelta(seconds=(max(periods, 0) + 1) * every)


def scheduled_name(cell_name: str, cell_id: str, slot: datetime) -> str:
    """`CELL-auto-YYYYMMDD-HHMMSS`: a DNS-1123 label (a long cell name is cut and a digest of
    the cell's id keeps it apart from another cell with the same prefix)."""
    tail = f"-auto-{slot.astimezone(UTC):%Y%m%d-%H%M%S}"
    if len(cell_name) + len(tail) <= 63:
        return cell_name + tail
    short = hashlib.sha256(cell_id.encode()).hexdigest()[:6]
    return f"{cell_name[:63 - len(tail) - 7].rstrip('-')}-{short}{tail}"


def due_snapshot(conn: sqlite3.Connection, cell: ObjectRecord, now: datetime
                 ) -> tuple[str, datetime] | None:
    """(name, slot) of the scheduled snapshot due now, if the latest period has none yet."""
    slot = latest_slot(cell, now)
    if slot is None:
        return None
    name = scheduled_name(cell.name, cell.id, slot)
    return None if stored.name_used(conn, name) else (name, slot)


def schedule(conn: sqlite3.Connection, cell_id: str, name: str, slot: str,
             op_id: str | None = None) -> str:
    """The `schedule-snapshot` step's write: record the period's snapshot unless its name
    was ever used (a retried or replayed step never takes a period twice). Its id or ''."""
    cell = objects.get(conn, "Cell", cell_id)
    if cell is None or cell.deleting or stored.name_used(conn, name):
        return ""
    spec = {"cell": cell.name}
    labels = {stored.SCHEDULED_LABEL: cell.name}
    # A snapshot's spec holds no secret, so its hashes need no key.
    snapshot_id = stored.insert_scheduled(
        conn, name=name, cell=cell, slot=slot, spec_hash=model.spec_hash(spec, b""),
        manifest_hash=model.manifest_hash(spec, labels, {}, b""))
    events.record(conn, kind="Snapshot", object_id=snapshot_id, name=name, reason="Scheduled",
                  message=f"taken by the schedule of cell {cell.name} for the period from "
                          f"{slot}", op_id=op_id)
    return snapshot_id


def stamp(when: datetime) -> str:
    return _stamp(when)


# -- what falls due ----------------------------------------------------------------------------

def due_keys(conn: sqlite3.Connection, now: datetime) -> list[Key]:
    """Objects with retention work due now: snapshots whose ttl ran out (or whose recorded
    expiry is not finished), cells holding more scheduled snapshots than they retain. An
    inline converge reconciles them too."""
    keys: list[Key] = [("Snapshot", i) for i in stored.expiring(conn)]
    for c in stored.candidates(conn):
        if c.ttl and now >= parse_time(c.created_at) + timedelta(
                seconds=quantities.duration_seconds(c.ttl)):
            keys.append(("Snapshot", c.id))
    for cell_id in stored.cells_with_retain(conn):
        cell = objects.get(conn, "Cell", cell_id)
        if cell is not None and over_retain(conn, cell):
            keys.append(("Cell", cell_id))
    return keys


def woken(conn: sqlite3.Connection, key: Key) -> list[Key]:
    """What a schedule's progress wakes: a cell's scheduled snapshot not yet taken; a
    scheduled snapshot's cell (whose retain may now be exceeded)."""
    kind, object_id = key
    if kind == "Cell":
        cell = objects.get(conn, "Cell", object_id)
        if cell is None or not cell.spec.get("snapshots"):
            return []
        return [("Snapshot", s.id) for s in stored.scheduled(conn, object_id)
                if s.extra.get("checkpoint_ref") is None and not s.deleting
                and s.phase != objects.Phase.FAILED]
    snap = objects.get(conn, "Snapshot", object_id, include_deleted=True)
    by = snap.status.get("schedule", {}).get("by") if snap is not None else None
    return [("Cell", by)] if by else []
