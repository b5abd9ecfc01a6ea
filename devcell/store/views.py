"""Read-side views of the store for `get` and `describe`: plain dicts, kubectl-shaped.

Kept import-light (sqlite3, json and the secrets module): `devcell get` over thousands of
cells is a hot path.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from devcell.manifests import secrets
from devcell.store import faults

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from devcell.manifests.selectors import Selector

API_VERSION = "devcell.dev/v1alpha1"
AGE_SQL = "CAST((julianday('now') - julianday({column})) * 86400 AS INTEGER)"
"""Age in whole seconds, computed by SQLite: no per-row datetime parsing in Python."""
REDACTED = secrets.REDACTED


def redact_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec with its secrets replaced (by position), for every output a person or log
    can see."""
    return secrets.redact(spec)


def _names_sql(table: str, names: Sequence[str]) -> tuple[str, list[str]]:
    """` AND (t.name IN (...) OR t.id IN (...))` for the names or ids asked for."""
    if not names:
        return "", []
    marks = ", ".join("?" * len(names))
    return f" AND ({table}.name IN ({marks}) OR {table}.id IN ({marks}))", [*names, *names]


Page = tuple[str | None, int | None]
"""(the name a page starts after, the most rows it may have): a list's page read as such."""


def _page_sql(table: str, where: str, params: list[Any], page: Page | None,
              selector: Selector | None) -> tuple[str, str]:
    """`where` with the page's start, and its LIMIT (a selector filters after the query:
    then only the start is in SQL), the parameters added to `params`."""
    if page is None:
        return where, ""
    after, most = page
    if after is not None:
        where += f" AND {table}.name > ?"
        params.append(after)
    if most is None or selector:
        return where, ""
    params.append(most)
    return where, " LIMIT ?"


def cells_table(conn: sqlite3.Connection, selector: Selector | None = None,
                names: Sequence[str] = (), *, wide: bool = False, labels: bool = False,
                page: Page | None = None) -> list[dict[str, Any]]:
    """Rows for `get cells`. The plain table is answered from the list index, plus the row of
    each cell for `deleting_at` (a pending deletion shows as Deleting). With a selector (or
    `labels`) each row carries its labels, parsed."""
    narrow = not wide and not selector and not labels
    extra = "" if narrow else ("c.labels, c.generation, c.observed_generation, c.source, "
                               "c.owner, "
                               "c.image, json_extract(c.spec, '$.network.ports') AS ports, "
                               "json_extract(c.status, '$.services') AS services, "
                               "json_extract(c.status, '$.sidecars') AS sidecars, "
                               "json_extract(c.status, '$.node') AS node, "
                               "json_extract(c.status, '$.nodeDown') AS node_down, ")
    sql = (
        f"SELECT c.id, c.name, c.backend, c.phase, c.deleting_at, c.frozen_at, c.created_at, "
        f"{extra}"
        f"c.desired_state AS state, c.held, {AGE_SQL.format(column='c.created_at')} AS age_s, "
        # Only a Pending cell's status is read (SQLite seeks the row for those alone).
        "CASE WHEN c.phase = 'Pending' THEN json_extract(c.status, '$.restarts.retryAt') END "
        "AS retry_at, "
        f"s.name AS forked_from FROM cells c {'INDEXED BY idx_cells_list' if narrow else ''} "
        "LEFT JOIN snapshots s ON s.id = c.forked_from WHERE c.deleted_at IS NULL"
    )
    where, params = _names_sql("c", names)
    where, limit = _page_sql("c", where, params, page, selector)
    rows = conn.execute(sql + where + " ORDER BY c.name" + limit, params).fetchall()
    if narrow or wide and not selector and not labels:
        return [dict(r) for r in rows]
    out = []
    for r in rows:
        found = faults.loads(r["labels"])
        if not selector or selector.matches(found):
            out.append(dict(r, labels=found))
    return out


def snapshots_table(conn: sqlite3.Connection, selector: Selector | None = None,
                    names: Sequence[str] = (), cell: str | None = None, *,
                    page: Page | None = None) -> list[dict[str, Any]]:
    sql = (
        "SELECT s.id, s.name, s.phase, s.deleting_at, s.deleted_at, s.created_at, s.taken_at, "
        "s.labels, s.consistency, "
        "s.cell_id, c.name AS cell, c.deleted_at AS cell_deleted, "
        "json_extract(s.status, '$.origin.cell') AS imported_from, "
        "json_extract(s.status, '$.checkpoint.node') AS node, "
        "(SELECT group_concat(f.name, ',') FROM cells f WHERE f.forked_from = s.id "
        " AND f.deleted_at IS NULL) AS forks "
        "FROM snapshots s LEFT JOIN cells c ON c.id = s.cell_id WHERE (s.deleted_at IS NULL"
        # An expired snapshot a manifest declared stays listed (phase Expired): an apply of
        # that manifest does not take it again, and this says why.
        " OR (s.phase = 'Expired' AND s.source IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "
        "snapshots t WHERE t.name = s.name AND (t.deleted_at IS NULL OR "
        "t.deleted_at > s.deleted_at))))"
    )
    where, params = _names_sql("s", names)
    sql += where
    if cell is not None:
        sql += " AND s.cell_id = ?"
        params.append(cell)
    sql, limit = _page_sql("s", sql, params, page, selector)
    rows = conn.execute(sql + " ORDER BY s.name" + limit, params).fetchall()
    out = []
    for r in rows:
        labels = faults.loads(r["labels"]) if r["labels"] != "{}" else {}
        if selector and not selector.matches(labels):
            continue
        out.append(dict(r, labels=labels))
    return out


def names_matching(conn: sqlite3.Connection, kind: str, selector: Selector) -> list[str]:
    """The names of the live objects of `kind` (Cell or Snapshot) whose labels match."""
    rows = (cells_table(conn, selector) if kind == "Cell" else snapshots_table(conn, selector))
    return [r["name"] for r in rows if r.get("deleted_at") is None]  # not an expired record


def volumes_table(conn: sqlite3.Connection, name: str | None = None) -> list[dict[str, Any]]:
    sql = (
        "SELECT v.id, v.name, v.mount_path, v.phase, v.created_at, v.backend_ref, "
        "c.name AS cell, s.name AS from_snapshot FROM volumes v "
        "JOIN cells c ON c.id = v.cell_id LEFT JOIN snapshots s ON s.id = v.from_snapshot_id "
        "WHERE v.deleted_at IS NULL"
    )
    params: tuple[str, ...] = ()
    if name is not None:
        sql += " AND (v.name = ? OR v.id = ?)"
        params = (name, name)
    return [dict(r) for r in conn.execute(sql + " ORDER BY v.name", params)]


def operations_table(conn: sqlite3.Connection, name: str | None = None, limit: int = 500
                     ) -> list[dict[str, Any]]:
    if name is not None:
        rows = conn.execute(
            "SELECT * FROM operations WHERE id = ? OR object_name = ? "
            "ORDER BY rowid DESC LIMIT ?", (name, name, limit)).fetchall()
    else:
        rows = conn.execute(
            "SELECT * FROM operations ORDER BY rowid DESC LIMIT ?", (limit,)
        ).fetchall()
    return [dict(r, plan=faults.loads(r["plan"] or "[]")) for r in reversed(rows)]


def events_table(conn: sqlite3.Connection, name: str | None = None, limit: int = 500, *,
                 kind: str | None = None) -> list[dict[str, Any]]:
    """The latest events, oldest first; with `kind`, only those of that kind's object `name`
    (by name or id: `get events --for cell/api`), else of any object so named."""
    if kind is not None:
        rows = conn.execute(
            "SELECT * FROM events WHERE object_kind = ? AND (object_name = ? OR object_id = ?) "
            "ORDER BY id DESC LIMIT ?", (kind, name, name, limit)).fetchall()
    elif name is not None:
        rows = conn.execute(
            "SELECT * FROM events WHERE object_name = ? OR object_id = ? ORDER BY id DESC LIMIT ?",
            (name, name, limit)).fetchall()
    else:
        rows = conn.execute("SELECT * FROM events ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [dict(r) for r in reversed(rows)]


class Lineage:
    """What a document's status.lineage names besides its own row: the snapshot a cell was
    forked from, a cell's live snapshots, a snapshot's cell and its live forks. Read with a
    query per object (one document: get, describe); Batch reads each once for a whole list."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def forked_from(self, snapshot_id: str) -> sqlite3.Row | None:
        found: sqlite3.Row | None = self.conn.execute(
            "SELECT s.name, s.id, c.name AS cell FROM snapshots s "
            "LEFT JOIN cells c ON c.id = s.cell_id WHERE s.id = ?", (snapshot_id,)).fetchone()
        return found

    def snapshots_of(self, cell_id: str) -> list[str]:
        return [s["name"] for s in self.conn.execute(
            "SELECT name FROM snapshots WHERE cell_id = ? AND deleted_at IS NULL "
            "ORDER BY created_at, rowid", (cell_id,))]

    def cell(self, cell_id: str) -> sqlite3.Row | None:
        found: sqlite3.Row | None = self.conn.execute(
            "SELECT name, id, deleted_at FROM cells WHERE id = ?", (cell_id,)).fetchone()
        return found

    def forks_of(self, snapshot_id: str) -> list[str]:
        return [f["name"] for f in self.conn.execute(
            "SELECT name FROM cells WHERE forked_from = ? AND deleted_at IS NULL "
            "ORDER BY name", (snapshot_id,))]


class _BatchLineage(Lineage):
    """Lineage for many documents at once: each relation read in one query (a list of
    10,000 cells made 20,000 queries, most of its time: bench/api_list_watch.py)."""

    def __init__(self, conn: sqlite3.Connection, kind: str) -> None:
        super().__init__(conn)
        self._snapshots: dict[str, list[str]] = {}
        self._forks: dict[str, list[str]] = {}
        self._sources: dict[str, sqlite3.Row] = {}
        self._cells: dict[str, sqlite3.Row] = {}
        if kind == "Cell":
            for r in conn.execute("SELECT cell_id, name FROM snapshots WHERE deleted_at IS NULL "
                                  "ORDER BY created_at, rowid"):
                self._snapshots.setdefault(r["cell_id"], []).append(r["name"])
            self._sources = {r["id"]: r for r in conn.execute(
                "SELECT s.name, s.id, c.name AS cell FROM snapshots s "
                "LEFT JOIN cells c ON c.id = s.cell_id WHERE s.id IN "
                "(SELECT forked_from FROM cells WHERE forked_from IS NOT NULL)")}
        else:
            for r in conn.execute("SELECT forked_from, name FROM cells WHERE forked_from IS "
                                  "NOT NULL AND deleted_at IS NULL ORDER BY name"):
                self._forks.setdefault(r["forked_from"], []).append(r["name"])
            self._cells = {r["id"]: r for r in conn.execute(
                "SELECT name, id, deleted_at FROM cells WHERE id IN "
                "(SELECT cell_id FROM snapshots)")}

    def signature(self, kind: str, row: sqlite3.Row) -> tuple[Any, ...]:
        """What of the lineage the object's document shows (see object_document)."""
        if kind == "Cell":
            source = self.forked_from(row["forked_from"]) if row["forked_from"] else None
            return (None if source is None else tuple(source),
                    tuple(self.snapshots_of(row["id"])))
        cell = self.cell(row["cell_id"])
        return None if cell is None else tuple(cell), tuple(self.forks_of(row["id"]))

    def forked_from(self, snapshot_id: str) -> sqlite3.Row | None:
        return self._sources.get(snapshot_id)

    def snapshots_of(self, cell_id: str) -> list[str]:
        return self._snapshots.get(cell_id, [])

    def cell(self, cell_id: str) -> sqlite3.Row | None:
        return self._cells.get(cell_id)

    def forks_of(self, snapshot_id: str) -> list[str]:
        return self._forks.get(snapshot_id, [])


if TYPE_CHECKING:
    Built = tuple[tuple[Any, ...], dict[str, Any]]
"""(signature, document): the signature is every stored value the document is made of (the
object's row, and what its lineage names), so an equal signature is an equal document."""


def object_documents(conn: sqlite3.Connection, kind: str, ids: Sequence[str]
                     ) -> dict[str, dict[str, Any]]:
    """Each object's document by id (those of `ids` still recorded), as object_document
    makes it, in a few queries whatever their number: call it inside one read transaction
    for a consistent list."""
    return {key: doc for key, (_, doc) in built_documents(conn, kind, ids, {}).items()}


def built_documents(conn: sqlite3.Connection, kind: str, ids: Sequence[str],
                    before: dict[str, Built]) -> dict[str, Built]:
    """As object_documents, each with its signature; an object whose signature is the one
    in `before` keeps that document (the same object) instead of being parsed and built
    again: a watch of 10,000 cells rebuilt every document on every commit."""
    signatures, made = changed_documents(conn, kind, ids,
                                         {key: b[0] for key, b in before.items()})
    return {key: (sig, made[key]) if key in made else before[key]
            for key, sig in signatures.items()}


def changed_documents(conn: sqlite3.Connection, kind: str, ids: Sequence[str],
                      known: dict[str, tuple[Any, ...]]
                      ) -> tuple[dict[str, tuple[Any, ...]], dict[str, dict[str, Any]]]:
    """(the signature of each of `ids` still recorded, the documents of those whose
    signature is not the one `known` gives), in a few queries: an unchanged object costs
    its row's comparison, not a JSON parse and a document."""
    from devcell import kinds

    if not ids:
        return {}, {}
    lineage = _BatchLineage(conn, kind)
    rows = conn.execute(f"SELECT * FROM {kinds.get(kind).table} WHERE id IN "
                        "(SELECT value FROM json_each(?))", (json.dumps(list(ids)),))
    signatures: dict[str, tuple[Any, ...]] = {}
    made: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["id"]
        signatures[key] = signature = (tuple(r), *lineage.signature(kind, r))
        if known.get(key) != signature:
            made[key] = object_document(conn, kind, r, lineage)
    return signatures, made


def object_document(conn: sqlite3.Connection, kind: str, row: sqlite3.Row,
                    lineage: Lineage | None = None) -> dict[str, Any]:
    """The full object as `get -o yaml|json` shows it (secrets redacted)."""
    related = lineage or Lineage(conn)
    meta: dict[str, Any] = {
        "name": row["name"],
        "id": row["id"],
        "generation": row["generation"],
        "resourceVersion": str(row["resource_version"]),
        "creationTimestamp": row["created_at"],
    }
    labels = _object(row["labels"])
    if labels:
        meta["labels"] = labels
    annotations = _object(row["annotations"])
    if annotations:
        meta["annotations"] = annotations
    if kind == "Cell" and row["owner"]:
        meta["owner"] = row["owner"]
    if row["source"]:
        meta["source"] = row["source"]
    if row["deleting_at"]:
        meta["deletionTimestamp"] = row["deleting_at"]
    status: dict[str, Any] = {"phase": row["phase"], "observedGeneration": row["observed_generation"]}
    status.update(_object(row["status"]))
    if kind == "Cell" and row["held"]:
        status["held"] = faults.loads(row["held"])  # a runtime decision: store/holds.py
    if kind == "Cell":
        lineage_doc: dict[str, Any] = {}
        if row["forked_from"]:
            snap = related.forked_from(row["forked_from"])
            if snap is not None:
                lineage_doc["forkedFrom"] = {"snapshot": snap["name"], "snapshotId": snap["id"],
                                             "cell": snap["cell"]}
        snaps = related.snapshots_of(row["id"])
        if snaps:
            lineage_doc["snapshots"] = list(snaps)
        if lineage_doc:
            status["lineage"] = lineage_doc
        spec = redact_spec(faults.loads(row["spec"]))
    else:
        spec = faults.loads(row["spec"])
        cell = related.cell(row["cell_id"])
        status["consistency"] = row["consistency"]
        status["lineage"] = {
            "cell": cell["name"] if cell else None,
            "cellId": row["cell_id"],
            "cellDeleted": bool(cell and cell["deleted_at"]),
            "forks": list(related.forks_of(row["id"])),
        }
        if row["taken_at"]:
            status["takenAt"] = row["taken_at"]
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": meta, "spec": spec,
            "status": status}


def _object(text: str | None) -> dict[str, Any]:
    """A JSON object column; "{}" (most labels and annotations) without a parse."""
    if not text or text == "{}":
        return {}
    found: dict[str, Any] = faults.loads(text)
    return found


def object_row(conn: sqlite3.Connection, kind: str, object_id: str) -> sqlite3.Row | None:
    """The object's whole row, for its document (`get -o yaml|json`)."""
    from devcell import kinds

    found: sqlite3.Row | None = conn.execute(
        f"SELECT * FROM {kinds.get(kind).table} WHERE id = ?", (object_id,)).fetchone()
    return found


def step_documents(conn: sqlite3.Connection, op_id: str) -> list[dict[str, Any]]:
    """An operation's steps as `get operations -o yaml|json` shows them."""
    return [dict(s, outputs=faults.loads(s["outputs"] or "{}")) for s in conn.execute(
        "SELECT idx, name, status, started_at, finished_at, duration_ms, outputs, error "
        "FROM operation_steps WHERE op_id = ? ORDER BY idx", (op_id,))]


def lineage(conn: sqlite3.Connection) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cells, snapshots) for `get snapshots --tree`: every live one, a deleted cell that
    still has live snapshots, and a deleted snapshot a live fork came from (what it depends
    on), each in creation order."""
    snapshots = [dict(r) for r in conn.execute(
        "SELECT id, name, cell_id, phase, deleting_at, deleted_at, consistency, "
        "json_extract(status, '$.origin.cell') AS imported_from FROM snapshots "
        "WHERE deleted_at IS NULL OR id IN (SELECT forked_from FROM cells "
        "WHERE deleted_at IS NULL) ORDER BY rowid")]
    cells = [dict(r) for r in conn.execute(
        "SELECT id, name, phase, forked_from, deleting_at, deleted_at FROM cells "
        "WHERE deleted_at IS NULL OR id IN (SELECT cell_id FROM snapshots "
        "WHERE deleted_at IS NULL) ORDER BY rowid")]
    return cells, snapshots
