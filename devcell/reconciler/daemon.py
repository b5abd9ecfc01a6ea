"""The GitOps daemon: hold the lease, recover, keep a directory converged as files change.

Startup: take the lease (or exit naming its holder), fail interrupted operations, sync the
directory, queue every object, start the workers and the resync timer. Then watch the
directory (watchfiles, tuned for latency: a change is synced once the directory has been quiet
for `step_ms`, and a storm is cut at `debounce_ms`). Each batch is synced incrementally (only
the paths it names are read), so an edit costs the same in a directory of 20 files or of
10,000; the whole directory is read once the watcher is live and at every resync, which
repairs what lost events missed and records a `ResyncRepaired` event naming it.
SIGTERM/SIGINT: take no new work, finish the step in flight, exit; a second signal exits at
once.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from devcell import failpoints
from devcell.log import logger
from devcell.manifests import loader
from devcell.names import printable
from devcell.reconciler import recovery
from devcell.reconciler.gitops import DirectorySync, SyncResult
from devcell.reconciler.lease import Lease
from devcell.reconciler.manager import Manager
from devcell.store import daemon_status, events, objects, prunes
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
    allow_empty: bool = False
    keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS
    """An emptied manifests directory may prune what it defined (off: it is held, said)."""
    run_store: str | None = None
    runtime_events: bool = True
    """Follow each backend's runtime events (Watching): a cell whose runtime dies is queued
    at once, not at the next resync."""
    serve: Callable[[], Callable[[], None]] | None = None
    """Started once the lease is held and the state recovered (the HTTP API, from the CLI's
    --listen); what it returns stops it, before the workers stop."""


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
                              run_store_kind=cfg.run_store, runtime_events=cfg.runtime_events)
            self._recover(db, manager)
            syncer = DirectorySync(db, cfg.manifests, prune_grace=cfg.prune_grace,
                                   allow_empty=cfg.allow_empty,
                                   keep_pruned=cfg.keep_pruned)
            self._sync(db, syncer.sync, manager)
            manager.enqueue_all(db, trigger="startup")
            manager.start()
            stop_serving: Callable[[], None] | None = None
            try:
                stop_serving = cfg.serve() if cfg.serve is not None else None
                failpoints.hit("daemon.started")
                self._watch(db, syncer, manager)
            finally:
                if stop_serving is not None:
                    stop_serving()
                if self._signum:
                    logger.info("signal {}: finishing the steps in flight, then exiting "
                                "(a second signal exits at once)", self._signum)
                manager.stop()
                daemon_status.stopped(db)
                db.close()
        logger.info("controller stopped")
        return 0

    def _recover(self, db: Database, manager: Manager) -> None:
        """What a dead process left: its Running operations failed (their objects queued),
        its temporaries and unrecorded backend resources removed. Under the reconcile lock,
        as recovery asks: an inline converge that began before this lease (a `devcell apply`
        without a daemon) is alive while it holds the lock, and its Running operation and
        the container it made but has not recorded yet are its work in flight, not a
        crash's leftovers (failing it would have this daemon make the object a second
        time beside it). Its end is waited for."""
        from devcell.reconciler import reconcile_lock

        if reconcile_lock.held(self.config.state_dir):
            logger.info("a command is reconciling in this state directory (it holds the "
                        "reconcile lock): waiting for it to end before recovering")
        with reconcile_lock.holding(self.config.state_dir):
            for op_id, kind, object_id in recovery.recover_interrupted(db):
                manager.enqueue((kind, object_id), trigger="recovery")
                logger.warning("operation {} was interrupted by a crash; recorded as failed",
                               op_id)
            recovery.remove_dead_temporaries(self.config.state_dir)
            self._sweep_orphans(db)

    def _sweep_orphans(self, db: Database) -> None:
        """Backend resources the database does not account for (a crash between the engine
        call and the commit): removed, or kept when they may hold the user's work, with an
        event each; in every backend the database names or whose storage holds something."""
        from devcell import backends
        from devcell.controllers.context import Context
        from devcell.errors import BackendUnavailable
        from devcell.reconciler import orphans

        used = backends.holding(Path(db.state_dir), objects.backends_in_use(db.conn)) or ["fake"]
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
        """Follow the directory until stopped. A watcher that fails is replaced after a
        pause (doubling while it keeps failing at once); like the first, the new one begins
        with a full sync, since changes made while none was live produced no event."""
        import watchfiles

        from devcell.manifests import validate  # noqa: F401  (now, not on the first edit)

        cfg = self.config
        root = os.path.abspath(cfg.manifests)
        pause = 1.0
        while not self.stop_event.is_set():
            batches = watchfiles.watch(
                root, watch_filter=functools.partial(_followed, root), stop_event=self.stop_event,
                step=cfg.step_ms, debounce=cfg.debounce_ms, rust_timeout=200,
                yield_on_timeout=True, raise_interrupt=False,
            )
            handled = self._follow(db, syncer, manager, batches)
            if handled is None:
                return
            pause = 1.0 if handled else pause
            self.stop_event.wait(pause)
            pause = min(pause * 2, 30.0)

    def _follow(self, db: Database, syncer: DirectorySync, manager: Manager,
                batches: Iterator[set[tuple[Any, str]]]) -> int | None:
        """Sync as the watcher reports: the paths it names (incremental), the whole directory
        first and at every resync. None once stopped; the batches handled if it failed."""
        cfg = self.config
        root = os.path.abspath(cfg.manifests)
        with _Watched(root) as watched:
            return self._follow_batches(db, syncer, manager, batches, root, watched)

    def _follow_batches(self, db: Database, syncer: DirectorySync, manager: Manager,
                        batches: Iterator[set[tuple[Any, str]]], root: str,
                        watched: _Watched) -> int | None:
        cfg = self.config
        first, handled = True, 0
        next_prune: float | None = None
        next_resync = time.monotonic() + cfg.resync_seconds if cfg.resync_seconds > 0 else None
        unreported = _Unreported(window=max(1.0, 3 * cfg.debounce_ms / 1000))
        while True:
            try:
                changes = next(batches)
            except StopIteration:
                return None
            except (RuntimeError, OSError) as exc:  # watchfiles' own errors are RuntimeErrors
                logger.warning("watching {} failed: {}; watching it again", cfg.manifests, exc)
                return handled
            if self.stop_event.is_set():
                return None
            handled += 1
            if watched.replaced():
                # The directory was deleted, moved or replaced (rm -rf && cp -r, a fresh
                # clone): the watcher follows the old one and will never report again. Watch
                # anew; the new watcher begins with a full sync.
                logger.warning("{} was replaced or removed; watching it again", cfg.manifests)
                self._sync(db, syncer.sync, manager)  # what is there now (or that it is gone)
                return handled
            now = time.monotonic()
            paths = {path for _, path in changes}
            unreported.heard(paths)
            result: SyncResult | None = None
            if first or (next_resync is not None and now >= next_resync):
                # First: files written between the startup sync and this moment produced no
                # event. Resync: whatever events were lost, the whole directory is read.
                result = self._sync(db, syncer.sync, manager)
                if not first:
                    unreported.expect(result, paths, now)
                    next_resync = now + cfg.resync_seconds
                first = False
            elif paths or (next_prune is not None and now >= next_prune):
                result = self._sync(db, functools.partial(syncer.sync_paths, paths), manager)
            if result is not None:
                next_prune = (time.monotonic() + cfg.prune_grace) if result.prune_pending else None
            unreported.report(db, cfg.manifests, now)

    def _sync(self, db: Database, sync: Callable[[], SyncResult], manager: Manager
              ) -> SyncResult:
        started = time.perf_counter()
        result = sync()
        for key in result.to_reconcile:
            manager.enqueue(key, trigger="watch")
        # An expired snapshot's file is read again at every full sync: said once, by its expiry.
        changed = [c for c in result.changes if c.outcome not in ("unchanged", "expired")] \
            + result.pruned
        for c in changed:
            logger.bind(kind=c.kind, name=c.name).info("{} {}", c.kind.lower() + "/" + c.name,
                                                       c.outcome)
            if c.adopted_from is not None:  # its event (Adopted) was written with it
                logger.bind(kind=c.kind, name=c.name).warning(
                    "{} adopted: it was applied from {}; the watched directory's file now "
                    "decides its spec (and its removal prunes it)",
                    c.kind.lower() + "/" + c.name, printable(c.adopted_from))
        daemon_status.report_manifests(db, [str(p) for p in result.problems])
        if result.held:
            with db.write() as conn:
                events.record(conn, kind="Controller", object_id=None, name="controller",
                              reason="PruneHeld", type="Warning", message=result.held)
            logger.warning("{}", result.held)
        if result.refused:
            with db.write() as conn:
                for message in result.refused:
                    events.record(conn, kind="Controller", object_id=None, name="controller",
                                  reason="PruneRefused", type="Warning",
                                  message=f"{message} (its prune is tried again at every sync)")
            for message in result.refused:
                logger.warning("prune refused: {}", message)
        if result.problems:
            with db.write() as conn:
                for p in result.problems:
                    events.record(conn, kind="Controller", object_id=None, name="controller",
                                  reason="InvalidManifest", message=str(p), type="Warning")
            for p in result.problems:
                logger.warning("{}", p)
        logger.debug("{} sync: {} changed, {} pruned, {} problems in {:.1f} ms",
                     "full" if result.full else "incremental", len(changed),
                     len(result.pruned), len(result.problems),
                     (time.perf_counter() - started) * 1000)
        return result


class _Watched:
    """The directory the watcher follows, held open: so its inode cannot be reused by a
    directory made at the same path, and a deletion shows as no links left."""

    def __init__(self, root: str) -> None:
        self.root = root
        try:
            self.fd: int | None = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            self.fd = None

    def __enter__(self) -> _Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)

    def replaced(self) -> bool:
        """Whether the directory at the path is no longer the one watched (deleted, moved
        away, replaced) or one appeared where there was none."""
        try:
            now: os.stat_result | None = os.stat(self.root)
        except OSError:
            now = None
        if now is not None and not stat.S_ISDIR(now.st_mode):
            now = None  # a file there is no directory to watch either
        if self.fd is None or now is None:
            return (self.fd is None) != (now is None)
        held = os.fstat(self.fd)
        return held.st_nlink == 0 or (held.st_dev, held.st_ino) != (now.st_dev, now.st_ino)


def _followed(root: str, change: object, path: str) -> bool:
    """watchfiles' filter: every path the walk can reach. Not watchfiles' default filter,
    which also drops `node_modules`, `__pycache__` and `*~` (the walk reads manifests there);
    hidden entries (`.git`, an editor's `.x.yaml.swp`) are dropped, as the walk skips them."""
    parts = os.path.relpath(path, root).split(os.sep)
    if parts[0] in (os.curdir, os.pardir):
        return True  # the directory itself, or beyond it: the sync reads everything
    return not any(loader.hidden(part) for part in parts)


@dataclass
class _Unreported:
    """Files a periodic resync found added, changed or deleted although no watch event had
    named them: events the watcher lost (an inotify queue overflow is not reported through
    watchfiles at all). A save can also race the resync (read before its event is handed
    over), so a file counts as lost only if no batch names it within `window` seconds; then
    one `ResyncRepaired` event says what the resync repaired."""

    window: float
    files: dict[str, str] = field(default_factory=dict)
    outcomes: list[str] = field(default_factory=list)
    due: float = 0.0

    def expect(self, result: SyncResult, reported: set[str], now: float) -> None:
        lost = {p: how for p, how in result.unseen.items() if p not in reported}
        if not lost:
            return
        self.files.update(lost)
        self.outcomes += [f"{c.kind.lower()}/{c.name} {c.outcome}" for c in
                          [c for c in result.changes if c.outcome != "unchanged"] + result.pruned]
        if result.prune_pending:
            self.outcomes.append(f"{result.prune_pending} to be pruned after the grace period")
        self.due = now + self.window

    def heard(self, paths: set[str]) -> None:
        """A batch named these paths (a directory stands for the files below it)."""
        for path in map(os.path.abspath, paths):
            below = path + os.sep
            for known in [p for p in self.files if p == path or p.startswith(below)]:
                del self.files[known]
        if not self.files:
            self.outcomes = []

    def report(self, db: Database, root: Path, now: float) -> None:
        if not self.files or now < self.due:
            return
        base = os.path.abspath(root)
        named = [f"{os.path.relpath(p, base)} ({how})" for p, how in self.files.items()]
        message = (f"the periodic resync found {len(named)} file(s) whose change no watch "
                   f"event reported: {', '.join(named[:10])}"
                   + (f" (+{len(named) - 10} more)" if len(named) > 10 else "")
                   + "; the directory was read again and recorded"
                   + (f": {', '.join(self.outcomes[:10])}" if self.outcomes else ""))
        with db.write() as conn:
            events.record(conn, kind="Controller", object_id=None, name="controller",
                          reason="ResyncRepaired", message=message, type="Warning")
        logger.warning("{}", message)
        self.files, self.outcomes = {}, []


def json_sink(message: object) -> None:
    """--log-json: one JSON object per line with the bound context (kind, name, op)."""
    record = message.record  # type: ignore[attr-defined]
    payload = {"time": record["time"].isoformat(), "level": record["level"].name,
               "message": record["message"], **record["extra"]}
    if record["exception"] is not None:
        payload["exception"] = str(record["exception"].value)
    os.write(2, (json.dumps(payload, default=str) + "\n").encode())
