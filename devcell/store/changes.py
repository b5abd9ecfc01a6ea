"""The change log: which objects each write touched, in commit order, for watches.

A row (seq, kind, object_id) for every object whose document a write may have changed: a
cell, snapshot or operation (its row, its steps, or what its lineage shows of another
object's row) and each event recorded. Written by SQLite triggers on the tables themselves,
in the writing transaction: every writer (apply, the controllers' status writes, deletes,
prunes, holds, events, a test's raw UPDATE) feeds it without calling anything, and a
rolled-back write leaves no row. It may name an object that did not change in the end
(a write of the same values): a watch compares the documents before it sends one.

`seq` is AUTOINCREMENT (never reused, even when the newest rows are deleted) and is the API's
resourceVersion: a list's metadata.resourceVersion and each watch change's. A watch reads the
rows after the version it is at and re-reads only the objects they name (server/watch.py),
instead of every row on every commit (0.46 s at 10,000 cells: bench/api_list_watch.py).

Kept: the newest KEEP rows (a trigger deletes the oldest as each is written, one row at
a time once full: a bounded table, no sweeper to schedule). A watch resumed from a version
older than the oldest kept one cannot be told exactly what changed since, and is refused
410 Gone (VersionGone), as Kubernetes answers a compacted version: the client lists again.

SQLite runs no delete trigger for a row INSERT OR REPLACE deletes (recursive_triggers is
off): a writer of these tables updates (UPDATE, or INSERT ... ON CONFLICT DO UPDATE, which
runs the update triggers), never replaces. A table rebuilt by a later migration (a new
table copied over and renamed) loses its triggers with the old table: that migration must
make them again (`SCHEMA`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from devcell.errors import UsageError, VersionGone

KEEP = 100_000
"""Rows kept: about 5 MB, ten applies of 10,000 cells; a watch further behind relists."""


def _log(kind: str, what: str, where: str = "") -> str:
    """An INSERT of (kind, object id) for `what` (a column of NEW or OLD, or a query's)."""
    if what.startswith("SELECT"):
        return f"INSERT INTO changes (kind, object_id) SELECT '{kind}', {what[7:]}{where};"
    cond = f" WHERE {what} IS NOT NULL{where}"
    return f"INSERT INTO changes (kind, object_id) SELECT '{kind}', {what}{cond};"


def _trigger(name: str, event: str, table: str, *body: str, when: str = "") -> str:
    when_sql = f"\nWHEN {when}" if when else ""
    lines = "\n".join(f"  {b}" for b in body)
    return f'CREATE TRIGGER "{name}" AFTER {event} ON "{table}"{when_sql}\nBEGIN\n{lines}\nEND'


def _changed(*columns: str) -> str:
    return " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in columns)


def keep_trigger(keep: int = KEEP) -> str:
    """The trigger that keeps the newest `keep` rows (a test makes it smaller)."""
    return _trigger("changes_kept", "INSERT", "changes",
                    f"DELETE FROM changes WHERE seq <= NEW.seq - {int(keep)};")


# What each document shows of other rows (store/views.object_document): a cell shows the
# snapshot it was forked from (its name, id, and its cell's name) and its live snapshots'
# names in creation order; a snapshot shows its cell's name, id and deleted_at, and its
# live forks' names. A write of those columns logs the objects that show them too. An
# expired snapshot is listed until a newer one takes its name (views.snapshots_table): a
# snapshot written logs the others of its name.
_CELL_LINKS = ("id", "name", "deleted_at", "forked_from")
_SNAPSHOT_LINKS = ("id", "name", "deleted_at", "cell_id", "created_at")

SCHEMA: list[str] = [
    """CREATE TABLE "changes" (
   "seq" INTEGER PRIMARY KEY AUTOINCREMENT,
   "kind" TEXT NOT NULL,
   "object_id" TEXT NOT NULL
)""",
    # The triggers' look-ups of an object's snapshots and a snapshot's forks.
    'CREATE INDEX "idx_snapshots_cell_id" ON "snapshots" ("cell_id")',
    'CREATE INDEX "idx_cells_forked_from" ON "cells" ("forked_from")',
    'CREATE INDEX "idx_snapshots_name" ON "snapshots" ("name")',
    keep_trigger(),
    _trigger("changes_cell_insert", "INSERT", "cells",
             _log("Cell", "NEW.id"), _log("Snapshot", "NEW.forked_from"),
             _log("Snapshot", "SELECT id FROM snapshots", " WHERE cell_id = NEW.id"),
             _log("Cell", "SELECT f.id FROM cells f JOIN snapshots s ON f.forked_from = s.id",
                  " WHERE s.cell_id = NEW.id")),
    _trigger("changes_cell_update", "UPDATE", "cells",
             _log("Cell", "NEW.id"), _log("Cell", "OLD.id", " AND OLD.id IS NOT NEW.id")),
    _trigger("changes_cell_links", f"UPDATE OF {', '.join(_CELL_LINKS)}", "cells",
             _log("Snapshot", "OLD.forked_from"),
             _log("Snapshot", "NEW.forked_from", " AND NEW.forked_from IS NOT OLD.forked_from"),
             _log("Snapshot", "SELECT id FROM snapshots", " WHERE cell_id IN (OLD.id, NEW.id)"),
             _log("Cell", "SELECT f.id FROM cells f JOIN snapshots s ON f.forked_from = s.id",
                  " WHERE s.cell_id IN (OLD.id, NEW.id) AND OLD.name IS NOT NEW.name"),
             when=_changed(*_CELL_LINKS)),
    _trigger("changes_cell_delete", "DELETE", "cells",
             _log("Cell", "OLD.id"), _log("Snapshot", "OLD.forked_from"),
             _log("Snapshot", "SELECT id FROM snapshots", " WHERE cell_id = OLD.id"),
             _log("Cell", "SELECT f.id FROM cells f JOIN snapshots s ON f.forked_from = s.id",
                  " WHERE s.cell_id = OLD.id")),
    _trigger("changes_snapshot_insert", "INSERT", "snapshots",
             _log("Snapshot", "NEW.id"), _log("Cell", "NEW.cell_id"),
             _log("Cell", "SELECT id FROM cells", " WHERE forked_from = NEW.id"),
             _log("Snapshot", "SELECT id FROM snapshots",
                  " WHERE name = NEW.name AND id IS NOT NEW.id")),
    _trigger("changes_snapshot_update", "UPDATE", "snapshots",
             _log("Snapshot", "NEW.id"),
             _log("Snapshot", "OLD.id", " AND OLD.id IS NOT NEW.id")),
    _trigger("changes_snapshot_links", f"UPDATE OF {', '.join(_SNAPSHOT_LINKS)}", "snapshots",
             _log("Cell", "OLD.cell_id"),
             _log("Cell", "NEW.cell_id", " AND NEW.cell_id IS NOT OLD.cell_id"),
             _log("Cell", "SELECT id FROM cells", " WHERE forked_from IN (OLD.id, NEW.id)"),
             _log("Snapshot", "SELECT id FROM snapshots",
                  " WHERE name IN (OLD.name, NEW.name) AND id IS NOT NEW.id"),
             when=_changed(*_SNAPSHOT_LINKS)),
    _trigger("changes_snapshot_delete", "DELETE", "snapshots",
             _log("Snapshot", "OLD.id"), _log("Cell", "OLD.cell_id"),
             _log("Cell", "SELECT id FROM cells", " WHERE forked_from = OLD.id"),
             _log("Snapshot", "SELECT id FROM snapshots", " WHERE name = OLD.name")),
    *(_trigger(f"changes_operation_{event.lower()}", event, "operations",
               _log("Operation", f"{row}.id")) for event, row in
      (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))),
    _trigger("changes_operation_rename", "UPDATE OF id", "operations",
             _log("Operation", "OLD.id"), when="OLD.id IS NOT NEW.id"),
    *(_trigger(f"changes_step_{event.lower()}", event, "operation_steps",
               _log("Operation", f"{row}.op_id")) for event, row in
      (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))),
    _trigger("changes_step_move", "UPDATE OF op_id", "operation_steps",
             _log("Operation", "OLD.op_id"), when="OLD.op_id IS NOT NEW.op_id"),
    _trigger("changes_event_insert", "INSERT", "events", _log("Event", "NEW.id")),
]


def latest(conn: sqlite3.Connection) -> int:
    """The newest version (the last change's seq; after the migration, the newest event id
    it found until a change is written)."""
    found = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return int(found[0]) if found else 0


def oldest(conn: sqlite3.Connection) -> int:
    """The oldest version a watch may resume from: every change after it is still kept."""
    found = conn.execute("SELECT min(seq) FROM changes").fetchone()[0]
    return latest(conn) if found is None else int(found) - 1


def check(conn: sqlite3.Connection, version: int) -> None:
    """Refuse a version to resume from that is not one of this log's: newer than the newest
    (400) or older than what is kept (410 Gone: list again)."""
    newest = latest(conn)
    if version > newest:
        raise UsageError(f"resourceVersion {version}: the newest is {newest} (a version "
                         "comes from a list's metadata.resourceVersion or a watch's "
                         "events)")
    first = oldest(conn)
    if version < first:
        raise VersionGone(f"resourceVersion {version} is too old: the changes kept begin "
                          f"after {first}; list again and watch from the list's "
                          "metadata.resourceVersion")


def touched(conn: sqlite3.Connection, after: int, upto: int, kind: str,
            most: int | None = None) -> set[str] | None:
    """The ids of the objects of `kind` changes after `after` up to `upto` name, or None
    when more than `most` (reading them all costs less than naming them)."""
    sql = "SELECT DISTINCT object_id FROM changes WHERE seq > ? AND seq <= ? AND kind = ?"
    params: tuple[object, ...] = (after, upto, kind)
    if most is not None:
        sql += " LIMIT ?"
        params += (most + 1,)
    found = {r[0] for r in conn.execute(sql, params)}
    return None if most is not None and len(found) > most else found


def events_after(conn: sqlite3.Connection, after: int, limit: int) -> list[sqlite3.Row]:
    """The events recorded after version `after`, oldest first, at most `limit`: each row
    the event's columns and `change_seq`, its version."""
    return conn.execute(
        "SELECT c.seq AS change_seq, e.* FROM changes c "
        "JOIN events e ON e.id = CAST(c.object_id AS INTEGER) "
        "WHERE c.kind = 'Event' AND c.seq > ? ORDER BY c.seq LIMIT ?",
        (after, limit)).fetchall()


def kinds_after(conn: sqlite3.Connection, after: int) -> Iterable[tuple[int, str, str]]:
    """Every change after `after` as (seq, kind, object id), oldest first (for tests)."""
    return [(int(r[0]), str(r[1]), str(r[2])) for r in conn.execute(
        "SELECT seq, kind, object_id FROM changes WHERE seq > ? ORDER BY seq", (after,))]
