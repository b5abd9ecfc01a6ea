"""What a user asked of a running cell that is no spec change: run its postCreate hooks again
(`devcell cell rerun-hooks`), restart its services or one of them (`devcell cell restart`).

The ask is recorded in the cell's status (`status.asked`) and carried out by the cell
controller as a recorded operation, inline or by the daemon (which queues cells with an ask,
`pending_keys`); the step that does it clears it in the transaction that records the step,
so an ask interrupted by a crash is carried out by the next reconcile, never twice.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.store import objects
from devcell.store.clock import now
from devcell.store.objects import Key, ObjectRecord

KIND = "Cell"
RERUN_HOOKS = "rerunHooks"
RESTART = "restart"


def of(record: ObjectRecord) -> dict[str, Any]:
    """The cell's pending asks: {RERUN_HOOKS: {at}, RESTART: {at, service}} (either absent)."""
    asked = record.status.get("asked")
    return dict(asked) if isinstance(asked, dict) else {}


def ask(conn: sqlite3.Connection, record: ObjectRecord, what: str, **details: Any) -> None:
    """Record an ask (a stale `record` is refused by write_status: re-read and retry). A
    restart of the whole cell asked after one of a service covers it."""
    asked = of(record)
    previous = asked.get(what) or {}
    if what == RESTART and previous and (previous.get("service") != details.get("service")):
        details["service"] = None  # two different restarts pending: restart them all
    asked[what] = {"at": now(), **details}
    objects.write_status(conn, record, phase=record.phase,
                         status=dict(record.status, asked=asked),
                         observed_generation=record.observed_generation)


def clear(conn: sqlite3.Connection, cell_id: str, *whats: str) -> None:
    """The asks `whats` were carried out (or made moot: a new runtime runs its hooks)."""
    fresh = objects.get(conn, KIND, cell_id)
    if fresh is None:
        return
    asked = of(fresh)
    if not any(what in asked for what in whats):
        return
    for what in whats:
        asked.pop(what, None)
    status = dict(fresh.status)
    if asked:
        status["asked"] = asked
    else:
        status.pop("asked", None)
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)


def pending_keys(conn: sqlite3.Connection) -> list[Key]:
    """Live cells with an ask to carry out (the daemon queues them)."""
    return [(KIND, r[0]) for r in conn.execute(
        "SELECT id FROM cells WHERE deleted_at IS NULL AND deleting_at IS NULL "
        "AND json_extract(status, '$.asked') IS NOT NULL")]
