"""Operations and their steps: the history of every change DevCell made to the world.

A step is marked Running (committed) before its backend call and Succeeded or Failed after,
so after a crash the step that was in flight is known exactly.
"""

from __future__ import annotations

import json
import sqlite3
from enum import StrEnum
from typing import Any

from devcell import ids
from devcell.records import Record
from devcell.store import faults
from devcell.store.clock import now


class OpStatus(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class StepStatus(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"
    """Not run: an earlier step failed (or the plan stopped) before it."""
    INTERRUPTED = "Interrupted"
    """In flight when the process running it died (crash recovery)."""


class StepRecord(Record):
    """One step of an operation as recorded: status, times, outputs and error."""

    op_id: str
    idx: int
    name: str
    status: str
    started_at: str | None
    finished_at: str | None
    duration_ms: float | None
    outputs: dict[str, Any]
    error: str | None


def has_running(conn: sqlite3.Connection) -> bool:
    """Any operation still marked Running: in flight elsewhere, or left by a dead process."""
    return conn.execute("SELECT 1 FROM operations WHERE status = ? LIMIT 1",
                        (OpStatus.RUNNING,)).fetchone() is not None


def running(conn: sqlite3.Connection) -> list[sqlite3.Row]:
    """Operations still marked Running (after a crash: those a dead process left)."""
    return conn.execute(
        "SELECT id, object_kind, object_id, object_name, action, current_step "
        "FROM operations WHERE status = ?", (OpStatus.RUNNING,)).fetchall()


def interrupt(conn: sqlite3.Connection, op_id: str) -> str | None:
    """Mark the step in flight Interrupted (its process died); its name, if there was one."""
    in_flight = conn.execute("SELECT name FROM operation_steps WHERE op_id = ? AND status = ?",
                             (op_id, StepStatus.RUNNING)).fetchone()
    conn.execute(
        "UPDATE operation_steps SET status = ?, finished_at = ?, "
        "error = 'interrupted: the process died during this step' "
        "WHERE op_id = ? AND status = ?",
        (StepStatus.INTERRUPTED, now(), op_id, StepStatus.RUNNING))
    return str(in_flight[0]) if in_flight else None


def exists(conn: sqlite3.Connection, op_id: str) -> bool:
    return conn.execute("SELECT 1 FROM operations WHERE id = ?", (op_id,)).fetchone() is not None


def new_operation_id() -> str:
    return ids.new_id("op")


def create(
    conn: sqlite3.Connection, *, op_id: str, object_kind: str, object_id: str, object_name: str,
    action: str, trigger: str, generation: int, step_names: list[str],
) -> None:
    """Record a new operation, Running, its steps Pending; its actor is whoever the changes
    are made by (store.actor)."""
    from devcell.store import actor  # here: commands that record nothing never import it

    conn.execute(
        "INSERT INTO operations (id, object_kind, object_id, object_name, action, trigger, "
        "status, generation, created_at, plan, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (op_id, object_kind, object_id, object_name, action, trigger, OpStatus.RUNNING,
         generation, now(), json.dumps(step_names), actor.current()),
    )
    conn.executemany(
        "INSERT INTO operation_steps (op_id, idx, name, status) VALUES (?, ?, ?, ?)",
        [(op_id, i, name, StepStatus.PENDING) for i, name in enumerate(step_names)],
    )


def start_step(conn: sqlite3.Connection, op_id: str, idx: int, name: str) -> None:
    conn.execute(
        "UPDATE operation_steps SET status = ?, started_at = ? WHERE op_id = ? AND idx = ?",
        (StepStatus.RUNNING, now(), op_id, idx),
    )
    conn.execute("UPDATE operations SET current_step = ? WHERE id = ?", (name, op_id))


def finish_step(
    conn: sqlite3.Connection, op_id: str, idx: int, *, ok: bool, duration_ms: float,
    outputs: dict[str, Any] | None = None, error: str | None = None,
) -> None:
    conn.execute(
        "UPDATE operation_steps SET status = ?, finished_at = ?, duration_ms = ?, outputs = ?, "
        "error = ? WHERE op_id = ? AND idx = ?",
        (StepStatus.SUCCEEDED if ok else StepStatus.FAILED, now(), round(duration_ms, 3),
         json.dumps(outputs or {}), error, op_id, idx),
    )


def finish(
    conn: sqlite3.Connection, op_id: str, *, status: OpStatus, reason: str = "",
    message: str = "", failed_step: str | None = None,
) -> None:
    """Close the operation; current_step keeps the step that failed (None on success)."""
    conn.execute(
        "UPDATE operations SET status = ?, reason = ?, message = ?, finished_at = ?, "
        "current_step = ? WHERE id = ?",
        (status, reason, message, now(), failed_step, op_id),
    )
    conn.execute(
        "UPDATE operation_steps SET status = ? WHERE op_id = ? AND status = ?",
        (StepStatus.SKIPPED, op_id, StepStatus.PENDING),
    )


def steps(conn: sqlite3.Connection, op_id: str) -> list[StepRecord]:
    rows = conn.execute(
        "SELECT * FROM operation_steps WHERE op_id = ? ORDER BY idx", (op_id,)
    ).fetchall()
    return [
        StepRecord(r["op_id"], r["idx"], r["name"], r["status"], r["started_at"],
                   r["finished_at"], r["duration_ms"], faults.loads(r["outputs"] or "{}"),
                   r["error"])
        for r in rows
    ]


def suspend(conn: sqlite3.Connection, op_id: str, *, reason: str, message: str,
            next_step: str) -> None:
    """A clean stop at a step boundary; its run snapshot is already saved."""
    conn.execute(
        "UPDATE operations SET status = 'Suspended', reason = ?, message = ?, current_step = ? "
        "WHERE id = ?", (reason, message, next_step, op_id))


def resumed(conn: sqlite3.Connection, op_id: str, *, approval: dict[str, Any] | None) -> None:
    conn.execute(
        "UPDATE operations SET status = 'Running', reason = NULL, message = ?, "
        "resume_input = NULL WHERE id = ?",
        ("resumed" + (" with approval" if approval is not None else ""), op_id))


def approve(conn: sqlite3.Connection, op_id: str, approval: dict[str, Any]) -> None:
    """Record validated resume input for the reconciler (daemon) to pick up."""
    conn.execute("UPDATE operations SET resume_input = ?, reason = 'Approved' WHERE id = ? "
                 "AND status = 'Suspended'", (json.dumps(approval), op_id))


def suspended_for(conn: sqlite3.Connection, object_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM operations WHERE object_id = ? AND status = 'Suspended' "
        "ORDER BY rowid DESC LIMIT 1", (object_id,)).fetchone()
    return row


def approved_keys(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(kind, object id) of suspended operations someone approved: ready to resume."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT object_kind, object_id FROM operations WHERE status = ? AND reason = 'Approved'",
        (OpStatus.SUSPENDED,))]


def get(conn: sqlite3.Connection, op_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(
        "SELECT * FROM operations WHERE id = ?", (op_id,)
    ).fetchone()
    return row


def for_object(conn: sqlite3.Connection, object_id: str, limit: int = 10) -> list[sqlite3.Row]:
    return conn.execute(
        "SELECT * FROM operations WHERE object_id = ? ORDER BY rowid DESC LIMIT ?",
        (object_id, limit),
    ).fetchall()
