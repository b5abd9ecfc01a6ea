"""The daemon's workers: parallel, but never a cell and its snapshots at once."""

from __future__ import annotations

import threading
import time
from typing import Any

from devcell.controllers.cell import CellController
from devcell.controllers.snapshot import SnapshotController
from devcell.reconciler.context import Context
from devcell.reconciler.manager import Manager
from devcell.store.db import Database
from tests.controllers.support import apply, cell_doc, live_keys, record, snapshot_doc


def test_workers_never_reconcile_a_cell_and_its_snapshots_at_once(
        db: Database, monkeypatch: Any) -> None:
    lock = threading.Lock()
    active: dict[str, int] = {}
    overlaps: list[str] = []
    seen_threads: set[str] = set()

    def watched(original: Any, group_of: Any) -> Any:
        def decide(self: Any, c: Context, object_id: str) -> Any:
            group = group_of(c, object_id)
            with lock:
                seen_threads.add(threading.current_thread().name)
                active[group] = active.get(group, 0) + 1
                if active[group] > 1:
                    overlaps.append(group)
            try:
                time.sleep(0.02)
                return original(self, c, object_id)
            finally:
                with lock:
                    active[group] -= 1
        return decide

    def snapshot_cell(c: Context, object_id: str) -> str:
        row = c.db.conn.execute("SELECT cell_id FROM snapshots WHERE id = ?",
                                (object_id,)).fetchone()
        return str(row[0])

    monkeypatch.setattr(CellController, "decide",
                        watched(CellController.decide, lambda c, oid: oid))
    monkeypatch.setattr(SnapshotController, "decide",
                        watched(SnapshotController.decide, snapshot_cell))
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
    assert overlaps == []
    assert len({t for t in seen_threads if t.startswith("worker-")}) > 1  # still parallel
