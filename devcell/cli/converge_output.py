"""Run inline convergence for the objects a command touched and report it kubectl-style."""

from __future__ import annotations

import sys

from devcell.store.db import Database


def _wait_for_daemon(db: Database, keys: list[tuple[str, str]], holder: str, *,
                     timeout: float, wait: bool) -> int:
    """A daemon holds the lease: it reconciles; we only wait for what it records."""
    if not wait or not keys:
        return 0
    from devcell.reconciler import waiting
    from devcell.store import objects

    failures = waiting.wait_for(db, keys, timeout=timeout)
    for (kind, object_id), message in failures.items():
        record = objects.get(db.conn, kind, object_id, include_deleted=True)
        name = record.name if record else object_id
        sys.stderr.write(f"error: {kind.lower()}/{name}: {message} (reconciled by the controller, "
                         f"{holder})\n")
    return 1 if failures else 0


def converge_and_report(db: Database, keys: list[tuple[str, str]], *, verbose: int,
                        timeout: float, trigger: str, wait: bool = True) -> int:
    from devcell.reconciler import lease
    from devcell.store import operations

    holder = lease.current_holder(db.state_dir)
    if holder is not None:
        return _wait_for_daemon(db, keys, holder.describe(), timeout=timeout, wait=wait)
    if not keys and not operations.has_running(db.conn):
        return 0
    from devcell.cli import logs
    from devcell.reconciler import converge
    from devcell.reconciler.context import Context
    from devcell.store import objects

    logs.configure(verbose)
    ctx = Context(db, trigger=trigger)
    try:
        report = converge.converge(ctx, keys, timeout=timeout)
    finally:
        ctx.close()
    if report.ok:
        return 0
    for (kind, object_id), message in {**report.failed, **report.waiting}.items():
        record = objects.get(db.conn, kind, object_id, include_deleted=True)
        name = record.name if record else object_id
        sys.stderr.write(f"error: {kind.lower()}/{name}: {message}\n")
    return 1
