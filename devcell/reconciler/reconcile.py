"""One reconcile of one object, as controller-runtime's Reconcile: the only place that turns
"resume or plan, then execute" into a typed outcome.

Both callers use it: the inline converge of `devcell apply` and the daemon's workers. They
differ only in what they do with an outcome (the daemon's queue retries errors with backoff;
an inline converge reports them and leaves the retry to the next apply or the daemon), and
both group keys by the same rule: an object and those it owns (a cell and its snapshots) are
never reconciled at once.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from enum import StrEnum

from devcell import errors, kinds
from devcell.controllers import Controller
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Plan, Settled, Wait, resume_command
from devcell.reconciler import executor, suspended
from devcell.records import Record
from devcell.store import objects, operations

Key = objects.Key
"""(kind, object id)"""


class Result(StrEnum):
    """How a reconcile ended, from the queue's point of view."""

    DONE = "done"
    """Desired and observed agree: forget the key until something changes."""
    REQUEUE = "requeue"
    """Look again after `Outcome.after` seconds: an operation ran (0: confirm it settled at
    once) or the object waits on another (a snapshot on its cell)."""
    ERROR = "error"
    """Failed, worth retrying: the queue's backoff (or the error's own delay) decides when."""
    TERMINAL = "terminal"
    """Failed in a way retrying cannot mend until the desired state changes: recorded, and
    not retried."""
    AWAITING_APPROVAL = "awaiting-approval"
    """Held at an approval gate: nothing happens until `devcell op resume` (or --approve)."""
    STOPPED = "stopped"
    """Suspended by a graceful shutdown: the next start resumes it."""


class Outcome(Record):
    """How one reconcile ended, in the words the queue acts on."""

    result: Result
    after: float = 0.0
    """REQUEUE: seconds until the next look; ERROR: the error's own delay (0: backoff); DONE:
    seconds until something falls due (a ttl, a schedule), 0 for nothing."""
    message: str = ""
    """Why it waits or failed, in words for the user."""
    reason: str = ""
    """The cause in a word (WaitingForCell, ImageNotFound...), from the error's class."""
    operation: str | None = None
    """The operation this reconcile ran, if any."""
    error: BaseException | None = None


_controllers: dict[str, Controller] = {}
_controllers_lock = threading.Lock()


def controller_for(kind: str) -> Controller:
    """The kind's controller (the registry names it), imported on first use."""
    with _controllers_lock:
        if kind not in _controllers:
            module, _, attr = kinds.get(kind).controller.partition(":")
            _controllers[kind] = getattr(importlib.import_module(module), attr)()
        return _controllers[kind]


def reconcile(ctx: Context, key: Key) -> Outcome:
    """Bring one object one operation closer to its desired state; say how it ended."""
    kind, object_id = key
    controller = controller_for(kind)
    held = suspended.handle(ctx, controller, object_id)
    if isinstance(held, Wait):  # an approval gate nobody has passed yet
        return Outcome(Result.AWAITING_APPROVAL, after=suspended.APPROVAL_POLL_S,
                       message=held.message, reason=held.reason)
    if held is not None:
        return _executed(ctx, held)
    decision = controller.decide(ctx, object_id)
    if isinstance(decision, Plan):
        return _executed(ctx, executor.execute(ctx, controller, decision))
    if isinstance(decision, Wait):
        return Outcome(Result.REQUEUE, after=decision.requeue_after, message=decision.message,
                       reason=decision.reason)
    if isinstance(decision, Blocked):
        return _failed(decision.error, decision.message, None)
    assert isinstance(decision, Settled)
    return Outcome(Result.DONE, after=decision.requeue_after or 0.0)


def _executed(ctx: Context, run: executor.Result) -> Outcome:
    if run.suspended == "Shutdown":
        return Outcome(Result.STOPPED, message="suspended by a shutdown", operation=run.op_id)
    if run.suspended:
        row = operations.get(ctx.db.conn, run.op_id)
        why = row["message"] if row else run.suspended
        name = row["object_name"] if row else "NAME"
        message = (f"operation {run.op_id} {why}; approve it with "
                   f"`{resume_command(run.op_id, name)}` (or pass --approve)")
        return Outcome(Result.AWAITING_APPROVAL, after=suspended.APPROVAL_POLL_S,
                       message=message, reason=run.suspended, operation=run.op_id)
    if run.error is not None:
        if ctx.stopping is not None and ctx.stopping.is_set() and run.cause is None:
            return Outcome(Result.STOPPED, message=run.error, operation=run.op_id)
        return _failed(run.cause, run.error, run.op_id)
    return Outcome(Result.REQUEUE, after=0.0, operation=run.op_id)


def _failed(error: BaseException | None, message: str, op_id: str | None) -> Outcome:
    """An error keeps its class to here: permanent ones are terminal, others are retried."""
    delay = errors.retry_delay(error) if error is not None else 0.0
    reason = errors.condition_reason(error) if error is not None else "StepFailed"
    if delay is None:
        return Outcome(Result.TERMINAL, message=message, reason=reason, operation=op_id,
                       error=error)
    return Outcome(Result.ERROR, after=delay, message=message, reason=reason, operation=op_id,
                   error=error)


def group_of(owners: dict[Key, Key], key: Key) -> Key:
    """The key an object is serialised under: its owner's (a snapshot's cell), else its own."""
    return owners.get(key, key)


def groups(conn: sqlite3.Connection, keys: list[Key]) -> list[list[Key]]:
    """Keys that must not run at once, together, owners first; groups keep the order of their
    first key. The one grouping rule of both the inline converge and the daemon."""
    owners = objects.owners(conn, keys)
    grouped: dict[Key, list[Key]] = {}
    for key in keys:
        grouped.setdefault(group_of(owners, key), []).append(key)
    return [sorted(g, key=lambda k: k in owners) for g in grouped.values()]
