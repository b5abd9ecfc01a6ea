"""Crash recovery: operations left Running by a dead process are failed, never replayed.

Called by whoever is about to reconcile, under the reconcile lock: holding the lock proves
no live process is executing those operations. The next reconcile plans afresh from what the
backend observes.
"""

from __future__ import annotations

from loguru import logger

from devcell import failpoints
from devcell.store import events, operations
from devcell.store.db import Database, now


def recover_interrupted(db: Database) -> list[tuple[str, str, str]]:
    """Mark every Running operation Failed/Interrupted with the step in flight.

    Returns (op id, kind, object id) of each, plus the cell of an interrupted snapshot
    (its services may have been left quiesced), so the caller reconciles them.
    """
    if not operations.has_running(db.conn):
        return []
    recovered = []
    with db.write() as conn:
        rows = conn.execute(
            "SELECT id, object_kind, object_id, object_name, action, current_step "
            "FROM operations WHERE status = 'Running'").fetchall()
        for op in rows:
            step = op["current_step"]
            in_flight = conn.execute(
                "SELECT idx, name FROM operation_steps WHERE op_id = ? AND status = 'Running'",
                (op["id"],)).fetchone()
            where = f"step {in_flight['name']}" if in_flight else (
                f"after step {step}" if step else "before its first step")
            message = (f"interrupted at {where}: the process running it died; "
                       "not replayed, the next reconcile plans afresh")
            conn.execute(
                "UPDATE operation_steps SET status = 'Interrupted', finished_at = ?, "
                "error = 'interrupted: the process died during this step' "
                "WHERE op_id = ? AND status = 'Running'", (now(), op["id"]))
            operations.finish(conn, op["id"], status=operations.OpStatus.FAILED,
                              reason="Interrupted", message=message,
                              failed_step=in_flight["name"] if in_flight else step)
            events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                          name=op["object_name"], reason="OperationInterrupted",
                          message=f"{op['action']} {op['id']} {message}", type="Warning",
                          op_id=op["id"])
            logger.bind(kind=op["object_kind"], name=op["object_name"], op=op["id"]).warning(
                "recovered interrupted operation: {}", message)
            recovered.append((op["id"], op["object_kind"], op["object_id"]))
            if op["object_kind"] == "Snapshot":
                cell = conn.execute("SELECT cell_id FROM snapshots WHERE id = ?",
                                    (op["object_id"],)).fetchone()
                if cell is not None:
                    recovered.append((op["id"], "Cell", cell["cell_id"]))
        failpoints.hit("recover.before-commit")
    return recovered
