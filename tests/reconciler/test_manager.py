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
