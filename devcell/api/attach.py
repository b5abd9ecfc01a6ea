"""Attach to a recorded cell's runtime (`devcell exec`, `devcell logs`): find the cell, observe
its runtime first, and hand back the backend that reaches it.

Observing first means a runtime stopped, paused or gone behind DevCell's back is recorded as
such (so `get` and `cell start` know) before a command acts on it, and the caller can say so.
"""

from __future__ import annotations

from pathlib import Path

from devcell import backends
from devcell.backends.base import Backend, CellRef
from devcell.backends.interactive import Interactive, interactive, no_exec
from devcell.records import MutableRecord, Record
from devcell.store import objects, volumes
from devcell.store.db import open_database


class Drift(Record):
    """The runtime as observed, when it differs from the recorded phase."""

    seen: str
    recorded: str


class Attached(MutableRecord):
    backend: Backend
    backend_name: str
    ref: CellRef
    drift: Drift | None
    phase: str = ""
    """The cell's recorded phase (Sleeping: api/wake.py wakes it before using it)."""

    def interactive(self) -> Interactive:
        """The backend, as one that runs commands and keeps logs; CapabilityMissing if not."""
        return interactive(self.backend, self.backend_name)

    def close(self) -> None:
        self.backend.close()


def attach(state_dir: str | Path | None, cell_name: str) -> Attached:
    """The cell named (or with id) `cell_name`, observed; NotFound when not recorded."""
    from devcell.reconciler import observe

    db = open_database(state_dir)
    try:
        cell = objects.require(db.conn, "Cell", cell_name)
        if not backends.capabilities(cell.extra["backend"]).exec:
            raise no_exec(cell.extra["backend"])  # before observing: a refusal records nothing
        volume = volumes.for_cell(db.conn, cell.id)
        drifted = observe.observe_and_record(db, [cell.id]).drifted.get(cell.id)
    finally:
        db.close()
    backend_name = cell.extra["backend"]
    backend = backends.load(backend_name, Path(db.state_dir))
    ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
    drift = None if drifted is None else Drift(seen=drifted.seen, recorded=cell.phase)
    return Attached(backend, backend_name, ref, drift, phase=cell.phase)
