"""Inline convergence: reconcile a set of objects until each is settled, failed or stuck.

Used by `devcell apply` when no daemon holds the state directory. Rounds repeat while any
object made progress, so a fork waits for its snapshot, which waits for its cell, all within
one apply. A file lock serialises inline reconcilers on the same state directory.

Within a round the objects are independent (each decides from recorded and observed state
only), so when their backends wait on an engine (Capabilities.parallel > 1) a round runs on a
thread pool, one Context (connection, backend clients) per worker. The fake backend is CPU
and SQLite bound: it keeps the single-threaded path, which is faster there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from devcell import backends
from devcell.controllers import retention
from devcell.controllers.context import Context
from devcell.log import logger
from devcell.reconciler import reconcile, recovery
from devcell.reconciler import reconcile_lock as reconcile_lock_file
from devcell.records import MutableRecord, field
from devcell.store import objects
from devcell.store.db import Database

if TYPE_CHECKING:
    from concurrent.futures import Future

Key = reconcile.Key

MAX_ROUNDS = 100_000  # a safety net only: rounds continue while anything progresses


class Report(MutableRecord):
    """What a converge did, object by object, and the operations it ran."""

    settled: list[Key] = field(default_factory=list)
    failed: dict[Key, str] = field(default_factory=dict)
    waiting: dict[Key, str] = field(default_factory=dict)
    operations: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    """Operations found interrupted by a dead process (marked Failed, not replayed)."""
    due: set[Key] = field(default_factory=set)
    """Keys this converge took up because retention had work due (not asked for)."""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.waiting


@contextmanager
def reconcile_lock(ctx: Context) -> Iterator[None]:
    with reconcile_lock_file.holding(ctx.db.state_dir):
        yield


DAEMON_STARTED = ("a daemon started meanwhile and converges it (devcell get, or devcell wait, "
                  "to follow it)")
"""Why an inline converge that found a daemon's lease once it held the lock did nothing."""


MAX_STEPS_PER_TURN = 8
"""Operations one object may run back to back in a turn before it yields to the next round."""


class Turn(MutableRecord):
    """One object's turn in a round: the operations it ran, how it ended."""

    operations: list[str] = field(default_factory=list)
    outcome: reconcile.Outcome | None = None


def _turn(ctx: Context, key: Key, deadline: float) -> Turn:
    """One object's turn: reconcile it back to back until it settles, waits or fails.

    Confirming right after an operation (rather than in the next round) keeps a worker busy
    instead of idle at the round's barrier while slower objects finish.
    """
    turn = Turn()
    for _ in range(MAX_STEPS_PER_TURN):
        outcome = reconcile.reconcile(ctx, key)
        turn.outcome = outcome
        if outcome.operation is not None:
            turn.operations.append(outcome.operation)
        confirm = outcome.result is reconcile.Result.REQUEUE and outcome.operation is not None
        if not confirm or time.monotonic() > deadline:
            return turn
    return turn  # still busy: the next round continues it


def parallelism(db: Database, keys: list[Key]) -> int:
    """How many objects a round may reconcile at once: the most any of their backends allows."""
    if db.memory or not keys:
        return 1
    names = objects.backends_of(db.conn, keys)
    return max((backends.parallelism(name) for name in names), default=1)


class _Pool:
    """Worker contexts for a parallel round, made on first use and reused across rounds.

    Interrupted (Ctrl-C), the workers finish the step in flight and start no other (the shared
    `stopping` event), and close() waits for them whatever else arrives: the reconcile lock
    must not be released while a worker still drives the backend.
    """

    def __init__(self, base: Context, workers: int) -> None:
        self.base = base
        self.workers = workers
        self.stopping = base.stopping or threading.Event()
        # imported here: a converge of one object (a snapshot, a sleep) needs no pool, and
        # concurrent.futures brings the logging package along (~20 ms of CPU at start-up)
        import queue
        from concurrent.futures import ThreadPoolExecutor

        self.free: queue.SimpleQueue[Context] = queue.SimpleQueue()
        self.made: list[Context] = []
        self.futures: list[Future[list[tuple[Key, Turn]]]] = []

        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="converge")

    def _take(self) -> Context:
        import queue

        try:
            ctx = self.free.get_nowait()
        except queue.Empty:
            b = self.base
            ctx = Context(Database(b.db.state_dir), trigger=b.trigger,
                          run_store_kind=b.run_store_kind, suspend_on_stop=b.suspend_on_stop,
                          approve=b.approve, stopping=self.stopping)
            self.made.append(ctx)
        ctx.trigger = self.base.trigger
        return ctx

    def run(self, keys: list[Key], deadline: float) -> list[Turn]:
        """One round: each group on a worker, its keys one after another; turns in key order."""
        def one(group: list[Key]) -> list[tuple[Key, Turn]]:
            ctx = self._take()
            try:
                return [(key, _turn(ctx, key, deadline)) for key in group]
            finally:
                self.free.put(ctx)

        futures: list[Future[list[tuple[Key, Turn]]]] = []
        for group in reconcile.groups(self.base.db.conn, keys):
            futures.append(self.executor.submit(one, group))
            self.futures.append(futures[-1])
        try:
            done = dict(pair for future in futures for pair in future.result())
        except KeyboardInterrupt:
            self.stopping.set()
            for future in futures:
                future.cancel()
            logger.warning("interrupted: finishing the steps in flight first (each is "
                           "recorded); the reconcile lock is held until they end")
            raise
        return [done[key] for key in keys]

    def close(self) -> None:
        """Wait until no worker runs a turn, then close their contexts.

        Waits on the futures, not Thread.join(): in CPython before 3.13 a KeyboardInterrupt
        inside join() can mark a still-running thread as finished, and the next join() returns
        at once (the contexts would then be closed under a running worker).
        """
        from concurrent.futures import wait

        pending = [f for f in self.futures if not f.done()]
        while pending:
            try:
                wait(pending)  # a future is done only once its worker has returned
            except KeyboardInterrupt:  # again: still wait, the workers drive the backend
                self.stopping.set()
            pending = [f for f in pending if not f.done()]
        self.executor.shutdown(wait=False, cancel_futures=True)
        for ctx in self.made:
            ctx.close()
            ctx.db.close()


def converge(ctx: Context, keys: list[Key], *, timeout: float = 300.0,
             workers: int | None = None) -> Report:
    """Reconcile `keys` (and whatever a crash left interrupted, and whatever retention has
    due: an expired snapshot, a cell over its retain) until nothing progresses.

    workers: objects reconciled at once within a round; None asks the backends involved.
    """
    report = Report()
    deadline = time.monotonic() + timeout
    pending = list(dict.fromkeys(keys))
    pool: _Pool | None = None
    with reconcile_lock(ctx):
        from devcell.reconciler import lease

        daemon = lease.current_holder(ctx.db.state_dir)
        if daemon is not None and daemon.pid != os.getpid():
            # A daemon started since the caller looked (it recovered under this lock first,
            # then queued every object): its workers converge these, never a second executor.
            report.waiting.update(dict.fromkeys(pending, DAEMON_STARTED))
            return report
        found = recovery.recover_interrupted(ctx.db)
        recovery.remove_dead_temporaries(ctx.db.state_dir)
        report.recovered = sorted({op_id for op_id, _, _ in found})
        pending.extend(k for k in dict.fromkeys((kind, oid) for _, kind, oid in found)
                       if k not in pending)
        due_seen: dict[Key, int] = {}
        pending.extend(_due(ctx, pending, due_seen, report))
        wanted = workers if workers is not None else parallelism(ctx.db, pending)
        try:
            for _ in range(MAX_ROUNDS):
                if not pending:
                    # What this converge did may have made more due (a fork gone: its
                    # expired snapshot; a scheduled snapshot taken: its cell's retain).
                    pending = _due(ctx, [], due_seen, report)
                if not pending or time.monotonic() > deadline:
                    break
                if wanted > 1 and len(pending) > 1:
                    if pool is None:
                        pool = _Pool(ctx, wanted)
                    turns = pool.run(pending, deadline)
                else:
                    turns = [_turn(ctx, key, deadline) for key in pending]
                next_round: list[Key] = []
                progressed = False
                for key, turn in zip(pending, turns, strict=True):
                    report.operations.extend(turn.operations)
                    # An object that settled this round (a cell whose drift was only to
                    # record) is progress too: whatever waits on it looks again. Settled keys
                    # leave `pending`, so this cannot loop.
                    settled = turn.outcome is not None and \
                        turn.outcome.result is reconcile.Result.DONE
                    progressed = progressed or bool(turn.operations) or settled
                    if _record(report, key, turn.outcome):
                        next_round.append(key)
                    if turn.operations:
                        next_round += _woken(ctx, key, pending, next_round)
                if not progressed:
                    pending = [k for k in next_round if k in report.waiting]
                    break
                pending = next_round
                for key in pending:
                    report.waiting.pop(key, None)
        finally:
            if pool is not None:
                pool.close()
        for key in pending:
            if key not in report.waiting and key not in report.failed:
                report.waiting[key] = "did not settle within the time allowed"
    return report


def _due(ctx: Context, pending: list[Key], seen: dict[Key, int], report: Report) -> list[Key]:
    """Retention work due now, unless this converge looked at it already and nothing ran
    since (an expired snapshot kept for its fork is looked at again once the fork is gone,
    never twice for nothing), or it failed."""
    ran = len(report.operations)
    out = [k for k in retention.due_keys(ctx.db.conn, ctx.clock())
           if k not in pending and k not in report.failed and seen.get(k, -1) < ran]
    seen.update((k, ran) for k in out)
    report.due.update(out)
    return out


def _woken(ctx: Context, key: Key, pending: list[Key], queued: list[Key]) -> list[Key]:
    """Deletions waiting on `key`, which just made progress, that this converge was not
    given: a snapshot being deleted waits until its forks are gone, and the fork's deletion
    may be the one that finishes later (`op resume` of its approval gate, `delete cell`).
    Only deletions: they were asked for already and would otherwise wait for the next
    command (their checkpoint's bytes with them); other waits are in the same converge as
    what they wait on."""
    out = []
    for dependent in objects.dependents(ctx.db.conn, *key):
        version = objects.desired_version(ctx.db.conn, *dependent)
        if (version is not None and version[1] and dependent not in pending
                and dependent not in queued and dependent not in out):
            out.append(dependent)
    # A schedule's progress: the snapshot a cell's schedule just recorded is taken in this
    # converge, and a scheduled snapshot just taken has its cell apply its retain.
    for dependent in retention.woken(ctx.db.conn, key):
        if dependent not in pending and dependent not in queued and dependent not in out:
            out.append(dependent)
    return out


def _record(report: Report, key: Key, outcome: reconcile.Outcome | None) -> bool:
    """Note where a key's turn ended; True when it goes on to the next round.

    An inline converge is one pass: an error is reported (the next apply, or the daemon,
    retries it), whether the queue would retry it (ERROR) or not (TERMINAL).
    """
    Result = reconcile.Result
    if outcome is None:
        return True
    if outcome.result is Result.DONE:
        report.waiting.pop(key, None)
        report.settled.append(key)
        return False
    if outcome.result is Result.REQUEUE:
        if outcome.operation is None:  # waiting on another object
            report.waiting[key] = outcome.message
        return True  # out of steps or time, or waiting: look again next round
    if outcome.result is Result.AWAITING_APPROVAL:
        report.waiting[key] = outcome.message
        return False
    report.failed[key] = outcome.message  # ERROR, TERMINAL, STOPPED
    return False
