"""What a reconcile needs: the database, the backends (opened lazily) and why it runs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from devcell import backends
from devcell.records import MutableRecord, field

if TYPE_CHECKING:
    from devcell.backends.base import Backend
    from devcell.runs.store import SnapshotStore
    from devcell.store.db import Database


class Context(MutableRecord):
    """What one reconcile works with: the database, who asked, how runs are kept, the
    backends loaded so far, and the shutdown signal."""

    db: Database
    trigger: str = "apply"
    run_store_kind: str | None = None
    """sqlite (default, in state.db) or file (<state>/runs/); see run_store()."""
    suspend_on_stop: bool = False
    """On graceful shutdown, suspend in-flight operations (the daemon) instead of failing them."""
    runs: SnapshotStore | None = None
    approve: bool = False
    """Pass approval gates up front (`--approve`)."""
    current_op: str | None = None
    """The operation whose step is running (backends label what they create with it)."""
    stopping: threading.Event | None = None
    """Set on graceful shutdown: finish the step in flight (and compensations), start no more."""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    """The time retention judges by (ttl expiry, schedules): tests pass a fake one."""
    _backends: dict[str, Backend] = field(default_factory=dict)

    def backend(self, name: str) -> Backend:
        if name not in self._backends:
            self._backends[name] = backends.load(name, self.db.state_dir)
        return self._backends[name]

    def run_store(self) -> SnapshotStore:
        """The run-snapshot store, opened on first use."""
        if self.runs is None:
            from devcell import runs

            self.runs = runs.open_store(self.db.state_dir, self.run_store_kind)
        return self.runs

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends.clear()
        if self.runs is not None:
            self.runs.close()
