"""Events: short, human-readable notes about objects (kubectl's `Events:` section)."""

from __future__ import annotations

import sqlite3

from devcell.names import printable
from devcell.store.clock import now


def record(
    conn: sqlite3.Connection, *, kind: str, object_id: str | None, name: str, reason: str,
    message: str, type: str = "Normal", op_id: str | None = None,
) -> None:
    """Record an event; its message escaped (names.printable) here, once for every reader
    (tables, describe, -o json, a script reading the table), as file names and quoted input
    in it are user-controlled. Its actor is whoever the changes are made by (store.actor)."""
    from devcell.store import actor  # here: commands that record nothing never import it

    message = printable(message)
    conn.execute(
        "INSERT INTO events (created_at, object_kind, object_id, object_name, type, reason, "
        "message, op_id, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (now(), kind, object_id, name, type, reason, message, op_id, actor.current()),
    )


def for_object(conn: sqlite3.Connection, object_id: str, limit: int = 20) -> list[sqlite3.Row]:
    rows = conn.execute(
        "SELECT * FROM events WHERE object_id = ? ORDER BY id DESC LIMIT ?", (object_id, limit)
    ).fetchall()
    return list(reversed(rows))


def latest_id(conn: sqlite3.Connection) -> int:
    """The last event's id (0: none yet): the version a watch resumes from."""
    found = conn.execute("SELECT MAX(id) FROM events").fetchone()[0]
    return int(found or 0)


def after(conn: sqlite3.Connection, event_id: int, limit: int = 500) -> list[sqlite3.Row]:
    """The events recorded after `event_id`, oldest first, at most `limit` of them."""
    return conn.execute("SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?",
                        (event_id, limit)).fetchall()
