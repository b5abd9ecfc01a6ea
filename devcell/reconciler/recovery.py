"""Crash recovery: operations left Running by a dead process are failed, never replayed.

Called by whoever is about to reconcile, under the reconcile lock: holding the lock proves
no live process is executing those operations. The next reconcile plans afresh from what the
backend observes.
"""

from __future__ import annotations

from pathlib import Path

from devcell import failpoints, kinds
from devcell.log import logger
from devcell.store import events, objects, operations
from devcell.store.db import Database


def recover_interrupted(db: Database) -> list[tuple[str, str, str]]:
    """Mark every Running operation Failed/Interrupted with the step in flight.

    Returns (op id, kind, object id) of each, plus the cell of an interrupted snapshot
    (its services may have been left quiesced), so the caller reconciles them.
    """
    if not operations.has_running(db.conn):
        return []
    recovered = []
    with db.write() as conn:
        for op in operations.running(conn):
            step = op["current_step"]
            in_flight = operations.interrupt(conn, op["id"])
            where = f"step {in_flight}" if in_flight else (
                f"after step {step}" if step else "before its first step")
            message = (f"interrupted at {where}: the process running it died or could not "
                       "record its end (a full disk, say); "
                       "not replayed, the next reconcile plans afresh")
            operations.finish(conn, op["id"], status=operations.OpStatus.FAILED,
                              reason="Interrupted", message=message,
                              failed_step=in_flight or step)
            events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                          name=op["object_name"], reason="OperationInterrupted",
                          message=f"{op['action']} {op['id']} {message}", type="Warning",
                          op_id=op["id"])
            logger.bind(kind=op["object_kind"], name=op["object_name"], op=op["id"]).warning(
                "recovered interrupted operation: {}", message)
            key = (op["object_kind"], op["object_id"])
            if key[0] not in kinds.KINDS:
                continue  # a garbage collection: nothing to reconcile, the next one replans
            recovered.append((op["id"], *key))
            owner = objects.owners(conn, [key]).get(key)
            if owner is not None:  # e.g. a snapshot's cell: may have been left quiesced
                recovered.append((op["id"], *owner))
        failpoints.hit("recover.before-commit")
    return recovered


def remove_dead_temporaries(state_dir: Path) -> list[str]:
    """Remove the half-built volumes and checkpoints, and half-removed trash, that a killed
    process left in the state directory (each names its owner; a live owner's are kept):
    in every storage root a backend's registry entry marks as holding temporaries. Cheap
    when there are none: one directory listing each."""
    from devcell import backend_registry
    from devcell.backends.host import temporaries

    removed = []
    for parent in (state_dir / root.path for backend in backend_registry.BACKENDS
                   for root in backend.roots if root.temporaries):
        for name in temporaries.remove_dead(parent):
            removed.append(str(parent / name))
            logger.warning("removed {}: left by a process that died mid-copy or mid-removal",
                           parent / name)
    return removed
