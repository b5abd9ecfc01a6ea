"""Converge what a verb recorded: inline, or through the daemon that holds the lease.

One decision for every verb, taken here rather than in each command: when a daemon holds the
state directory's lease, it alone reconciles, so the call only approves the gates it was asked
to approve and waits for what the daemon records; otherwise the call reconciles the objects
itself (devcell.reconciler.converge, under the reconcile lock). Heavy modules (the reconciler's
converge, the backends, loguru) are imported only on the inline path, so a no-op re-apply
pays for none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext

from devcell.api.reports import Converged, ObjectResult, OperationResult, Recorded, Report, Status
from devcell.reconciler import lease
from devcell.records import Record
from devcell.store import desired
from devcell.store.db import Database

Key = tuple[str, str]
"""(kind, object id)"""

APPROVED_BY = {"approvedBy": "--approve"}
"""The approval recorded for a gate passed up front (`--approve`)."""


class Options(Record):
    """How a verb converges what it recorded (the command line's flags of the same names)."""

    timeout: float = 300.0
    wait: bool = True
    """With a daemon running: wait for the objects (else return once recorded)."""
    approve: bool = False
    """Pass approval gates up front (deleting a workspace that changed since its snapshot)."""
    workers: int | None = None
    """Objects reconciled at once inline; None asks their backends."""
    run_store: str | None = None
    """Where suspended operations keep their run snapshots (sqlite, file; None: default)."""


class Hooks(Record):
    """What the caller shows while a verb runs (see the package docstring)."""

    on_recorded: Callable[[Recorded], None] | None = None
    inline: Callable[[], AbstractContextManager[object]] | None = None


DEFAULTS = Options()
NO_HOOKS = Hooks()
"""Nothing shown: for callers that only want the report."""


def finish(db: Database, recorded: Recorded, *, trigger: str, options: Options, hooks: Hooks,
           keys: list[Key] | None = None, names: Mapping[Key, str] | None = None,
           condition: str = "Ready", until_op: str | None = None) -> Report:
    """Hand `recorded` to the caller, then converge `keys` (default: the changes that need it).

    condition: Ready, or delete (wait for the objects to be gone). until_op: with a daemon,
    wait for this operation to finish rather than for the objects.
    """
    extra: list[Key] = []
    if condition != "delete":
        recorded, rebuilt = judge_builds(db, recorded)
        recorded, extra = observe_first(db, recorded)
        extra = [*rebuilt, *extra]
    if hooks.on_recorded is not None:
        hooks.on_recorded(recorded)
    if keys is None:
        keys = desired.ApplyResult(list(recorded.changes)).to_reconcile
    keys = list(dict.fromkeys([*extra, *keys]))  # a repaired cell before its snapshots
    if names is None:
        names = {(c.kind, c.object_id): c.name for c in recorded.changes if c.object_id}
    converged = converge(db, keys, trigger=trigger, options=options, hooks=hooks, names=names,
                         condition=condition, until_op=until_op)
    return Report(recorded, converged)


def converge(db: Database, keys: list[Key], *, trigger: str, options: Options,
             hooks: Hooks = NO_HOOKS, names: Mapping[Key, str] | None = None,
             condition: str = "Ready", until_op: str | None = None) -> Converged:
    """Converge `keys` inline, or (a daemon holds the lease) approve and wait for the daemon."""
    holder = lease.current_holder(db.state_dir)
    if holder is not None:
        if options.approve:
            approve_gates(db, keys)
        return _through_daemon(db, keys, holder, names or {}, options=options,
                               condition=condition, until_op=until_op)
    from devcell.store import operations

    if not keys and not operations.has_running(db.conn) and not _retention_due(db):
        return Converged()
    return _inline(db, keys, names or {}, trigger=trigger, options=options, hooks=hooks)


def _retention_due(db: Database) -> bool:
    """Whether an expired snapshot or a cell over its retain waits: an inline converge with
    nothing else to do still applies them."""
    from datetime import UTC, datetime

    from devcell.controllers import retention

    return bool(retention.due_keys(db.conn, datetime.now(UTC)))


def judge_builds(db: Database, recorded: Recorded, *, record: bool = True
                 ) -> tuple[Recorded, list[Key]]:
    """The cells recorded unchanged that are built from a Dockerfile whose inputs changed
    (reconciler.build_inputs) are reported `rebuilt` and converged; one that cannot be judged
    is converged too (its error is then reported, or it settles). Returns the changes as
    reported and the extra keys to converge. record=False (a dry run): only say so."""
    asked = [c.object_id for c in recorded.changes if c.kind == "Cell" and c.object_id
             and not c.needs_reconcile and c.outcome not in ("deleted", "pruned")]
    if not asked:  # a snapshot's verb asks no cell
        return recorded, []
    from devcell.store import built_cells

    built = built_cells.among(db.conn, asked)
    if not built:  # one query; the judge and what it imports only for a built cell
        return recorded, []
    from devcell.reconciler import build_inputs

    found = build_inputs.judge(db, built)
    if record:
        build_inputs.record(db, found.moved)
    return _to_reconcile(recorded, {*found.moved, *found.unknown}, set(found.moved), "rebuilt")


def observe_first(db: Database, recorded: Recorded) -> tuple[Recorded, list[Key]]:
    """Observe the runtimes of the cells a verb acts on before trusting their recorded phase.

    A cell recorded unchanged and settled whose runtime contradicts it (stopped, paused or
    removed behind DevCell's back) is reported `repaired` and reconciled; one whose backend
    cannot be asked is reconciled too (its error is then reported, not "unchanged"). A
    snapshot's cell is observed as well: it is the cell's runtime that gets checkpointed.
    Returns the changes as reported and the extra keys to converge.
    """
    from devcell.reconciler import observe
    from devcell.store import objects

    recorded = _drift_found_earlier(db, recorded)
    cells = [c.object_id for c in recorded.changes if c.kind == "Cell" and c.object_id
             and not c.needs_reconcile and c.outcome not in ("deleted", "pruned")]
    snapshots = [c.object_id for c in recorded.changes if c.kind == "Snapshot" and c.object_id
                 and c.needs_reconcile]
    owners = objects.owners(db.conn, [("Snapshot", s) for s in snapshots]) if snapshots else {}
    cells += [cell_id for _, cell_id in owners.values()]
    if not cells:
        return recorded, []
    found = observe.observe_and_record(db, cells)
    return _to_reconcile(recorded, set(found.in_doubt), set(found.drifted), "repaired")


def _to_reconcile(recorded: Recorded, doubt: set[str], changed: set[str], word: str
                  ) -> tuple[Recorded, list[Key]]:
    """The cells in `doubt` not yet to be reconciled marked so, those `changed` reported with
    `word` (what the reconcile will do); and their keys, to converge."""
    if not doubt:
        return recorded, []
    changes = tuple(
        c.replace(needs_reconcile=True,
                            outcome=word if c.object_id in changed else c.outcome)
        if c.kind == "Cell" and c.object_id in doubt and not c.needs_reconcile else c
        for c in recorded.changes)
    return recorded.replace(changes=changes), [("Cell", c) for c in doubt]


def _drift_found_earlier(db: Database, recorded: Recorded) -> Recorded:
    """An unchanged cell whose drift an earlier command recorded (exec, logs and wait observe
    and record, but do not repair; a verb not waiting for the daemon found its build's inputs
    changed) is reconciled already, as Pending: report it `repaired` (or `rebuilt`), not
    `unchanged`, since that is what the reconcile then does."""
    from devcell.store import objects

    pending = {c.object_id for c in recorded.changes if c.kind == "Cell" and c.needs_reconcile
               and c.outcome == "unchanged"}
    if not pending:
        return recorded
    drifted = {object_id for _, object_id in objects.drifted_keys(db.conn)} & pending
    if not drifted:
        return recorded
    rebuilding = {object_id for object_id in drifted
                  if (record := objects.get(db.conn, "Cell", object_id)) is not None
                  and record.status.get("rebuild")}  # recorded by build_inputs.record
    return recorded.replace(changes=tuple(
        c.replace(outcome="rebuilt" if c.object_id in rebuilding else "repaired")
        if c.kind == "Cell" and c.object_id in drifted else c for c in recorded.changes))


def approve_gates(db: Database, keys: Iterable[Key]) -> list[str]:
    """Approve the gates already waiting on these objects (`--approve` with a daemon running);
    the daemon resumes them. Returns the operations approved."""
    from devcell.store import operations

    approved = []
    with db.write() as conn:
        for _, object_id in keys:
            op = operations.suspended_for(conn, object_id)
            if op is not None and op["reason"] == "AwaitingApproval":
                operations.approve(conn, op["id"], APPROVED_BY)
                approved.append(str(op["id"]))
    return approved


def _inline(db: Database, keys: list[Key], names: Mapping[Key, str], *, trigger: str,
            options: Options, hooks: Hooks) -> Converged:
    from devcell.controllers.context import Context
    from devcell.reconciler import converge as engine

    ctx = Context(db, trigger=trigger, run_store_kind=options.run_store, approve=options.approve)
    around = hooks.inline() if hooks.inline is not None else nullcontext()
    try:
        with around:
            report = engine.converge(ctx, keys, timeout=options.timeout, workers=options.workers)
    finally:
        ctx.close()
    from devcell.store import observations

    # A settled cell's phase was just observed by its reconcile (or made so by its operation).
    observations.confirm(db.state_dir, [oid for kind, oid in report.settled if kind == "Cell"])
    results = [_settled(db, names, key) for key in report.settled]
    pending: list[ObjectResult] = []
    for key, message in {**report.failed, **report.waiting}.items():
        status = Status.WAITING if key in report.waiting else Status.FAILED
        unasked = key in report.due and key not in keys
        (pending if unasked else results).append(_result(db, names, key, status, message))
    return Converged(tuple(results), waited=True, recovered=tuple(report.recovered),
                     expired=_expired(db, report.settled), retention_pending=tuple(pending))


def _settled(db: Database, names: Mapping[Key, str], key: Key) -> ObjectResult:
    """A settled object's result; a cell that runs but is held not Ready by a failed step of
    its own (its dotfiles' install script, its postCreate hooks) is reported failed, with
    why: running, yet not what was asked."""
    if key[0] == "Cell":
        from devcell.controllers import dotfiles, post_create
        from devcell.store import objects

        record = objects.get(db.conn, "Cell", key[1])
        ready = record.condition("Ready") if record is not None else None
        if ready and ready.get("status") == "False" and ready.get("reason") in (
                dotfiles.FAILED, post_create.FAILED):
            return _result(db, names, key, Status.FAILED, str(ready.get("message") or ""))
    return _result(db, names, key, Status.SETTLED)


def _expired(db: Database, keys: list[Key]) -> tuple[str, ...]:
    """Names of the snapshots among `keys` that are now expired (and gone)."""
    from devcell.store import objects

    out = []
    for kind, object_id in keys:
        if kind == "Snapshot":
            record = objects.get(db.conn, kind, object_id, include_deleted=True)
            if record is not None and record.phase == objects.Phase.EXPIRED:
                out.append(record.name)
    return tuple(out)


def _through_daemon(db: Database, keys: list[Key], holder: lease.Holder,
                    names: Mapping[Key, str], *, options: Options, condition: str,
                    until_op: str | None) -> Converged:
    """A daemon holds the lease: it reconciles; this call only waits for what it records."""
    from devcell.reconciler import waiting
    from devcell.store import operations

    if not options.wait or (until_op is None and not keys):
        return Converged(holder=holder)
    if until_op is not None:
        op = waiting.wait_for_operation(db, until_op, timeout=options.timeout)
        if op is None:
            result = OperationResult(until_op, Status.WAITING,
                                     f"did not finish within {options.timeout:g}s")
        elif op["status"] == operations.OpStatus.FAILED:
            result = OperationResult(until_op, Status.FAILED, str(op["message"]))
        else:
            result = OperationResult(until_op, Status.SETTLED)
        return Converged(holder=holder, waited=True, operation=result)
    unmet = waiting.wait_until(db, keys, timeout=options.timeout, condition=condition)
    results = [_result(db, names, key, Status.SETTLED)
               for key in dict.fromkeys(keys) if key not in unmet]
    for key, why in unmet.items():
        status = Status.WAITING if why.timed_out else Status.FAILED
        results.append(_result(db, names, key, status, why.message))
    return Converged(tuple(results), holder=holder, waited=True)


def _result(db: Database, names: Mapping[Key, str], key: Key, status: Status,
            message: str = "") -> ObjectResult:
    kind, object_id = key
    name = names.get(key)
    if name is None:  # an object the call did not record (one a crash left interrupted)
        from devcell.store import objects

        record = objects.get(db.conn, kind, object_id, include_deleted=True)
        name = record.name if record else object_id
    gate = None
    if status is not Status.SETTLED:
        from devcell.store import operations

        op = operations.suspended_for(db.conn, object_id)
        if op is not None and op["reason"] == "AwaitingApproval":
            gate = str(op["id"])
    return ObjectResult(kind, name, object_id, status, message, awaiting_approval=gate)
