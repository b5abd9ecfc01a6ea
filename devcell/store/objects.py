"""Desired objects (Cells and Snapshots): spec, generation, resourceVersion and status.

generation bumps only when the spec changes; resourceVersion bumps on every write to the row,
so a writer holding a stale copy gets a Conflict instead of silently losing an update.
Deleted objects keep their row (deleted_at set) so lineage and history survive them.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from devcell import ids, kinds, names
from devcell.errors import Conflict, NotFound
from devcell.records import MutableRecord, Record, field
from devcell.store import faults
from devcell.store.clock import now
from devcell.store.db import Database


class Phase(StrEnum):
    """Where an object stands, as `get` shows it (status.phase)."""

    PENDING = "Pending"
    RUNNING = "Running"
    STOPPED = "Stopped"
    SLEEPING = "Sleeping"
    READY = "Ready"
    """A snapshot whose checkpoint was taken."""
    FAILED = "Failed"
    UNKNOWN = "Unknown"
    """A cell whose node the cluster lost (its engine down): what runs there is not known,
    and nothing is planned for it until the node is back (docs/cluster.md)."""
    DELETED = "Deleted"
    EXPIRED = "Expired"
    """A snapshot its ttl or its cell's retain removed (the row stays: an apply of the same
    manifest does not take it again)."""


SETTLED_PHASES = frozenset({Phase.RUNNING, Phase.STOPPED, Phase.SLEEPING, Phase.READY})
"""Phases in which an object that observed its generation needs nothing more."""


class ObjectRecord(MutableRecord):
    """One desired object as stored, with its status."""

    kind: str
    id: str
    name: str
    spec: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    spec_hash: str
    manifest_hash: str
    generation: int
    resource_version: int
    source: str | None
    phase: str
    observed_generation: int
    status: dict[str, Any]
    created_at: str
    updated_at: str
    deleting_at: str | None
    deleted_at: str | None
    extra: dict[str, Any] = field(default_factory=dict)
    """Kind-specific columns: backend/forked_from for cells, cell_id/consistency for snapshots."""

    @property
    def deleting(self) -> bool:
        return self.deleting_at is not None

    def condition(self, ctype: str) -> dict[str, Any] | None:
        for cond in self.status.get("conditions", []):
            if cond.get("type") == ctype:
                return dict(cond)
        return None


_BASE = {
    "id", "name", "labels", "annotations", "spec", "spec_hash", "manifest_hash", "generation",
    "resource_version", "source", "phase", "observed_generation", "status", "created_at",
    "updated_at", "deleting_at", "deleted_at",
}


def from_row(kind: str, row: sqlite3.Row) -> ObjectRecord:
    keys = row.keys()
    return ObjectRecord(
        kind=kind,
        id=row["id"],
        name=row["name"],
        spec=faults.loads(row["spec"]),
        labels=faults.loads(row["labels"] or "{}"),
        annotations=faults.loads(row["annotations"] or "{}"),
        spec_hash=row["spec_hash"],
        manifest_hash=row["manifest_hash"],
        generation=row["generation"],
        resource_version=row["resource_version"],
        source=row["source"],
        phase=row["phase"],
        observed_generation=row["observed_generation"],
        status=faults.loads(row["status"] or "{}"),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        deleting_at=row["deleting_at"],
        deleted_at=row["deleted_at"],
        extra={k: row[k] for k in keys if k not in _BASE},
    )


def get(conn: sqlite3.Connection, kind: str, ref: str, *, include_deleted: bool = False
        ) -> ObjectRecord | None:
    """The live object named `ref`, or with id `ref`."""
    table = kinds.get(kind).table
    if not ref.isascii() and not _utf8(ref):
        return None  # a non-UTF-8 argument's bytes (lone surrogates) name nothing
    if ids.looks_like_id(ref):
        row = conn.execute(f"SELECT * FROM {table} WHERE id = ?", (ref,)).fetchone()
        if row is not None and (include_deleted or row["deleted_at"] is None):
            return from_row(kind, row)
    row = conn.execute(
        f"SELECT * FROM {table} WHERE name = ? AND deleted_at IS NULL", (ref,)
    ).fetchone()
    return from_row(kind, row) if row is not None else None


def _utf8(text: str) -> bool:
    """Whether SQLite can be given `text` (not so a command-line argument's undecodable
    bytes, which Python keeps as lone surrogates)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def require(conn: sqlite3.Connection, kind: str, ref: str) -> ObjectRecord:
    found = get(conn, kind, ref)
    if found is None:
        raise not_found(conn, kind, ref)
    return found


def not_found(conn: sqlite3.Connection, kind: str, ref: str) -> NotFound:
    """NotFound for `ref`, suggesting a recorded name of `kind` close to it; `ref` as given
    (a command's argument, an API path) escaped: the CLI keeps an error's newlines, and
    `exec $'x\nerror: ...'` printed a line of its own."""
    return NotFound(f'{kind.lower()} "{names.printable(ref)}" not found'
                    f'{suggestion(conn, kind, ref)}')


def suggestion(conn: sqlite3.Connection, kind: str, ref: str) -> str:
    """'; did you mean "NAME"?' for the closest live name of `kind` (among the first 10,000),
    or ''."""
    rows = conn.execute(f"SELECT name FROM {kinds.get(kind).table} WHERE deleted_at IS NULL "
                        "LIMIT 10000").fetchall()
    return names.did_you_mean(ref, [row[0] for row in rows])


def list_live(conn: sqlite3.Connection, kind: str) -> list[ObjectRecord]:
    rows = conn.execute(
        f"SELECT * FROM {kinds.get(kind).table} WHERE deleted_at IS NULL ORDER BY name"
    ).fetchall()
    return [from_row(kind, r) for r in rows]


Key = tuple[str, str]
"""(kind, object id): what the reconciler queues and reconciles."""


def live_keys(conn: sqlite3.Connection) -> list[Key]:
    """Every live object of every kind, in dependency order, each kind in creation order."""
    keys: list[Key] = []
    for kind in kinds.KINDS.values():
        keys += [(kind.name, r[0]) for r in conn.execute(
            f"SELECT id FROM {kind.table} WHERE deleted_at IS NULL ORDER BY rowid")]
    return keys


def unconverged_keys(conn: sqlite3.Connection) -> list[Key]:
    """Live objects whose desired state the reconciler has not caught up with: a new
    generation, or a deletion requested."""
    keys: list[Key] = []
    for kind in kinds.KINDS.values():
        keys += [(kind.name, r[0]) for r in conn.execute(
            f"SELECT id FROM {kind.table} WHERE deleted_at IS NULL AND "
            "(generation != observed_generation OR deleting_at IS NOT NULL)")]
    return keys


def deleting(conn: sqlite3.Connection) -> list[tuple[Key, str]]:
    """(key, name) of every live object whose deletion was asked for and is not done (a
    process killed before or during it leaves it so): `devcell gc` finishes them."""
    found: list[tuple[Key, str]] = []
    for kind in kinds.KINDS.values():
        found += [((kind.name, r[0]), str(r[1])) for r in conn.execute(
            f"SELECT id, name FROM {kind.table} WHERE deleted_at IS NULL AND "
            "deleting_at IS NOT NULL ORDER BY rowid")]
    return found


class RuntimeRow(Record):
    """What observing a cell's runtime is compared with: its recorded phase and desired state."""

    id: str
    name: str
    backend: str
    phase: str
    desired_state: str
    runtime_kept: bool
    """Asleep with its runtime kept, stopped: a saved machine, or a container whose root
    filesystem the sleep kept (status.sleep.machine or .rootfs)."""
    converged: bool


def runtime_rows(conn: sqlite3.Connection, cell_ids: Iterable[str]) -> list[RuntimeRow]:
    """The live, not-deleting cells among `cell_ids` (in chunks: an apply may name 10,000)."""
    ids = sorted(set(cell_ids))
    out: list[RuntimeRow] = []
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        out += [RuntimeRow(r[0], r[1], r[2], r[3] or "", r[4] or "Running", bool(r[5]),
                           r[6] == r[7]) for r in conn.execute(
            "SELECT id, name, backend, phase, "
            "COALESCE(json_extract(held, '$.state'), desired_state), "
            "COALESCE(json_extract(status, '$.sleep.machine'), "
            "json_extract(status, '$.sleep.rootfs')), generation, observed_generation "
            f"FROM cells WHERE deleted_at IS NULL AND deleting_at IS NULL AND id IN "
            f"({','.join('?' for _ in chunk)})", chunk)]
    return out


def live_cells_of(conn: sqlite3.Connection, backend: str) -> list[Key]:
    """Every live cell that runs on `backend`."""
    return [("Cell", r[0]) for r in conn.execute(
        "SELECT id FROM cells WHERE deleted_at IS NULL AND backend = ? ORDER BY rowid",
        (backend,))]


def drifted_keys(conn: sqlite3.Connection) -> list[Key]:
    """Cells a command found contradicted by their backend (status.drifted, see
    reconciler.observe) and no reconcile has repaired yet."""
    return [("Cell", r[0]) for r in conn.execute(
        "SELECT id FROM cells WHERE deleted_at IS NULL AND phase = 'Pending' "
        "AND json_extract(status, '$.drifted')")]


def row(conn: sqlite3.Connection, kind: str, object_id: str) -> sqlite3.Row | None:
    """The object's whole row (views build documents from it)."""
    found: sqlite3.Row | None = conn.execute(
        f"SELECT * FROM {kinds.get(kind).table} WHERE id = ?", (object_id,)).fetchone()
    return found


def owners(conn: sqlite3.Connection, keys: list[Key]) -> dict[Key, Key]:
    """The owner of each key whose kind has one (a snapshot's cell), by the registry."""
    out: dict[Key, Key] = {}
    for kind in kinds.KINDS.values():
        if kind.owner is None:
            continue
        owner_kind, column = kind.owner
        wanted = [oid for k, oid in keys if k == kind.name]
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            for object_id, owner_id in conn.execute(
                    f"SELECT id, {column} FROM {kind.table} WHERE id IN "
                    f"({','.join('?' * len(chunk))})", chunk).fetchall():
                if owner_id:
                    out[(kind.name, object_id)] = (owner_kind, owner_id)
    return out


def desired_version(conn: sqlite3.Connection, kind: str, object_id: str
                    ) -> tuple[int, bool] | None:
    """(generation, deletion asked): moves only when the user asks for something new."""
    found = conn.execute(f"SELECT generation, deleting_at FROM {kinds.get(kind).table} "
                         "WHERE id = ?", (object_id,)).fetchone()
    return (found[0], found[1] is not None) if found is not None else None


def accounted_for(conn: sqlite3.Connection) -> tuple[set[str], set[str], set[str]]:
    """Ids the database accounts for (the orphan sweep keeps these): live cells, live
    snapshots, and the sleep checkpoints live cells' status names."""
    cells = {r[0] for r in conn.execute("SELECT id FROM cells WHERE deleted_at IS NULL")}
    snaps = {r[0] for r in conn.execute("SELECT id FROM snapshots WHERE deleted_at IS NULL")}
    sleeps = {r[0] for r in conn.execute(
        "SELECT json_extract(status, '$.sleep.checkpointId') FROM cells WHERE deleted_at IS NULL "
        "UNION SELECT json_extract(status, '$.sleep.supersedes') FROM cells "
        "WHERE deleted_at IS NULL") if r[0]}
    return cells, snaps, sleeps


def backends_in_use(conn: sqlite3.Connection) -> set[str]:
    """Every backend any recorded cell, live or deleted, names."""
    return {r[0] for r in conn.execute("SELECT DISTINCT backend FROM cells")}


def latest_taken_snapshot(conn: sqlite3.Connection, cell_id: str) -> tuple[str, str] | None:
    """(id, name) of the cell's newest snapshot whose checkpoint was taken."""
    found = conn.execute(
        "SELECT id, name FROM snapshots WHERE cell_id = ? AND checkpoint_ref IS NOT NULL "
        "ORDER BY taken_at DESC LIMIT 1", (cell_id,)).fetchone()
    return (found[0], found[1]) if found is not None else None


def backends_of(conn: sqlite3.Connection, keys: list[Key]) -> set[str]:
    """The backends that run these objects (an owned object runs on its owner's)."""
    owner = owners(conn, keys)
    cell_ids = list({owner.get(key, key)[1] for key in keys
                     if owner.get(key, key)[0] == "Cell"})
    names: set[str] = set()
    for i in range(0, len(cell_ids), 500):
        chunk = cell_ids[i:i + 500]
        names.update(r[0] for r in conn.execute(
            f"SELECT DISTINCT backend FROM cells WHERE id IN ({','.join('?' * len(chunk))})",
            chunk))
    return names


def forks_of(conn: sqlite3.Connection, snapshot_id: str, *, deleting: bool | None = None
             ) -> list[str]:
    """Names of the live cells forked from a snapshot (deleting: only those being deleted,
    or only those not; None: all)."""
    which = {None: "", True: " AND deleting_at IS NOT NULL", False: " AND deleting_at IS NULL"}
    return [r[0] for r in conn.execute(
        "SELECT name FROM cells WHERE forked_from = ? AND deleted_at IS NULL"
        f"{which[deleting]} ORDER BY name", (snapshot_id,))]


def dependents(conn: sqlite3.Connection, kind: str, object_id: str) -> list[Key]:
    """Live objects waiting on this one (the registry's `wakes`): a cell's untaken
    snapshots and, for a fork, the snapshot it came from while that waits to be deleted; a
    snapshot's forks."""
    keys: list[Key] = []
    for wakes in kinds.get(kind).wakes:
        table = kinds.get(wakes.kind).table
        where = f" AND w.{wakes.waiting_while_null} IS NULL" if wakes.waiting_while_null else ""
        where += " AND w.deleting_at IS NOT NULL" if wakes.while_deleting else ""
        if wakes.named_by is not None:  # the object this one names (a fork's snapshot)
            sql = (f"SELECT w.id FROM {table} w JOIN {kinds.get(kind).table} o "
                   f"ON w.{wakes.via} = o.{wakes.named_by} WHERE o.id = ?")
        else:
            sql = f"SELECT w.id FROM {table} w WHERE w.{wakes.via} = ?"
        keys += [(wakes.kind, r[0]) for r in conn.execute(
            f"{sql} AND w.deleted_at IS NULL{where}", (object_id,))]
    return keys


def cells_with_host_mounts(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Live recorded cells with host mounts or a workspace folder bound live, name -> spec
    (for the shared-mount rule)."""
    rows = conn.execute("SELECT name, spec FROM cells WHERE deleted_at IS NULL "
                        "AND (json_extract(spec, '$.mounts') IS NOT NULL "
                        "OR json_extract(spec, '$.workspace.source.hostPath') IS NOT NULL)"
                        ).fetchall()
    return {name: faults.loads(spec) for name, spec in rows}


def cells_with_host_commands(conn: sqlite3.Connection) -> dict[str, tuple[dict[str, Any], str]]:
    """Live recorded cells with spec.hooks.hostInitialize, name -> (spec, manifest's path):
    a cell binding the folder they run in could change them (security.host_command_problem)."""
    rows = conn.execute("SELECT name, spec, source FROM cells WHERE deleted_at IS NULL "
                        "AND json_extract(spec, '$.hooks.hostInitialize') IS NOT NULL "
                        "AND source IS NOT NULL AND source != '-'").fetchall()
    return {name: (faults.loads(spec), source) for name, spec, source in rows}


def workspace_sources(conn: sqlite3.Connection, names: Iterable[str]) -> dict[str, Any]:
    """Live recorded cells' `spec.workspace.source`, name -> source (None: none), for the
    rule that a source used once is not judged again when its cell already exists."""
    wanted = sorted(set(names))
    found: dict[str, Any] = {}
    for start in range(0, len(wanted), 500):  # SQLite's bound on host parameters
        chunk = wanted[start:start + 500]
        rows = conn.execute(
            "SELECT name, json_extract(spec, '$.workspace.source') FROM cells "
            f"WHERE deleted_at IS NULL AND name IN ({','.join('?' * len(chunk))})", chunk)
        found.update((name, faults.loads(source) if source else None) for name, source in rows)
    return found


class Publisher(Record):
    """A live recorded cell that publishes host ports (for the host-port rule)."""

    spec: dict[str, Any]
    source: str | None
    deleting: bool


def cells_publishing_ports(conn: sqlite3.Connection) -> dict[str, Publisher]:
    """Live recorded cells that publish host ports, by name."""
    rows = conn.execute(
        "SELECT name, spec, source, deleting_at FROM cells WHERE deleted_at IS NULL AND "
        "(json_array_length(spec, '$.network.ports') > 0 OR EXISTS (SELECT 1 FROM "
        "json_each(spec, '$.sidecars') WHERE json_array_length(value, '$.ports') > 0))"
    ).fetchall()
    return {name: Publisher(faults.loads(spec), source, deleting is not None)
            for name, spec, source, deleting in rows}


def _listed(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Spec fields copied into their own columns for fast listing."""
    return {column: spec.get(field) for column, field in kinds.get(kind).listed}


def insert(
    conn: sqlite3.Connection, *, kind: str, name: str, spec: dict[str, Any],
    labels: dict[str, str], annotations: dict[str, str], spec_hash: str, manifest_hash: str,
    source: str | None, extra: dict[str, Any] | None = None, phase: str = Phase.PENDING,
    object_id: str | None = None,
) -> str:
    """The new object's id (`object_id` when the caller chose it: an imported snapshot's
    checkpoint is made under its id before the row is recorded)."""
    object_id = object_id or ids.new_id(kinds.get(kind).id_prefix)
    stamp = now()
    columns = {
        "id": object_id, "name": name, "labels": json.dumps(labels),
        "annotations": json.dumps(annotations), "spec": json.dumps(spec),
        "spec_hash": spec_hash, "manifest_hash": manifest_hash, "generation": 1,
        "resource_version": 1, "source": source, "phase": phase, "observed_generation": 0,
        "status": "{}", "created_at": stamp, "updated_at": stamp,
    }
    columns.update(extra or {})
    columns.update(_listed(kind, spec))
    names = ", ".join(columns)
    marks = ", ".join("?" for _ in columns)
    try:
        conn.execute(f"INSERT INTO {kinds.get(kind).table} ({names}) VALUES ({marks})",
                     tuple(columns.values()))
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc):
            raise Conflict(f'{kind.lower()} "{name}" already exists') from None
        raise
    return object_id


def update_desired(
    conn: sqlite3.Connection, record: ObjectRecord, *, spec: dict[str, Any],
    labels: dict[str, str], annotations: dict[str, str], spec_hash: str, manifest_hash: str,
    source: str | None,
) -> None:
    """Write a new desired state; generation bumps only if the spec changed."""
    generation = record.generation + (1 if spec_hash != record.spec_hash else 0)
    listed = _listed(record.kind, spec)
    sets = "".join(f", {k} = ?" for k in listed)
    cur = conn.execute(
        f"UPDATE {kinds.get(record.kind).table} SET spec = ?, labels = ?, annotations = ?, "
        f"spec_hash = ?, manifest_hash = ?, source = ?, generation = ?{sets}, "
        "resource_version = resource_version + 1, updated_at = ? "
        "WHERE id = ? AND resource_version = ?",
        (json.dumps(spec), json.dumps(labels), json.dumps(annotations), spec_hash,
         manifest_hash, source, generation, *listed.values(), now(), record.id,
         record.resource_version),
    )
    _check_written(cur, record)


def set_owner(conn: sqlite3.Connection, cell_id: str, owner: str) -> None:
    """A cell's new owner (metadata.owner changed by an apply): not its spec, so its
    generation does not move. Its snapshots' owner moves with it: theirs is its owner's
    while it lives (auth.resources), and stays the last one's once it is deleted."""
    conn.execute("UPDATE cells SET owner = ? WHERE id = ?", (owner, cell_id))
    conn.execute("UPDATE snapshots SET owner = ? WHERE cell_id = ? AND deleted_at IS NULL",
                 (owner, cell_id))


def _check_written(cur: sqlite3.Cursor, record: ObjectRecord) -> None:
    if cur.rowcount != 1:
        raise Conflict(
            f'{record.kind.lower()} "{record.name}" was modified by someone else '
            f"(resourceVersion {record.resource_version} is stale); re-read and retry"
        )


def request_delete(conn: sqlite3.Connection, record: ObjectRecord) -> None:
    cur = conn.execute(
        f"UPDATE {kinds.get(record.kind).table} SET deleting_at = ?, "
        "resource_version = resource_version + 1, updated_at = ? "
        "WHERE id = ? AND resource_version = ? AND deleting_at IS NULL",
        (now(), now(), record.id, record.resource_version),
    )
    _check_written(cur, record)


def cancel_delete(conn: sqlite3.Connection, record: ObjectRecord) -> None:
    """Withdraw a deletion request (its gated delete was cancelled): the object stays."""
    kept = ", pruned = NULL" if record.kind == "Cell" else ""  # nothing to keep now
    conn.execute(
        f"UPDATE {kinds.get(record.kind).table} SET deleting_at = NULL{kept}, "
        "resource_version = resource_version + 1, updated_at = ? WHERE id = ?",
        (now(), record.id))


def mark_deleted(conn: sqlite3.Connection, record: ObjectRecord,
                 phase: str = Phase.DELETED) -> None:
    stamp = now()
    conn.execute(
        f"UPDATE {kinds.get(record.kind).table} SET deleted_at = ?, phase = ?, "
        "resource_version = resource_version + 1, updated_at = ? WHERE id = ?",
        (stamp, phase, stamp, record.id),
    )


def set_condition(
    conditions: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str
) -> list[dict[str, Any]]:
    """Conditions with `ctype` set; lastTransitionTime moves only when the status changes."""
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == ctype:
            found = True
            changed = cond.get("status") != status
            cond = {
                "type": ctype, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": now() if changed else cond.get("lastTransitionTime"),
            }
        out.append(cond)
    if not found:
        out.append({"type": ctype, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": now()})
    return out


def write_status(
    conn: sqlite3.Connection, record: ObjectRecord, *, phase: str, status: dict[str, Any],
    observed_generation: int, extra: dict[str, Any] | None = None,
) -> bool:
    """Store a new status if it differs from the recorded one; True if something was written."""
    extra = extra or {}
    if (
        phase == record.phase
        and status == record.status
        and observed_generation == record.observed_generation
        and all(record.extra.get(k) == v for k, v in extra.items())
    ):
        return False
    sets = ", ".join(f"{k} = ?" for k in extra)
    sql = (
        f"UPDATE {kinds.get(record.kind).table} SET phase = ?, status = ?, observed_generation = ?, "
        f"resource_version = resource_version + 1, updated_at = ?{', ' + sets if sets else ''} "
        "WHERE id = ? AND resource_version = ?"
    )
    cur = conn.execute(
        sql,
        (phase, json.dumps(status), observed_generation, now(), *extra.values(), record.id,
         record.resource_version),
    )
    _check_written(cur, record)
    record.phase = phase
    record.status = status
    record.observed_generation = observed_generation
    record.resource_version += 1
    record.extra.update(extra)
    return True


def note_retry(db: Database, kind: str, object_id: str, *, at: str, retries: int) -> None:
    """Record when a failing object is retried next (describe shows status.nextRetryAt)."""
    with db.write() as conn:
        record = get(conn, kind, object_id)
        if record is None:
            return
        status = dict(record.status, nextRetryAt=at, retries=retries)
        write_status(conn, record, phase=record.phase, status=status,
                     observed_generation=record.observed_generation)


def sources_of(conn: sqlite3.Connection, kind: str, names: Iterable[str]) -> set[str]:
    """The files the live `kind` objects called `names` were applied from."""
    ordered = sorted(names)
    table = kinds.get(kind).table
    found: set[str] = set()
    for start in range(0, len(ordered), 500):
        chunk = ordered[start:start + 500]
        found.update(src for (src,) in conn.execute(
            f"SELECT source FROM {table} WHERE deleted_at IS NULL AND name "
            f"IN ({','.join('?' for _ in chunk)})", chunk) if src)
    return found


def live_under(conn: sqlite3.Connection, root: str) -> dict[Key, str]:
    """(kind, name) -> source of live objects applied from a file under `root` (an index
    range on `source`)."""
    low, high = root + os.sep, root + chr(ord(os.sep) + 1)
    out: dict[Key, str] = {}
    for kind in kinds.KINDS.values():
        for name, source in conn.execute(
                f"SELECT name, source FROM {kind.table} WHERE deleted_at IS NULL "
                f"AND source >= ? AND source < ?", (low, high)):
            out[(kind.name, name)] = source
    return out


def live_from(conn: sqlite3.Connection, paths: set[str]) -> dict[Key, str]:
    """(kind, name) -> source of live objects applied from one of `paths`."""
    out: dict[Key, str] = {}
    wanted = sorted(paths)
    for kind in kinds.KINDS.values():
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for name, source in conn.execute(
                    f"SELECT name, source FROM {kind.table} WHERE deleted_at IS NULL AND source "
                    f"IN ({','.join('?' for _ in chunk)})", chunk):
                out[(kind.name, name)] = source
    return out
