"""What each dashboard page shows, read through the library the CLI and the API read through
(api.listing for rows and documents, api.lineage for the forest, api.capacity for disk, the
store's activity files for idle time), never by SQL of its own. Plain records, so the pages
(ui.pages) only format them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from devcell.api import listing, render
from devcell.api.lineage import Node, contains, forest
from devcell.errors import NotFound
from devcell.store import changes, views
from devcell.store.db import Database

DELETING, FROZEN = "Deleting", "Frozen"


@dataclass(frozen=True)
class CellRow:
    """One line of the cells page."""

    name: str
    id: str
    phase: str
    backend: str
    node: str | None
    owner: str | None
    idle: str | None
    """How long since the last activity DevCell saw (in use: a session is open)."""
    disk: str | None
    forked_from: str | None
    age: str


@dataclass(frozen=True)
class Cells:
    rows: list[CellRow]
    version: int
    """The newest version (store/changes.py): the live updates start after it."""
    notes: list[str] = field(default_factory=list)
    """Why a figure is missing (an engine unreachable)."""


@dataclass(frozen=True)
class Cell:
    doc: dict[str, Any]
    row: CellRow
    snapshots: list[dict[str, Any]]
    operations: list[dict[str, Any]]
    events: list[dict[str, Any]]
    version: int


@dataclass(frozen=True)
class Lineage:
    roots: list[Node]
    children: dict[str, list[Node]]


@dataclass(frozen=True)
class Operations:
    rows: list[dict[str, Any]]
    version: int


@dataclass(frozen=True)
class Events:
    rows: list[dict[str, Any]]
    version: int


def _phase(row: dict[str, Any]) -> str:
    if row.get("deleting_at"):
        return DELETING
    return FROZEN if row.get("frozen_at") else str(row["phase"])


def _idle(db: Database, row: dict[str, Any], now: datetime) -> str | None:
    if row["phase"] != "Running":
        return None
    from devcell.store import activity

    seen = activity.seen(db.state_dir, str(row["id"]))
    if seen.open:
        return "in use (" + ", ".join(sorted({a.what for a in seen.open})) + ")"
    if seen.last is None:
        return None
    return f"{render.age_seconds(int((now - seen.last.at).total_seconds()))} ({seen.last.what})"


def _disk(usage: Any) -> str | None:
    ws = usage.workspace if usage is not None else None
    run = usage.runtime if usage is not None else None
    files = run.files_bytes if run is not None else None
    if ws is None and files is None:
        return None
    return render.size((ws.own_disk if ws is not None else 0) + (files or 0))


def _rows(db: Database, names: list[str], notes: list[str]) -> list[CellRow]:
    from devcell.api import capacity

    rows = listing.rows(db, "cells", names, None, wide=True)
    problems = capacity.Problems()
    usage = capacity.cells(db, rows, problems) if rows else {}
    notes += problems.messages
    now = datetime.now(UTC)
    out = []
    for r, doc in listing.documents(db, "cells", rows):
        node = doc["status"].get("node") or r.get("node")
        out.append(CellRow(
            name=r["name"], id=r["id"], phase=_phase(r), backend=r["backend"],
            node=None if node is None else str(node), owner=r.get("owner"),
            idle=_idle(db, r, now), disk=_disk(usage.get(r["id"])),
            forked_from=r.get("forked_from"),
            age="-" if r.get("age_s") is None else render.age_seconds(int(r["age_s"]))))
    return out


def cells(db: Database) -> Cells:
    notes: list[str] = []
    version = changes.latest(db.conn)
    return Cells(_rows(db, [], notes), version, notes)


def cell(db: Database, name: str) -> Cell:
    notes: list[str] = []
    version = changes.latest(db.conn)
    found = [r for r in _rows(db, [name], notes) if name in (r.name, r.id)]
    if not found:
        from devcell.store import objects

        raise NotFound(f'cell "{name}" not found'
                       f"{objects.suggestion(db.conn, 'Cell', name)}")
    row = found[0]
    docs = listing.documents(db, "cells", [{"id": row.id}])
    if not docs:
        raise NotFound(f'cell "{name}" not found')
    snaps = [s for s in listing.rows(db, "snapshots", [], None) if s["cell_id"] == row.id]
    ops = [o for o in listing.rows(db, "operations", [row.name], None)
           if o["object_id"] == row.id]
    evs = listing.events_for(db, f"cell/{row.id}")
    return Cell(docs[0][1], row, snaps, ops[-50:], evs[-100:], version)


def lineage(db: Database, cell: str | None = None) -> Lineage:
    """The whole forest, or (`cell`) the one tree holding that cell."""
    roots, children = forest(*views.lineage(db.conn))
    if cell is not None:
        roots = [r for r in roots if contains(r, children, "cell", cell)]
        if not roots:
            raise NotFound(f'cell "{cell}" not found in the lineage')
    return Lineage(roots, children)


def operations(db: Database) -> Operations:
    version = changes.latest(db.conn)
    return Operations(listing.rows(db, "operations", [], None)[-200:], version)


def operation(db: Database, op_id: str) -> dict[str, Any]:
    rows = [r for r in listing.rows(db, "operations", [op_id], None) if r["id"] == op_id]
    if not rows:
        raise NotFound(f'operation "{op_id}" not found')
    return listing.documents(db, "operations", rows[:1])[0][1]


def event_rows(db: Database) -> Events:
    version = changes.latest(db.conn)
    return Events(listing.rows(db, "events", [], None)[-200:], version)
