"""The GitOps daemon: hold the lease, recover, keep a directory converged as files change.

Startup: take the lease (or exit naming its holder), fail interrupted operations, sync the
directory, queue every object, start the workers and the resync timer. Then watch the
directory (watchfiles, tuned for latency: a change is synced once the directory has been quiet
for `step_ms`, and a storm is cut at `debounce_ms`). SIGTERM/SIGINT: take no new work, finish
the step in flight, exit; a second signal exits at once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from loguru import logger

from devcell import failpoints
from devcell.reconciler import recovery
from devcell.reconciler.gitops import DirectorySync, SyncResult
from devcell.reconciler.lease import Lease
from devcell.reconciler.manager import Manager
from devcell.store import daemon_status, events, objects
from devcell.store.db import Database


@dataclass
class DaemonConfig:
    state_dir: Path
    manifests: Path
    workers: int = 4
    resync_seconds: float = 60.0
    step_ms: int = 15
    debounce_ms: int = 400
    prune_grace: float = 0.5
    run_store: str | None = None


@dataclass
class Daemon:
    config: DaemonConfig
    stop_event: threading.Event = field(default_factory=threading.Event)
    _signals: int = 0
    _signum: int = 0

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # No logging here: a signal can arrive while a log record is being written, and a
        # handler re-entering the logger would deadlock or lose the line. Raw writes only.
        self._signals += 1
        self._signum = signum
        if self._signals > 1:
            os._exit(130)
        self.stop_event.set()

    def run(self) -> int:
        cfg = self.config
        db = Database(cfg.state_dir)
        with Lease(cfg.state_dir, manifests=str(cfg.manifests.absolute())) as lease:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            daemon_status.started(db, lease.holder)
            manager = Manager(cfg.state_dir, workers=cfg.workers, resync_seconds=cfg.resync_seconds,
                              run_store_kind=cfg.run_store)
            for op_id, kind, object_id in recovery.recover_interrupted(db):
                manager.enqueue((kind, object_id), trigger="recovery")
                logger.warning("operation {} was interrupted by a crash; recorded as failed", op_id)
            self._sweep_orphans(db)
            syncer = DirectorySync(db, cfg.manifests, prune_grace=cfg.prune_grace)
            self._sync(db, syncer, manager)
            manager.enqueue_all(db, trigger="startup")
            manager.start()
            failpoints.hit("daemon.started")
            try:
                self._watch(db, syncer, manager)
            finally:
                if self._signum:
                    logger.info("signal {}: finishing the steps in flight, then exiting "
                                "(a second signal exits at once)", self._signum)
                manager.stop()
                daemon_status.stopped(db)
                db.close()
        logger.info("controller stopped")
        return 0

    def _sweep_orphans(self, db: Database) -> None:
        """Backend resources the database does not account for (a crash between the engine
        call and the commit): removed, with an event each."""
        from devcell.controllers.context import Context
        from devcell.errors import BackendUnavailable
        from devcell.reconciler import orphans

        used = objects.backends_in_use(db.conn) or {"fake"}
        ctx = Context(db, trigger="recovery")
        try:
            for name in sorted(used):
                try:
                    orphans.sweep(ctx, name)
                except BackendUnavailable as exc:
                    logger.warning("orphan sweep skipped for backend {}: {}", name, exc)
        finally:
            ctx.close()

    def _watch(self, db: Database, syncer: DirectorySync, manager: Manager) -> None:
        import watchfiles

        cfg = self.config
        next_sync: float | None = None
        first = True
        for changes in watchfiles.watch(
            cfg.manifests, stop_event=self.stop_event, step=cfg.step_ms,
            debounce=cfg.debounce_ms, rust_timeout=200, yield_on_timeout=True,
            raise_interrupt=False,
        ):
            if self.stop_event.is_set():
                return
            due = next_sync is not None and time.monotonic() >= next_sync
            if first:
                # The watcher is live now; files written between the startup sync and this
                # moment produced no event, so sync once more.
                first, due = False, True
            if changes or due:
                result = self._sync(db, syncer, manager)
                next_sync = (time.monotonic() + cfg.prune_grace) if result.prune_pending else None

    def _sync(self, db: Database, syncer: DirectorySync, manager: Manager) -> SyncResult:
        started = time.perf_counter()
        result = syncer.sync()
        for key in result.to_reconcile:
            manager.enqueue(key, trigger="watch")
        changed = [c for c in result.changes if c.outcome != "unchanged"] + result.pruned
        for c in changed:
            logger.bind(kind=c.kind, name=c.name).info("{} {}", c.kind.lower() + "/" + c.name,
                                                       c.outcome)
        daemon_status.report_manifests(db, [str(p) for p in result.problems])
        if result.problems:
            with db.write() as conn:
                for p in result.problems:
                    events.record(conn, kind="Controller", object_id=None, name="controller",
                                  reason="InvalidManifest", message=str(p), type="Warning")
            for p in result.problems:
                logger.warning("{}", p)
        logger.debug("sync: {} changed, {} pruned, {} problems in {:.1f} ms", len(changed),
                     len(result.pruned), len(result.problems),
                     (time.perf_counter() - started) * 1000)
        return result


def json_sink(message: object) -> None:
    """--log-json: one JSON object per line with the bound context (kind, name, op)."""
    record = message.record  # type: ignore[attr-defined]
    payload = {"time": record["time"].isoformat(), "level": record["level"].name,
               "message": record["message"], **record["extra"]}
    if record["exception"] is not None:
        payload["exception"] = str(record["exception"].value)
    os.write(2, (json.dumps(payload, default=str) + "\n").encode())
