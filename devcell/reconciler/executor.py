"""Run a Plan step by step, recording each step in an Operation.

A step is committed as Running before its backend call and as Succeeded/Failed after it (in
the same transaction that starts the next step), so a crash always leaves the in-flight step
visible and no step is ever silently replayed.

An operation can also stop cleanly at a step boundary (a graceful shutdown, or an approval
gate): its run snapshot (plan, completed steps with their outputs, the next step, the resume
schema) is saved first, then the operation is marked Suspended. Resuming skips the completed
steps and hands their recorded outputs back to the controller.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from devcell import errors, failpoints
from devcell.backends.base import Outputs
from devcell.controllers import Controller
from devcell.controllers.context import Context
from devcell.controllers.plan import Plan, When
from devcell.errors import DevCellError
from devcell.log import logger
from devcell.manifests.model import digest
from devcell.records import MutableRecord, Record, field
from devcell.store import events, objects, operations, storage_lock

Pending = list[Callable[[sqlite3.Connection], None]]


class Resume(Record):
    """Continue a suspended operation: its id, its run snapshot, and any approval input."""

    op_id: str
    run_snapshot: Any  # devcell.runs.RunSnapshot (imported lazily: runs is not needed otherwise)
    approval: dict[str, Any] | None = None


class Result(MutableRecord):
    """What running a plan gave: its operation, and how it ended."""

    op_id: str
    error: str | None = None
    cause: BaseException | None = None
    """The exception of the first failed step, its class intact (retry or terminal)."""
    suspended: str | None = None
    """Why the operation is waiting (AwaitingApproval, Shutdown), when it is."""
    ran: list[str] = field(default_factory=list)


def _should_run(when: When, failed: bool) -> bool:
    if when is When.ALWAYS:
        return True
    return failed if when is When.FAILURE else not failed


def step_id(idx: int, name: str) -> str:
    return f"{idx}:{name}"


def execute(ctx: Context, controller: Controller, plan: Plan, *, resume: Resume | None = None
            ) -> Result:
    """Run `plan` (or the rest of a suspended one) and record it, holding the storage lock
    shared (store/storage_lock.py): what its steps place is recorded before a collection can
    judge it."""
    with storage_lock.creating(ctx.db.state_dir), _Interrupts() as interrupts:
        result = _execute(ctx, controller, plan, resume=resume, interrupts=interrupts)
        if interrupts.held is not None:  # arrived while the operation was being recorded
            raise interrupts.held
        return result


class _Interrupts:
    """SIGINT and SIGTERM while an operation runs (the main thread only: no signal reaches a
    worker). Inside a step's backend call the signal is raised there, as before (a long
    checkpoint stops); anywhere else in the loop (between steps, while a step or the operation
    is recorded, while a compensation runs) it is held and taken at the next step's call, or
    raised once the operation is recorded. So no signal skips the plan's compensations or
    leaves a step done and not written down."""

    def __init__(self) -> None:
        self.held: KeyboardInterrupt | None = None
        self.armed = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous = signal.getsignal(signum)
                if callable(previous):  # a handler that raises (Ctrl-C, the CLI's SIGTERM)
                    self._previous[signum] = previous
                    signal.signal(signum, self._arrived)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def _arrived(self, signum: int, frame: Any) -> None:
        try:
            self._previous[signum](signum, frame)
        except KeyboardInterrupt as exc:
            if self.armed:
                raise
            self.held = self.held or exc

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """A step's backend call, where a signal interrupts; one held since is taken here."""
        if self.held is not None:
            held, self.held = self.held, None
            raise held
        self.armed = True
        try:
            yield
        finally:
            self.armed = False


def _execute(ctx: Context, controller: Controller, plan: Plan, *, resume: Resume | None,
             interrupts: _Interrupts) -> Result:
    record = plan.object
    done: list[tuple[int, str, Outputs]] = []
    start = 0
    gate_open = plan.gate is None
    if resume is not None:
        op_id = resume.op_id
        completed = {s.step_id: dict(s.outputs) for s in resume.run_snapshot.completed_steps}
        for idx, step in enumerate(plan.steps):
            recorded = completed.get(step_id(idx, step.name))
            if recorded is not None:
                controller.note_outputs(plan, step, recorded)
                done.append((idx, step.name, recorded))
        start = next(i for i, s in enumerate(plan.steps)
                     if step_id(i, s.name) == resume.run_snapshot.suspended_step_id)
        gate_open = gate_open or resume.approval is not None or resume.run_snapshot.resume_schema is None
        pending: Pending = [lambda c: operations.resumed(c, op_id, approval=resume.approval)]
    else:
        op_id = operations.new_operation_id()
        pending = [
            lambda c: operations.create(
                c, op_id=op_id, object_kind=record.kind, object_id=record.id,
                object_name=record.name, action=plan.action, trigger=ctx.trigger,
                generation=record.generation, step_names=plan.step_names,
            )
        ]
    log = logger.bind(kind=record.kind, name=record.name, op=op_id)
    log.info("{} {}: {}{}", plan.action, record.name, " -> ".join(plan.step_names) or "(no steps)",
             " (resumed)" if resume else "")
    result = Result(op_id)
    ran = result.ran
    plan.ran = ran
    error: str | None = None
    cause: BaseException | None = None
    failed_step: str | None = None
    failure_reason = "StepFailed"
    interrupted: KeyboardInterrupt | None = None
    stopped = False
    last_hold = False
    for idx, step in enumerate(plan.steps):
        if idx < start:
            continue
        if plan.gate is not None and plan.gate.before == idx and not gate_open:
            if ctx.approve:
                gate_open = True
                pending.append(lambda c: events.record(
                    c, kind=record.kind, object_id=record.id, name=record.name,
                    reason="Approved", message="approved up front (--approve)", op_id=op_id))
            else:
                _suspend(ctx, controller, plan, op_id, pending, done, idx, "AwaitingApproval",
                         f"awaiting approval: {plan.gate.reason}", plan.gate.schema)
                result.suspended = "AwaitingApproval"
                return result
        stopping = ctx.stopping is not None and ctx.stopping.is_set()
        if (ran or idx > start) and stopping and not stopped and error is None and not last_hold:
            if ctx.suspend_on_stop:
                _suspend(ctx, controller, plan, op_id, pending, done, idx, "Shutdown",
                         f"suspended after step {plan.steps[idx - 1].name} by a controller "
                         "shutdown; the next start resumes it", None)
                result.suspended = "Shutdown"
                return result
            stopped = True  # no run store: only compensations (resume) still run
            error = (f"controller shut down after step {plan.steps[idx - 1].name}; "
                     "the next start plans afresh")
            failed_step = plan.steps[idx - 1].name
        if not _should_run(step.when, error is not None):
            continue
        ran.append(step.name)
        try:
            with ctx.db.write() as conn:
                for write in pending:
                    write(conn)
                operations.start_step(conn, op_id, idx, step.name)
        except errors.StateUnusable:
            ran.pop()
            _compensate(ctx, controller, plan, idx, log)
            raise
        pending = []
        started = time.perf_counter()
        outputs: Outputs = {}
        step_error: str | None = None
        raised: BaseException | None = None
        ctx.current_op = op_id
        try:
            with _signals_deferred() if interrupted is not None else interrupts.call():
                failpoints.hit(f"step.{step.name}.before-call")
                outputs = controller.run_step(ctx, plan, step)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (the CLI raises it there)
            # The step is recorded as interrupted and the plan's compensations (a resume
            # after a quiesce, a start after a stop) still run, with further signals held
            # until they end: an interrupt never leaves a cell frozen or stopped. A
            # compensation the interrupt landed on runs all the same.
            interrupted = interrupted or exc
            if error is None:
                error = f"interrupted ({_signal_name(exc)}) at step {step.name}"
                failure_reason, failed_step = "Interrupted", step.name
            if step.when is When.SUCCESS:
                step_error = f"interrupted ({_signal_name(exc)})"
            else:
                outputs, step_error, raised = _compensate_now(ctx, controller, plan, step, log)
        except DevCellError as exc:
            step_error, raised = str(exc), exc
            if error is None:
                failure_reason = errors.condition_reason(exc)
        except Exception as exc:  # a backend bug must not lose the record of the step
            log.exception("step {} raised", step.name)
            step_error, raised = f"unexpected {type(exc).__name__}: {exc}", exc
        elapsed = (time.perf_counter() - started) * 1000
        failpoints.hit(f"step.{step.name}.after-call")
        log.debug("step {} {} in {:.1f} ms", step.name, "failed" if step_error else "ok", elapsed)
        last_hold = step.hold and step_error is None

        def record_step(conn: sqlite3.Connection, idx: int = idx, step=step, outputs=outputs,
                        step_error=step_error, elapsed=elapsed) -> None:
            operations.finish_step(conn, op_id, idx, ok=step_error is None, duration_ms=elapsed,
                                   outputs=outputs, error=step_error)
            if step_error is None:
                controller.after_step(conn, plan, step, outputs)

        pending.append(record_step)
        if step_error is None:
            done.append((idx, step.name, outputs))
        elif error is None:
            error = f"step {step.name} failed: {step_error}"
            failed_step, cause = step.name, raised
    # If this record fails, every step the plan meant to run has run, compensations included.
    _finish(ctx, controller, plan, op_id, pending, error=error,
            reason="Shutdown" if stopped and error is not None else failure_reason,
            failed_step=failed_step)
    if resume is not None:
        ctx.run_store().delete(op_id)  # finished: its snapshot is spent
    if error:
        log.warning("{} {} failed: {}", plan.action, record.name, error)
    result.error, result.cause = error, cause
    if interrupted is not None:
        raise interrupted  # recorded and compensated: the caller stops as asked
    return result


def _compensate_now(ctx: Context, controller: Controller, plan: Plan, step: Any, log: Any
                    ) -> tuple[Outputs, str | None, BaseException | None]:
    """A compensating step an interrupt landed on, run with further signals held."""
    try:
        with _signals_deferred():
            return controller.run_step(ctx, plan, step), None, None
    except DevCellError as exc:
        return {}, str(exc), exc
    except Exception as exc:  # a backend bug must not lose the record of the step
        log.exception("step {} raised", step.name)
        return {}, f"unexpected {type(exc).__name__}: {exc}", exc


def _signal_name(exc: KeyboardInterrupt) -> str:
    return str(getattr(exc, "signal_name", "") or "Ctrl-C")


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held (noted, not raised) while compensating steps run after an
    interrupt; in a worker thread (the daemon's, converge's pool) no signal arrives anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: seen.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _finish(ctx: Context, controller: Controller, plan: Plan, op_id: str, pending: Pending, *,
            error: str | None, reason: str, failed_step: str | None) -> None:
    with ctx.db.write() as conn:
        for write in pending:
            write(conn)
        if error is None:
            operations.finish(conn, op_id, status=operations.OpStatus.SUCCEEDED)
        else:
            operations.finish(conn, op_id, status=operations.OpStatus.FAILED,
                              reason=reason, message=error, failed_step=failed_step)
        controller.finish(conn, plan, error=error, reason=reason)
        failpoints.hit("op.before-commit")


def _compensate(ctx: Context, controller: Controller, plan: Plan, from_idx: int,
                log: Any) -> None:
    """The state database cannot record (disk full, read-only): run the compensating steps
    the plan holds for a failure (a `resume` after `quiesce`) without recording them, so a
    cell is never left frozen because its operation could not be written down. The
    operation stays Running in the database; the next command's recovery fails it as
    Interrupted and the next reconcile plans from what it observes."""
    if not plan.ran:
        return
    for step in plan.steps[from_idx:]:
        if step.when is When.SUCCESS:
            continue
        try:
            controller.run_step(ctx, plan, step)
            log.warning("step {} run without being recorded: the state database cannot record",
                        step.name)
        except Exception as exc:  # the database error is the one to report
            log.warning("compensating step {} failed too: {}", step.name, exc)


def _suspend(ctx: Context, controller: Controller, plan: Plan, op_id: str, pending: Pending,
             done: list[tuple[int, str, Outputs]], next_idx: int, reason: str, message: str,
             schema: dict[str, Any] | None) -> None:
    """Save the run snapshot, then mark the operation Suspended (in that order: a crash in
    between leaves a snapshot for a Running operation, which recovery fails as Interrupted)."""
    from devcell import runs

    record = plan.object
    snapshot = runs.RunSnapshot(
        run_id=op_id, plan_id=digest(plan.to_dict()), plan=plan.to_dict(),
        completed_steps=tuple(runs.CompletedStep(step_id=step_id(i, name), outputs=out)
                              for i, name, out in done),
        suspended_step_id=step_id(next_idx, plan.steps[next_idx].name),
        resume_schema=schema, suspended_at=runs.utc_timestamp())
    ctx.run_store().save(snapshot)
    failpoints.hit("op.suspend.after-save")
    with ctx.db.write() as conn:
        for write in pending:
            write(conn)
        if not operations.exists(conn, op_id):
            operations.create(conn, op_id=op_id, object_kind=record.kind, object_id=record.id,
                              object_name=record.name, action=plan.action, trigger=ctx.trigger,
                              generation=record.generation, step_names=plan.step_names)
        operations.suspend(conn, op_id, reason=reason, message=message,
                           next_step=plan.steps[next_idx].name)
        fresh = objects.get(conn, record.kind, record.id)
        if fresh is not None:
            status = dict(fresh.status)
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", reason,
                f"operation {op_id} {message}")
            objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                                 observed_generation=fresh.observed_generation)
        events.record(conn, kind=record.kind, object_id=record.id, name=record.name,
                      reason="OperationSuspended", message=f"{plan.action} {op_id} {message}",
                      type="Warning" if reason == "AwaitingApproval" else "Normal", op_id=op_id)
    logger.bind(kind=record.kind, name=record.name, op=op_id).info("suspended: {}", message)
