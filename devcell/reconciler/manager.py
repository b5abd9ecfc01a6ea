"""Workers that drain the work queue: several keys in parallel (threads: backends block),
one reconcile per key at a time, backoff on failure, requeue while waiting, periodic resync.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from devcell import backends
from devcell.backends.base import Watching
from devcell.controllers import retention
from devcell.controllers.context import Context
from devcell.errors import BackendError, StateUnusable
from devcell.log import logger
from devcell.reconciler import reconcile
from devcell.reconciler.queue import WorkQueue
from devcell.store import asks, objects, observations, operations, restores
from devcell.store.db import Database

Key = reconcile.Key
GROUP_RETRY_S = 0.05
"""How soon a key whose cell is busy in another worker is tried again."""
REOPEN_MIN_S, REOPEN_MAX_S = 0.5, 30.0
"""Back-off between attempts to re-open a lost runtime event stream (an engine restart)."""
RECHECK_AFTER_S = (0.25, 1.0)
"""A cell an event named is looked at again after these delays: Docker sends `die` before its
container list says exited, so the first look can still see it running."""
SCHEDULE = "schedule"
"""The trigger of a reconcile the daemon queued for when something fell due (retention)."""
CONFIRM_EVERY_S = 1.0
"""How often the cells confirmed by reconciles are written to store.observations."""


@dataclass
class Manager:
    state_dir: Path
    workers: int = 4
    resync_seconds: float = 60.0
    run_store_kind: str | None = None
    queue: WorkQueue[Key] = field(default_factory=WorkQueue)
    stopping: threading.Event = field(default_factory=threading.Event)
    _triggers: dict[Key, str] = field(default_factory=dict)
    _scheduled: set[Key] = field(default_factory=set)
    """Keys queued for a time something falls due (trigger `schedule` unless another came)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _busy_groups: set[Key] = field(default_factory=set)
    _terminal: dict[Key, tuple[int, bool] | None] = field(default_factory=dict)
    """Keys whose last reconcile was terminal, with the desired version that failed: not
    retried until the spec changes or a deletion is asked (or the periodic resync looks)."""
    reconciles: int = 0
    runtime_events: bool = True
    _watched: set[str] = field(default_factory=set)
    _confirmed: set[str] = field(default_factory=set)
    stream_opens: int = 0
    """Times a runtime event stream was (re)opened (tests and logs)."""

    def enqueue(self, key: Key, *, trigger: str, after: float = 0.0) -> None:
        with self._lock:
            if trigger == SCHEDULE:
                # A wake-up for later (a ttl, a period): any other reason that comes first
                # names the reconcile, so a user's `cell start` still counts as the user's.
                self._scheduled.add(key)
            else:
                # The first reason wins until the key is picked up ("apply" beats "drift").
                self._triggers.setdefault(key, trigger)
        self.queue.add(key, after=after)

    def enqueue_all(self, db: Database, *, trigger: str) -> int:
        keys = objects.live_keys(db.conn)
        for key in keys:
            self.enqueue(key, trigger=trigger)
        return len(keys)

    def watch_runtimes(self, db: Database) -> None:
        """Follow the runtime events of every backend in use that can report them (one
        thread each, started once)."""
        if not self.runtime_events or self.stopping.is_set():
            return
        for name in sorted(objects.backends_in_use(db.conn) - self._watched):
            self._watched.add(name)
            t = threading.Thread(target=self._follow_runtimes, args=(name,),
                                 name=f"events-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _follow_runtimes(self, name: str) -> None:
        """Queue a cell the moment its backend reports its runtime changed. A lost stream
        (the engine restarted) is opened again with back-off, and every cell of that backend
        is then queued: what happened while nobody listened is found by observing it."""
        delay = REOPEN_MIN_S
        opens = 0

        def opened() -> None:
            nonlocal delay, opens
            delay = REOPEN_MIN_S
            opens += 1
            with self._lock:
                self.stream_opens += 1
            if opens > 1:
                self._observe_all(name)
            logger.info("following the runtime events of backend {}", name)

        def changed(cell_id: str) -> None:
            key = ("Cell", cell_id)
            self.enqueue(key, trigger="engine")
            for after in RECHECK_AFTER_S:  # the engine's list can lag its own event
                timer = threading.Timer(after, self.enqueue, args=(key,),
                                        kwargs={"trigger": "engine"})
                timer.daemon = True
                timer.start()

        while not self.stopping.is_set():
            try:
                backend = backends.load(name, self.state_dir)
            except BackendError as exc:
                logger.warning("backend {}: cannot follow its events ({}); retrying in "
                               "{:.1f}s", name, exc, delay)
            else:
                try:
                    if not isinstance(backend, Watching):
                        return
                    backend.watch(changed, stop=self.stopping, on_open=opened)
                except BackendError as exc:
                    logger.warning("backend {}: event stream lost ({}); re-opening in {:.1f}s",
                                   name, exc, delay)
                    opens = max(opens, 1)  # whatever reopens next must observe everything
                finally:
                    backend.close()
            if self.stopping.wait(delay):
                return
            delay = min(delay * 2, REOPEN_MAX_S)

    def _observe_all(self, backend_name: str) -> None:
        db = Database(self.state_dir)
        try:
            keys = objects.live_cells_of(db.conn, backend_name)
        finally:
            db.close()
        for key in keys:
            self.enqueue(key, trigger="engine")
        logger.info("backend {}: event stream re-opened; {} cells queued to be observed",
                    backend_name, len(keys))

    def _flush_confirmed(self) -> None:
        with self._lock:
            confirmed, self._confirmed = self._confirmed, set()
        observations.confirm(self.state_dir, confirmed)

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

    def _watch_desired(self) -> None:
        """Notice desired state written by others (`devcell apply`, `delete`, `op resume`...)
        while the daemon runs: when the database changed, queue what is not converged.
        PRAGMA data_version moves only when another connection commits, so idle costs nothing."""
        db = Database(self.state_dir)
        flushed = time.monotonic()
        try:
            version = None
            while not self.stopping.wait(0.05):
                if time.monotonic() - flushed >= CONFIRM_EVERY_S:
                    self._flush_confirmed()
                    flushed = time.monotonic()
                current = db.data_version()
                if current == version:
                    continue
                version = current
                self.watch_runtimes(db)  # a backend used for the first time
                pending = (objects.unconverged_keys(db.conn) + objects.drifted_keys(db.conn)
                           + operations.approved_keys(db.conn) + restores.pending_keys(db.conn)
                           + asks.pending_keys(db.conn))
                for key in pending:
                    # Failing keys keep their backoff; terminal ones wait for a new generation.
                    if self.queue.failures(key) == 0 and key not in self._terminal:
                        self.enqueue(key, trigger="apply")
                    elif key in self._terminal and self._terminal[key] != \
                            objects.desired_version(db.conn, *key):
                        self._terminal.pop(key, None)
                        self.enqueue(key, trigger="apply")
                self.stopping.wait(0.15)  # at most ~5 scans a second while busy
        finally:
            db.close()

    def _work(self) -> None:
        db = Database(self.state_dir)
        ctx = Context(db, stopping=self.stopping, suspend_on_stop=True,
                      run_store_kind=self.run_store_kind)
        try:
            while True:
                key = self.queue.get()
                if key is None:
                    return
                if self._still_terminal(db, key):
                    self.queue.done(key)
                    continue
                group = reconcile.group_of(objects.owners(db.conn, [key]), key)
                with self._lock:
                    if group in self._busy_groups:  # its cell or a sibling snapshot is running
                        busy = True
                    else:
                        busy = False
                        self._busy_groups.add(group)
                        fallback = SCHEDULE if key in self._scheduled else "resync"
                        self._scheduled.discard(key)
                        trigger = self._triggers.pop(key, fallback)
                if busy:
                    self.queue.done(key)
                    self.queue.add(key, after=GROUP_RETRY_S)
                    continue
                ctx.trigger = trigger
                try:
                    started = objects.desired_version(db.conn, *key)
                    self._handle(ctx, key, reconcile.reconcile(ctx, key), started)
                except StateUnusable as exc:  # a faulty machine, named: no traceback
                    logger.error("reconcile of {} {} could not record: {}", *key, exc)
                    self.queue.add_rate_limited(key)
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

    def _still_terminal(self, db: Database, key: Key) -> bool:
        """A key whose last reconcile was terminal, asked for again with nothing new to try
        (the same desired version): dropped here, when it is handed out, whoever queued it (a
        sync of its file, the desired-state watcher racing the outcome). Only the periodic
        resync (trigger drift) looks at it again, as documented."""
        with self._lock:
            if key not in self._terminal or self._triggers.get(key) == "drift":
                return False
            failed = self._terminal[key]
        if objects.desired_version(db.conn, *key) != failed:
            return False
        with self._lock:
            self._triggers.pop(key, None)
        return True

    def _handle(self, ctx: Context, key: Key, outcome: reconcile.Outcome,
                started: tuple[int, bool] | None) -> None:
        """The daemon's one switch over a reconcile's outcome (controller-runtime's
        reconcileHandler): forget, requeue later, retry with backoff, or stop retrying.

        started: the desired version the reconcile began with; a terminal outcome holds for
        it, not for one written while the reconcile ran."""
        Result = reconcile.Result
        if self.stopping.is_set() and outcome.operation is not None:
            return  # shutting down: the next start resumes or re-plans it
        result = outcome.result
        if result is not Result.TERMINAL:
            with self._lock:
                self._terminal.pop(key, None)  # it moved on (the resync found it mended)
        if result is Result.DONE:
            self.queue.forget(key)
            if outcome.after > 0:  # something falls due then (a ttl, a schedule): wake for it
                self.enqueue(key, trigger=SCHEDULE, after=outcome.after)
            if key[0] == "Cell":  # settled: its phase was just observed
                with self._lock:
                    self._confirmed.add(key[1])
        elif result is Result.REQUEUE:
            if outcome.operation is not None:  # it progressed: confirm it settled, wake others
                self.queue.forget(key)
                self.enqueue(key, trigger=ctx.trigger)
                for dependent in objects.dependents(ctx.db.conn, *key):
                    self.enqueue(dependent, trigger=ctx.trigger)
                for dependent in retention.woken(ctx.db.conn, key):
                    self.enqueue(dependent, trigger=SCHEDULE)
            else:
                self.enqueue(key, trigger=ctx.trigger, after=outcome.after)
        elif result is Result.ERROR:
            delay = self.queue.add_rate_limited(key, at_least=outcome.after)
            self._note_retry(ctx, key, delay)
        elif result is Result.TERMINAL:
            self.queue.forget(key)
            with self._lock:
                self._terminal[key] = started
            if objects.desired_version(ctx.db.conn, *key) == started:
                # Asked for again while it ran (a scan of the desired-state watcher, a sync)
                # with nothing newer to try: handing it out again would repeat a failure
                # its outcome calls permanent.
                self.queue.discard_parked(key)
        elif result is Result.AWAITING_APPROVAL:
            self.enqueue(key, trigger=ctx.trigger, after=outcome.after)
        # STOPPED: suspended by the shutdown; nothing to queue

    def _note_retry(self, ctx: Context, key: Key, delay: float) -> None:
        """Make the next retry time visible (describe shows status.nextRetryAt)."""
        at = (datetime.now(UTC) + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%S.%f")
        objects.note_retry(ctx.db, *key, at=at[:-3] + "Z", retries=self.queue.failures(key))
