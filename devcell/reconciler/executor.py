"""Run a Plan step by step, recording each step in an Operation.

A step is committed as Running before its backend call and as Succeeded/Failed after it (in
the same transaction that starts the next step), so a crash always leaves the in-flight step
visible and no step is ever silently replayed.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from loguru import logger

from devcell import failpoints
from devcell.backends.base import Outputs
from devcell.controllers import Controller
from devcell.controllers.plan import Plan, When
from devcell.errors import DevCellError
from devcell.reconciler.context import Context
from devcell.store import operations

Pending = list[Callable[[sqlite3.Connection], None]]


def _should_run(when: When, failed: bool) -> bool:
    if when is When.ALWAYS:
        return True
    return failed if when is When.FAILURE else not failed


def execute(ctx: Context, controller: Controller, plan: Plan) -> tuple[str, str | None]:
    """Run `plan`; return (operation id, error or None)."""
    record = plan.object
    op_id = operations.new_operation_id()
    pending: Pending = [
        lambda c: operations.create(
            c, op_id=op_id, object_kind=record.kind, object_id=record.id,
            object_name=record.name, action=plan.action, trigger=ctx.trigger,
            generation=record.generation, step_names=plan.step_names,
        )
    ]
    log = logger.bind(kind=record.kind, name=record.name, op=op_id)
    log.info("{} {}: {}", plan.action, record.name, " -> ".join(plan.step_names) or "(no steps)")
    error: str | None = None
    failed_step: str | None = None
    ran: list[str] = []
    plan.context["ran"] = ran
    stopped = False
    for idx, step in enumerate(plan.steps):
        if ran and not stopped and ctx.stopping is not None and ctx.stopping.is_set():
            stopped = True  # shutting down: only compensations (resume) still run
            error = error or (f"controller shut down after step {ran[-1]}; "
                              "the next start plans afresh")
            failed_step = failed_step or ran[-1]
        if not _should_run(step.when, error is not None):
            continue
        ran.append(step.name)
        with ctx.db.write() as conn:
            for write in pending:
                write(conn)
            operations.start_step(conn, op_id, idx, step.name)
        failpoints.hit(f"step.{step.name}.before-call")
        pending = []
        started = time.perf_counter()
        outputs: Outputs = {}
        step_error: str | None = None
        try:
            outputs = controller.run_step(ctx, plan, step)
        except DevCellError as exc:
            step_error = str(exc)
        except Exception as exc:  # a backend bug must not lose the record of the step
            log.exception("step {} raised", step.name)
            step_error = f"unexpected {type(exc).__name__}: {exc}"
        elapsed = (time.perf_counter() - started) * 1000
        failpoints.hit(f"step.{step.name}.after-call")
        log.debug("step {} {} in {:.1f} ms", step.name, "failed" if step_error else "ok", elapsed)

        def record_step(conn: sqlite3.Connection, idx: int = idx, step=step, outputs=outputs,
                        step_error=step_error, elapsed=elapsed) -> None:
            operations.finish_step(conn, op_id, idx, ok=step_error is None, duration_ms=elapsed,
                                   outputs=outputs, error=step_error)
            if step_error is None:
                controller.after_step(conn, plan, step, outputs)

        pending.append(record_step)
        if step_error is not None and error is None:
            error = f"step {step.name} failed: {step_error}"
            failed_step = step.name
    with ctx.db.write() as conn:
        for write in pending:
            write(conn)
        if error is None:
            operations.finish(conn, op_id, status=operations.OpStatus.SUCCEEDED)
        else:
            operations.finish(conn, op_id, status=operations.OpStatus.FAILED,
                              reason="Shutdown" if stopped else "StepFailed", message=error,
                              failed_step=failed_step)
        controller.finish(conn, plan, error=error)
        failpoints.hit("op.before-commit")
    if error:
        log.warning("{} {} failed: {}", plan.action, record.name, error)
    return op_id, error
