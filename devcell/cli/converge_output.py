"""Run inline convergence for the objects a command touched and report it kubectl-style."""

from __future__ import annotations

import sys

from devcell.store.db import Database


def _wait_for_op(db: Database, op_id: str, timeout: float) -> int:
    import time

    from devcell.store import operations

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op = operations.get(db.conn, op_id)
        if op is not None and op["status"] in (operations.OpStatus.SUCCEEDED,
                                               operations.OpStatus.FAILED):
            if op["status"] == operations.OpStatus.FAILED:
                sys.stderr.write(f"error: operation {op_id} failed: {op['message']}\n")
                return 1
            return 0
        time.sleep(0.02)
    sys.stderr.write(f"error: operation {op_id} did not finish within {timeout:g}s\n")
    return 1


def _wait_for_daemon(db: Database, keys: list[tuple[str, str]], holder: str, *,
                     timeout: float, wait: bool, condition: str, until_op: str | None) -> int:
    """A daemon holds the lease: it reconciles; we only wait for what it records."""
    if until_op is not None:
        return _wait_for_op(db, until_op, timeout) if wait else 0
    if not wait or not keys:
        return 0
    from devcell.reconciler import waiting
    from devcell.store import objects

    failures = waiting.wait_for(db, keys, timeout=timeout, condition=condition)
    for (kind, object_id), message in failures.items():
        record = objects.get(db.conn, kind, object_id, include_deleted=True)
        name = record.name if record else object_id
        sys.stderr.write(f"error: {kind.lower()}/{name}: {message} (reconciled by the controller, "
                         f"{holder})\n")
    return 1 if failures else 0


def converge_and_report(db: Database, keys: list[tuple[str, str]], *, verbose: int,
                        timeout: float, trigger: str, wait: bool = True,
                        run_store: str | None = None, approve: bool = False,
                        condition: str = "Ready", until_op: str | None = None,
                        workers: int | None = None) -> int:
    """Converge inline, or (with a daemon running) wait for it. condition: Ready, or delete."""
    from devcell.reconciler import lease
    from devcell.store import operations

    holder = lease.current_holder(db.state_dir)
    if holder is not None:
        if approve:
            _approve_gates(db, keys)
        return _wait_for_daemon(db, keys, holder.describe(), timeout=timeout, wait=wait,
                                condition=condition, until_op=until_op)
    if not keys and not operations.has_running(db.conn):
        return 0
    from devcell.cli import logs
    from devcell.controllers.context import Context
    from devcell.reconciler import converge
    from devcell.store import objects

    logs.configure(verbose)
    ctx = Context(db, trigger=trigger, run_store_kind=run_store, approve=approve)
    from devcell import progress

    # Long workspace copies (checkpoint, fork, sleep) show a bar, but only on a terminal.
    previous = progress.install(progress.TerminalBars() if sys.stderr.isatty() else None)
    try:
        report = converge.converge(ctx, keys, timeout=timeout, workers=workers)
    finally:
        progress.install(previous)
        ctx.close()
    if report.ok:
        return 0
    for (kind, object_id), message in {**report.failed, **report.waiting}.items():
        record = objects.get(db.conn, kind, object_id, include_deleted=True)
        name = record.name if record else object_id
        sys.stderr.write(f"error: {kind.lower()}/{name}: {message}\n")
    return 1


def _approve_gates(db: Database, keys: list[tuple[str, str]]) -> None:
    """--approve with a daemon running: approve the gates already waiting on these objects."""
    from devcell.store import operations

    with db.write() as conn:
        for _, object_id in keys:
            op = operations.suspended_for(conn, object_id)
            if op is not None and op["reason"] == "AwaitingApproval":
                operations.approve(conn, op["id"], {"approvedBy": "--approve"})
