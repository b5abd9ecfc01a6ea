"""The daemon's workers: parallel, but never a cell and its snapshots at once."""

from __future__ import annotations

import time
from typing import Any

from devcell.reconciler.manager import Manager
from devcell.reconciler.queue import WorkQueue
from devcell.store.db import Database
from tests.controllers.support import apply, cell_doc, live_keys, record, snapshot_doc
from tests.reconciler.overlap import watch_overlaps


def test_workers_never_reconcile_a_cell_and_its_snapshots_at_once(
        db: Database, monkeypatch: Any) -> None:
    watch = watch_overlaps(monkeypatch, pause=0.02)
    docs = []
    for i in range(3):
        docs += [cell_doc(f"c{i}"), snapshot_doc(f"s{i}a", f"c{i}"),
                 snapshot_doc(f"s{i}b", f"c{i}")]
    apply(db, *docs)
    manager = Manager(db.state_dir, workers=4, resync_seconds=0)
    for key in live_keys(db):
        manager.enqueue(key, trigger="test")
    manager.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            phases = {record(db, "Snapshot", f"s{i}{x}").phase for i in range(3) for x in "ab"}
            if phases == {"Ready"} and manager.queue.idle():
                break
            time.sleep(0.05)
    finally:
        manager.stop(timeout=10)
    assert phases == {"Ready"}
    assert watch.overlaps == []
    assert len({t for t in watch.threads if t.startswith("worker-")}) > 1  # still parallel


def test_a_key_added_while_processed_is_handed_out_again_unless_discarded() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("api")
    assert queue.get(timeout=1) == "api"
    queue.add("api")  # while processed: parked, handed out once the worker is done
    queue.done("api")
    assert queue.get(timeout=1) == "api"
    queue.add("api")
    queue.discard_parked("api")  # the worker found nothing new (a terminal outcome)
    queue.done("api")
    assert len(queue) == 0 and queue.get(timeout=0.05) is None


def test_a_terminal_key_asked_for_again_with_nothing_new_is_not_retried(
        db: Database, monkeypatch: Any) -> None:
    """A permanent failure ran twice at every daemon start (the first watcher batch syncs
    the directory again and queued it; the desired-state watcher could race the outcome).
    Whoever queues it, a terminal key with the same desired version is not handed to a
    reconcile again; the periodic resync (drift) still is, and a new spec at once."""
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@p:perm")
    apply(db, cell_doc("p"))
    key = live_keys(db)[0]
    manager = Manager(db.state_dir, workers=2, resync_seconds=0)

    def ops() -> int:
        return db.conn.execute("SELECT COUNT(*) FROM operations").fetchone()[0]

    def settle(count: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (ops() < count or not manager.queue.idle()):
            time.sleep(0.05)
        time.sleep(0.3)  # whatever else would run, has

    manager.enqueue(key, trigger="startup")
    manager.start()
    try:
        settle(1)
        for trigger in ("watch", "apply", "startup", "watch"):
            manager.enqueue(key, trigger=trigger)
            settle(1)
        assert ops() == 1
        manager.enqueue(key, trigger="drift")  # the resync looks again
        settle(2)
        assert ops() == 2
        apply(db, cell_doc("p", image="other:1"))  # a new spec: tried at once
        settle(3)
        assert ops() == 3
    finally:
        manager.stop(timeout=10)


def test_a_state_database_that_cannot_record_is_logged_by_name_and_retried(
        db: Database, monkeypatch: Any) -> None:
    """A full disk under the daemon: the reconcile's StateUnusable is one log line naming
    it (no traceback: nothing there is a bug), and the key is retried with backoff."""
    from loguru import logger

    from devcell.errors import StateUnusable, StorageError
    from devcell.reconciler import reconcile

    apply(db, cell_doc("p"))
    key = live_keys(db)[0]
    calls: list[int] = []
    real = reconcile.reconcile

    def full_once(ctx: Any, k: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise StateUnusable("cannot write state.db: the disk is full",
                                cause=StorageError.DISK_FULL, path="state.db")
        return real(ctx, k)

    monkeypatch.setattr(reconcile, "reconcile", full_once)
    records: list[Any] = []
    logger.enable("devcell")
    sink = logger.add(records.append, level="ERROR", format="{message}",
                      diagnose=False)
    manager = Manager(db.state_dir, workers=1, resync_seconds=0)
    manager.enqueue(key, trigger="startup")
    manager.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(calls) < 2:
            time.sleep(0.05)
    finally:
        manager.stop(timeout=10)
        logger.remove(sink)
    assert len(calls) >= 2  # retried
    named = [r for r in records if "the disk is full" in r.record["message"]]
    assert named and all(r.record["exception"] is None for r in named)


def test_a_settled_key_with_something_due_is_queued_for_that_moment(db: Database) -> None:
    """Retention's wake-up: `done` with a delay queues the key then, as trigger `schedule`,
    unless another reason asks first (a user's `cell start` stays the user's)."""
    from devcell.controllers.context import Context
    from devcell.reconciler import reconcile

    manager = Manager(db.state_dir, workers=1, resync_seconds=0)
    ctx = Context(db, trigger="test")
    key = ("Cell", "cell_x")
    manager._handle(ctx, key, reconcile.Outcome(reconcile.Result.DONE, after=0.3), None)
    assert manager.queue.get(timeout=0.1) is None  # not before it is due
    started = time.monotonic()
    assert manager.queue.get(timeout=2) == key
    assert time.monotonic() - started >= 0.15
    assert key in manager._scheduled and key not in manager._triggers
    manager.queue.done(key)
    manager.enqueue(key, trigger="apply")  # another reason meanwhile names it
    assert manager._triggers[key] == "apply"
    manager._handle(ctx, key, reconcile.Outcome(reconcile.Result.DONE), None)
    assert manager.queue.get(timeout=0.3) == key  # (the apply's add); nothing more queued
    manager.queue.done(key)
    assert manager.queue.get(timeout=0.3) is None
    ctx.close()
