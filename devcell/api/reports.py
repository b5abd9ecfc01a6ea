"""What a verb returns: the changes it recorded and, per object, how converging ended.

Plain records, so a caller (the CLI, a test, another program) decides what to show; the
words are the ones `devcell` prints.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from devcell.reconciler.lease import Holder
from devcell.records import Record, field
from devcell.store.desired import Change


class Status(StrEnum):
    """How converging ended for one object (or for the operation a resume waited for)."""

    SETTLED = "settled"
    """Done: Ready (or deleted, for a delete); an operation succeeded."""
    FAILED = "failed"
    """Stopped with an error; the message says why (the next apply, or the daemon, retries)."""
    WAITING = "waiting"
    """Not done when the call returned: waiting on another object, on an approval, or out of
    time; the message says which."""


class ObjectResult(Record):
    """How converging one object ended, and why when it did not settle."""

    kind: str
    name: str
    object_id: str
    status: Status
    message: str = ""
    awaiting_approval: str | None = None
    """The operation waiting for someone's approval (`devcell op resume`), when that is why
    the object did not settle."""


class OperationResult(Record):
    """The operation a resume waited for while a daemon ran it."""

    op_id: str
    status: Status
    message: str = ""


class Converged(Record):
    """How converging what a verb recorded ended.

    `objects` lists the settled objects first, then the others in the order they are
    reported. `holder` is the daemon that reconciles them when one held the lease (the call
    then only waited); `waited` is False when nothing was converged or waited for (a daemon
    runs and the caller did not ask to wait, or there was nothing to do).
    """

    objects: tuple[ObjectResult, ...] = ()
    holder: Holder | None = None
    waited: bool = False
    operation: OperationResult | None = None
    recovered: tuple[str, ...] = ()
    """Operations an inline converge found interrupted by a dead process (failed, not replayed)."""
    expired: tuple[str, ...] = ()
    """Snapshots an inline converge found expired and deleted (their ttl, their cell's retain)."""
    retention_pending: tuple[ObjectResult, ...] = ()
    """Retention work an inline converge took up unasked and could not finish (the engine of
    an expired snapshot's backend unreachable): said, but not this command's failure; the
    next converge or the daemon tries again."""

    @property
    def problems(self) -> tuple[ObjectResult, ...]:
        """The objects that did not settle, in the order they are reported."""
        return tuple(o for o in self.objects if o.status is not Status.SETTLED)

    @property
    def ok(self) -> bool:
        """Nothing failed or is left waiting among what was converged or waited for."""
        op_ok = self.operation is None or self.operation.status is Status.SETTLED
        return op_ok and not self.problems


class Recorded(Record):
    """What a verb wrote before converging (or, in a dry run, would write)."""

    changes: tuple[Change, ...] = ()
    """One per object, in the order recorded: created, configured, unchanged, pruned, deleted;
    an unchanged cell a verb found drifted or with changed build inputs says repaired or
    rebuilt (api.converging)."""
    missing: tuple[tuple[str, str], ...] = ()
    """(kind, name) named by `delete -f` files but not recorded: skipped."""
    operation: str | None = None
    """The operation `op resume` approved or `op cancel` cancelled."""


class Report(Record):
    """What a verb did: what it recorded, then what converging that gave."""

    recorded: Recorded
    converged: Converged = field(default_factory=Converged)

    @property
    def ok(self) -> bool:
        return self.converged.ok


def document(report: Report) -> dict[str, Any]:
    """The report as JSON: what `devcell apply` and `delete` print, one field each (the HTTP
    API's answer to apply and delete)."""
    converged = report.converged
    return {
        "changes": [{"kind": c.kind, "name": c.name, "id": c.object_id, "outcome": c.outcome}
                    for c in report.recorded.changes],
        "missing": [{"kind": kind, "name": name} for kind, name in report.recorded.missing],
        "results": [{"kind": o.kind, "name": o.name, "id": o.object_id,
                     "status": o.status.value, "message": o.message,
                     "awaitingApproval": o.awaiting_approval} for o in converged.objects],
        "expired": list(converged.expired),
        "ok": report.ok,
    }
