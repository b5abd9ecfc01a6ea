"""A snapshot restored into its cell, in place (POST /api/v1/snapshots/NAME/restore).

The library call `devcell snapshot restore` makes (api.restore), authorized as the policy's
`restore` verb on the cell it would restore into (the snapshot's own cell, or the body's
`cell`: api.restore.check says which, and refuses any other before the policy is asked) and
recorded in the caller's name. A dry run answers the plan at once. Otherwise the answer comes
once the restore is recorded (202) or, with wait=true, once the daemon carried it out, it
waits at its approval gate (approved on the way with `approve`), or `timeoutSeconds` ran out
(200): as the verb waits for a running daemon, polled from the event loop (server/app.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.errors import UsageError
from devcell.names import printable
from devcell.records import Record
from devcell.server import bodies

FIELDS: dict[str, type] = {"cell": str, "safety": bool, "dryRun": bool, "approve": bool}


class Asked(Record):
    """The body's fields (all optional)."""

    cell: str | None = None
    """The cell to restore into (None: the snapshot's own)."""
    safety: bool = True
    """Take a safety snapshot of the workspace first (--no-safety-snapshot: False)."""
    dry_run: bool = False
    approve: bool = False
    """Approve the gate the restore stops at when the workspace changed since its last
    snapshot (--approve)."""


def parse(data: bytes) -> Asked:
    """The restore's fields from its JSON body (none: all defaults); UsageError naming the
    field that cannot be used."""
    if not data.strip():
        return Asked()
    body = bodies.json_object(data, "restore", FIELDS, ", ".join(FIELDS))
    for key, value in body.items():
        if not isinstance(value, FIELDS[key]) or (isinstance(value, str)
                                                   and not 0 < len(value) <= 63):
            kind = "a cell's name or id (1 to 63 characters)" if FIELDS[key] is str \
                else "a bool"
            raise UsageError(f"restore: {key} must be {kind}")
    return Asked(cell=body.get("cell"), safety=body.get("safety", True),
                 dry_run=body.get("dryRun", False), approve=body.get("approve", False))


class Recorded(Record):
    """A restore recorded (or planned): the answer so far, and what a wait needs."""

    doc: dict[str, Any]
    result: Any
    """api.restore.Restored."""
    cell_id: str
    started: str


def record(state_dir: Path, principal: Any, snapshot: str, asked: Asked) -> Recorded:
    """Authorize and record (or, dry, plan) the restore in `principal`'s name."""
    from devcell.api import converging
    from devcell.api import restore as api
    from devcell.auth import policy, resources
    from devcell.server.problems import HttpProblem
    from devcell.store import actor, changes, clock
    from devcell.store.db import Database

    db = Database(state_dir, create=False)
    try:
        try:
            _snap, target = api.check(db, snapshot, asked.cell)
        except api.RestoreRefused as exc:  # the objects as they are refuse it: a conflict
            raise HttpProblem(409, "restore-refused", "The restore cannot be done",
                              str(exc)) from None
        policy.require(principal, policy.Verb.restore,
                       resources.recorded(db.conn, "Cell", target.id))
        version, started = changes.latest(db.conn), clock.now()
    finally:
        db.close()
    with actor.acting_as(principal.user):
        try:
            result = api.restore(state_dir, snapshot, cell=target.id, safety=asked.safety,
                                 dry_run=asked.dry_run,
                                 options=converging.Options(wait=False, approve=asked.approve))
        except api.RestoreRefused as exc:  # changed since it was checked
            raise HttpProblem(409, "restore-refused", "The restore cannot be done",
                              str(exc)) from None
    doc = _document(result)
    doc["resourceVersion"] = str(version)
    return Recorded(doc, result, target.id, started)


def carried_out(db: Any, recorded: Recorded, approve: bool) -> bool:
    """One look: the daemon carried the restore out, or it waits at its gate."""
    from devcell.api import restore as api

    return api.carried_out(db, recorded.cell_id, approve=approve)


def finished(db: Any, recorded: Recorded, timeout: float, done: bool) -> dict[str, Any]:
    """The answer after a wait: how the restore ended, the cell's result as an action's
    answer says it (settled, failed, or still waiting when `done` is False: timed out)."""
    from devcell.api import restore as api
    from devcell.reconciler import lease
    from devcell.server import actions

    result = api.outcome(db, recorded.result.preview, recorded.result.report,
                         recorded.cell_id, recorded.started)
    doc = {**_document(result), "resourceVersion": recorded.doc["resourceVersion"]}
    key = ("Cell", recorded.cell_id)
    waited = actions.check(db, [key])
    results: list[dict[str, Any]] = []
    if not done:
        results.append({"kind": "Cell", "name": result.preview.cell, "id": key[1],
                        "status": "waiting", "message": printable(
                            f"timed out after {timeout:g}s: the restore is not carried out "
                            "yet")})
    elif waited.failed:
        results.append({"kind": "Cell", "name": result.preview.cell, "id": key[1],
                        "status": "failed", "message": printable(waited.failed[key])})
    holder = lease.current_holder(db.state_dir)
    doc.update(results=results, ok=not results,
               reconciledBy=holder.describe() if holder is not None else None)
    return doc


def _document(result: Any) -> dict[str, Any]:
    """api.restore.Restored as JSON: the plan, and how the restore went."""
    p = result.preview
    return {"cell": p.cell, "snapshot": p.snapshot, "safety": p.safety, "running": p.running,
            "changedSince": p.changed_since,
            "changes": p.changes.summary() if p.changes is not None else None,
            "needsApproval": p.needs_approval, "operation": result.operation,
            "done": result.done, "awaiting": result.awaiting, "failed": result.failed,
            "results": [], "ok": True}
