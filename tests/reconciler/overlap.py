"""Watch for a cell and one of its snapshots being decided at the same time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from devcell.controllers.cell import CellController
from devcell.controllers.context import Context
from devcell.controllers.snapshot import SnapshotController


@dataclass
class OverlapWatch:
    overlaps: list[str] = field(default_factory=list)
    """Cell ids that had two decisions (the cell's or its snapshots') in flight at once."""
    threads: set[str] = field(default_factory=set)
    _active: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wrap(self, original: Any, group_of: Any, pause: float) -> Any:
        def decide(controller: Any, ctx: Context, object_id: str) -> Any:
            group = group_of(ctx, object_id)
            with self._lock:
                self.threads.add(threading.current_thread().name)
                self._active[group] = self._active.get(group, 0) + 1
                if self._active[group] > 1:
                    self.overlaps.append(group)
            try:
                time.sleep(pause)  # widen the window a race would need
                return original(controller, ctx, object_id)
            finally:
                with self._lock:
                    self._active[group] -= 1
        return decide


def _snapshot_cell(ctx: Context, object_id: str) -> str:
    row = ctx.db.conn.execute("SELECT cell_id FROM snapshots WHERE id = ?",
                              (object_id,)).fetchone()
    return str(row[0])


def watch_overlaps(monkeypatch: pytest.MonkeyPatch, pause: float = 0.01) -> OverlapWatch:
    watch = OverlapWatch()
    monkeypatch.setattr(CellController, "decide",
                        watch.wrap(CellController.decide, lambda c, oid: oid, pause))
    monkeypatch.setattr(SnapshotController, "decide",
                        watch.wrap(SnapshotController.decide, _snapshot_cell, pause))
    return watch
