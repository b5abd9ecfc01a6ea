"""Suspended operations: resume those that may continue, hold those that wait for approval.

Reconcilers (inline and daemon) ask here first: an object with a suspended operation is not
planned afresh. A graceful-shutdown suspension resumes at once; an approval gate waits until
`devcell op resume` records valid input (or `--approve` was given).
"""

from __future__ import annotations

import json
import sqlite3

from devcell.controllers import Controller
from devcell.controllers.context import Context
from devcell.controllers.plan import Wait, resume_command
from devcell.errors import StorageError
from devcell.log import logger
from devcell.reconciler import executor
from devcell.store import events, operations

APPROVAL_POLL_S = 0.5


def _fail(ctx: Context, op: sqlite3.Row, reason: str, message: str) -> None:
    with ctx.db.write() as conn:
        operations.finish(conn, op["id"], status=operations.OpStatus.FAILED, reason=reason,
                          message=message, failed_step=op["current_step"])
        events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                      name=op["object_name"], reason=reason, message=message, type="Warning",
                      op_id=op["id"])
    logger.bind(kind=op["object_kind"], name=op["object_name"], op=op["id"]).warning(message)


def handle(ctx: Context, controller: Controller, object_id: str
           ) -> executor.Result | Wait | None:
    """Resume or hold the object's suspended operation; None when it has none (plan afresh)."""
    op = operations.suspended_for(ctx.db.conn, object_id)
    if op is None:
        return None
    approval = json.loads(op["resume_input"]) if op["resume_input"] else None
    if op["reason"] == "AwaitingApproval" and approval is None:
        if not ctx.approve:
            return Wait("AwaitingApproval",
                        f"operation {op['id']} {op['message']}; approve it with "
                        f"`{resume_command(op['id'], op['object_name'])}` or cancel it with "
                        f"`devcell op cancel {op['id']}`", requeue_after=APPROVAL_POLL_S)
        approval = {"approvedBy": "--approve"}
    try:
        run_snapshot = ctx.run_store().load(op["id"])
    except StorageError as exc:
        _fail(ctx, op, "CorruptSnapshot", f"cannot resume: {exc}")
        return None
    if run_snapshot is None:
        _fail(ctx, op, "SnapshotMissing", "cannot resume: its run snapshot is gone")
        return None
    plan = controller.rebuild_plan(ctx, dict(run_snapshot.plan))
    if plan is None:
        _fail(ctx, op, "ObjectGone", "cannot resume: its object no longer exists")
        ctx.run_store().delete(op["id"])
        return None
    return executor.execute(ctx, controller, plan,
                            resume=executor.Resume(op["id"], run_snapshot, approval))
