"""Inline convergence: reconcile a set of objects until each is settled, failed or stuck.

Used by `devcell apply` when no daemon holds the state directory. Rounds repeat while any
object made progress, so a fork waits for its snapshot, which waits for its cell, all within
one apply. A file lock serialises inline reconcilers on the same state directory.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from devcell.controllers import Controller
from devcell.controllers.cell import CellController
from devcell.controllers.plan import Plan, Settled, Wait
from devcell.controllers.snapshot import SnapshotController
from devcell.reconciler import executor, recovery, suspended
from devcell.reconciler.context import Context
from devcell.store import operations

Key = tuple[str, str]
"""(kind, object id)"""

MAX_ROUNDS = 100_000  # a safety net only: rounds continue while anything progresses


def controllers() -> dict[str, Controller]:
    return {"Cell": CellController(), "Snapshot": SnapshotController()}


@dataclass
class Report:
    settled: list[Key] = field(default_factory=list)
    failed: dict[Key, str] = field(default_factory=dict)
    waiting: dict[Key, str] = field(default_factory=dict)
    operations: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    """Operations found interrupted by a dead process (marked Failed, not replayed)."""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.waiting


@contextmanager
def reconcile_lock(ctx: Context) -> Iterator[None]:
    path = ctx.db.state_dir / "reconcile.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def converge(ctx: Context, keys: list[Key], *, timeout: float = 300.0) -> Report:
    report = Report()
    kinds = controllers()
    deadline = time.monotonic() + timeout
    pending = list(dict.fromkeys(keys))
    with reconcile_lock(ctx):
        found = recovery.recover_interrupted(ctx.db)
        report.recovered = sorted({op_id for op_id, _, _ in found})
        pending.extend(k for k in dict.fromkeys((kind, oid) for _, kind, oid in found)
                       if k not in pending)
        for _ in range(MAX_ROUNDS):
            if not pending or time.monotonic() > deadline:
                break
            next_round: list[Key] = []
            progressed = False
            for key in pending:
                kind, object_id = key
                controller = kinds[kind]
                held = suspended.handle(ctx, controller, object_id)
                if isinstance(held, Wait):  # awaiting approval: nothing to do inline
                    report.waiting[key] = held.message
                    continue
                if held is not None:
                    outcome: executor.Result | None = held
                else:
                    decision = controller.decide(ctx, object_id)
                    outcome = (executor.execute(ctx, controller, decision)
                               if isinstance(decision, Plan) else None)
                if outcome is not None:
                    report.operations.append(outcome.op_id)
                    progressed = True
                    if outcome.suspended:
                        row = operations.get(ctx.db.conn, outcome.op_id)
                        message = row["message"] if row else outcome.suspended
                        report.waiting[key] = (
                            f"operation {outcome.op_id} {message}; approve it with `devcell op "
                            f"resume {outcome.op_id} --input ...` (or pass --approve)")
                    elif outcome.error:
                        report.failed[key] = outcome.error
                    else:
                        next_round.append(key)  # confirm on the next round that it settled
                    continue
                if isinstance(decision, Wait):
                    report.waiting[key] = decision.message
                    next_round.append(key)
                elif isinstance(decision, Settled):
                    report.waiting.pop(key, None)
                    if decision.failed:
                        report.failed[key] = decision.failed
                    else:
                        report.settled.append(key)
            if not progressed:
                pending = [k for k in next_round if k in report.waiting]
                break
            pending = next_round
            for key in pending:
                report.waiting.pop(key, None)
        for key in pending:
            if key not in report.waiting and key not in report.failed:
                report.waiting[key] = "did not settle within the time allowed"
    return report
