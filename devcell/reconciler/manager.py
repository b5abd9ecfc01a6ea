"""Workers that drain the work queue: several keys in parallel (threads: backends block),
one reconcile per key at a time, backoff on failure, requeue while waiting, periodic resync.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loguru import logger

from devcell.controllers import Controller
from devcell.controllers.plan import Plan, Settled, Wait
from devcell.reconciler import converge, executor, suspended
from devcell.reconciler.context import Context
from devcell.reconciler.queue import WorkQueue
from devcell.store import objects
from devcell.store.db import Database

Key = tuple[str, str]
GROUP_RETRY_S = 0.05
"""How soon a key whose cell is busy in another worker is tried again."""


@dataclass
class Manager:
    state_dir: Path
    workers: int = 4
    resync_seconds: float = 60.0
    run_store_kind: str | None = None
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    stopping: threading.Event = field(default_factory=threading.Event)
    _triggers: dict[Key, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _busy_groups: set[str] = field(default_factory=set)
    reconciles: int = 0

    def enqueue(self, key: Key, *, trigger: str, after: float = 0.0) -> None:
        with self._lock:
            # The first reason wins until the key is picked up ("apply" beats "drift").
            self._triggers.setdefault(key, trigger)
        self.queue.add(key, after=after)

    def enqueue_all(self, db: Database, *, trigger: str) -> int:
        count = 0
        for kind, table in objects.TABLES.items():
            for (object_id,) in db.conn.execute(
                    f"SELECT id FROM {table} WHERE deleted_at IS NULL").fetchall():
                self.enqueue((kind, object_id), trigger=trigger)
                count += 1
        return count

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.resync_seconds > 0:
            t = threading.Thread(target=self._resync, name="resync", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._watch_desired, name="desired", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self, timeout: float | None = None) -> None:
        """Take no new work; let each worker finish its step in flight (and compensations)."""
        self.stopping.set()
        self.queue.shutdown()
        for t in self._threads:
            t.join(timeout)

    def _resync(self) -> None:
        db = Database(self.state_dir)
        try:
            while not self.stopping.wait(self.resync_seconds):
                n = self.enqueue_all(db, trigger="drift")
                logger.debug("resync: {} objects queued", n)
        finally:
            db.close()

    _PENDING_SQL = (
        "SELECT 'Cell', id FROM cells WHERE deleted_at IS NULL AND "
        "(generation != observed_generation OR deleting_at IS NOT NULL) "
        "UNION ALL SELECT 'Snapshot', id FROM snapshots WHERE deleted_at IS NULL AND "
        "(generation != observed_generation OR deleting_at IS NOT NULL) "
        "UNION ALL SELECT object_kind, object_id FROM operations "
        "WHERE status = 'Suspended' AND reason = 'Approved'")

    def _watch_desired(self) -> None:
        """Notice desired state written by others (`devcell apply`, `delete`, `op resume`...)
        while the daemon runs: when the database changed, queue what is not converged.
        PRAGMA data_version moves only when another connection commits, so idle costs nothing."""
        db = Database(self.state_dir)
        try:
            version = None
            while not self.stopping.wait(0.05):
                current = db.conn.execute("PRAGMA data_version").fetchone()[0]
                if current == version:
                    continue
                version = current
                for kind, object_id in db.conn.execute(self._PENDING_SQL).fetchall():
                    key = (kind, object_id)
                    if self.queue.failures(key) == 0:  # failing keys keep their backoff
                        self.enqueue(key, trigger="apply")
                self.stopping.wait(0.15)  # at most ~5 scans a second while busy
        finally:
            db.close()

    def _work(self) -> None:
        db = Database(self.state_dir)
        ctx = Context(db, stopping=self.stopping, suspend_on_stop=True,
                      run_store_kind=self.run_store_kind)
        kinds = converge.controllers()
        try:
            while True:
                key = self.queue.get()
                if key is None:
                    return
                group = self._group(db, key)
                with self._lock:
                    if group in self._busy_groups:  # its cell or a sibling snapshot is running
                        busy = True
                    else:
                        busy = False
                        self._busy_groups.add(group)
                        trigger = self._triggers.pop(key, "resync")
                if busy:
                    self.queue.done(key)
                    self.queue.add(key, after=GROUP_RETRY_S)
                    continue
                ctx.trigger = trigger
                try:
                    self._reconcile(ctx, kinds[key[0]], key)
                except Exception:
                    logger.exception("reconcile of {} {} raised", *key)
                    self.queue.add_rate_limited(key)
                finally:
                    with self._lock:
                        self._busy_groups.discard(group)
                    self.queue.done(key)
                    with self._lock:
                        self.reconciles += 1
        finally:
            ctx.close()
            db.close()

    @staticmethod
    def _group(db: Database, key: Key) -> str:
        """The cell a key belongs to: a cell and its snapshots are never reconciled at once
        (a snapshot quiesces the cell; the cell's turn would repair that meanwhile)."""
        kind, object_id = key
        if kind == "Snapshot":
            row = db.conn.execute("SELECT cell_id FROM snapshots WHERE id = ?",
                                  (object_id,)).fetchone()
            if row is not None and row[0]:
                return str(row[0])
        return object_id

    def _reconcile(self, ctx: Context, controller: Controller, key: Key) -> None:
        kind, object_id = key
        held = suspended.handle(ctx, controller, object_id)
        if isinstance(held, Wait):
            self.enqueue(key, trigger=ctx.trigger, after=held.requeue_after)
            return
        decision = held if held is not None else controller.decide(ctx, object_id)
        if isinstance(decision, Plan):
            decision = executor.execute(ctx, controller, decision)
        if isinstance(decision, executor.Result):
            if self.stopping.is_set() or decision.suspended == "Shutdown":
                return
            if decision.suspended:  # an approval gate: check back for the approval
                self.enqueue(key, trigger=ctx.trigger, after=suspended.APPROVAL_POLL_S)
                return
            if decision.error:
                delay = self.queue.add_rate_limited(key)
                self._note_retry(ctx, kind, object_id, delay)
                return
            self.queue.forget(key)
            self.enqueue(key, trigger=ctx.trigger)  # confirm it settled (level-triggered)
            self._wake_dependents(ctx, kind, object_id)
        elif isinstance(decision, Wait):
            self.enqueue(key, trigger=ctx.trigger, after=decision.requeue_after)
        elif isinstance(decision, Settled):
            if decision.failed:
                delay = self.queue.add_rate_limited(key)
                self._note_retry(ctx, kind, object_id, delay)
            else:
                self.queue.forget(key)

    def _wake_dependents(self, ctx: Context, kind: str, object_id: str) -> None:
        """A cell became ready: its waiting snapshots; a snapshot became ready: its forks."""
        if kind == "Cell":
            sql = ("SELECT id FROM snapshots WHERE cell_id = ? AND deleted_at IS NULL "
                   "AND checkpoint_ref IS NULL")
            dependent = "Snapshot"
        else:
            sql = "SELECT id FROM cells WHERE forked_from = ? AND deleted_at IS NULL"
            dependent = "Cell"
        for (dep_id,) in ctx.db.conn.execute(sql, (object_id,)).fetchall():
            self.enqueue((dependent, dep_id), trigger=ctx.trigger)

    def _note_retry(self, ctx: Context, kind: str, object_id: str, delay: float) -> None:
        """Make the next retry time visible (describe shows status.nextRetryAt)."""
        at = (datetime.now(UTC) + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%S.%f")
        with ctx.db.write() as conn:
            record = objects.get(conn, kind, object_id)
            if record is None:
                return
            status = dict(record.status, nextRetryAt=at[:-3] + "Z",
                          retries=self.queue.failures((kind, object_id)))
            objects.write_status(conn, record, phase=record.phase, status=status,
                                 observed_generation=record.observed_generation)
