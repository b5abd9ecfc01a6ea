"""The in-memory store, for tests and ephemeral runs: a dict, no copies, no validation.

`load` returns the very object that was saved. Run ids are still checked, so code that works
against this store does not meet INVALID_RUN_ID for the first time against a persistent one.
"""

from __future__ import annotations

import threading

from devcell.runs import model, runid

_WHERE = "<memory>"


class InMemorySnapshotStore:
    def __init__(self) -> None:
        self._snapshots: dict[str, model.RunSnapshot] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InMemorySnapshotStore({len(self._snapshots)} run(s))"

    def save(self, snapshot: model.RunSnapshot) -> None:
        run_id = runid.check(getattr(snapshot, "run_id", None), store=_WHERE)
        with self._lock:
            self._snapshots[run_id] = snapshot

    def load(self, run_id: str) -> model.RunSnapshot | None:
        runid.check(run_id, store=_WHERE)
        with self._lock:
            return self._snapshots.get(run_id)

    def delete(self, run_id: str) -> None:
        runid.check(run_id, store=_WHERE)
        with self._lock:
            self._snapshots.pop(run_id, None)

    def close(self) -> None:
        """Nothing to release; the snapshots stay until the store is dropped."""
