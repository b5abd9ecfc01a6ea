"""Safety snapshots: Ready Snapshots a plan takes of a workspace before it replaces (restore)
or deletes (a prune) it, recorded in the very transaction that records their checkpoint
step as done, so each exists, complete, before the step that would lose the workspace runs."""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.backends.base import Outputs
from devcell.store import events, objects
from devcell.store.clock import now
from devcell.store.objects import Phase

ANNOTATION = "devcell.dev/safety-snapshot"


def record(conn: sqlite3.Connection, cell: objects.ObjectRecord, args: dict[str, Any],
           outputs: Outputs, *, spec: dict[str, Any], why: str, source: str,
           origin: dict[str, Any]) -> str:
    """Record the safety snapshot of checkpoint step `args` (its id and name, `safety`) and
    return its name; `why` completes "taken before ...". Recorded once: an earlier attempt's
    record stands."""
    snapshot_id = str(args["checkpoint_id"])
    earlier = objects.get(conn, "Snapshot", snapshot_id, include_deleted=True)
    if earlier is not None:
        return earlier.name
    name = str(args["safety"])
    if objects.get(conn, "Snapshot", name) is not None:  # taken meanwhile by someone else
        name = f"{name[:46]}-{snapshot_id[-16:]}".replace("_", "-")
    annotations = {ANNOTATION: f"taken before {why}"}
    objects.insert(conn, kind="Snapshot", name=name, spec=spec, labels={},
                   annotations=annotations, spec_hash=str(args["spec_hash"]),
                   manifest_hash=str(args["manifest_hash"]), source=source, phase=Phase.READY,
                   object_id=snapshot_id,
                   extra={"cell_id": cell.id, "owner": cell.extra.get("owner"),
                          "consistency": outputs.get("consistency"),
                          "checkpoint_ref": outputs.get("checkpoint"), "taken_at": now()})
    fresh = objects.get(conn, "Snapshot", snapshot_id)
    assert fresh is not None
    status = {"conditions": objects.set_condition(
        [], "Ready", "True", "Taken", f"safety checkpoint taken before {why}"),
              "checkpoint": dict(outputs), "origin": origin}
    objects.write_status(conn, fresh, phase=Phase.READY, status=status,
                         observed_generation=fresh.generation)
    events.record(conn, kind="Snapshot", object_id=snapshot_id, name=name, reason="Taken",
                  message=f"safety snapshot of cell {cell.name}, taken before {why}")
    return name
