"""The one interface every snapshot store implements (file, SQLite, in-memory).

Contract, checked by tests/runs/test_conformance.py for every adapter:
- `save(snapshot)` stores it under `snapshot.run_id`, replacing any earlier snapshot of that run;
  a later `load` returns the new one or, if the save raised, the old one: never a mixture.
- `load(run_id)` returns the snapshot, or None when the run has none. The persistent stores
  raise StorageError(CORRUPT_SNAPSHOT) rather than return something that fails their checks.
- `delete(run_id)` removes it; deleting a run with no snapshot is not an error.
- `close()` releases what the store holds open (a database connection); it can be reopened by
  using it again.
Every method raises StorageError(INVALID_RUN_ID) for a run id that `runid.check` refuses, and
StorageError with a code of its own (PERMISSION_DENIED, DISK_FULL, ...) for any other failure.
"""

from __future__ import annotations

from typing import Protocol

from devcell.runs import model


class SnapshotStore(Protocol):
    def save(self, snapshot: model.RunSnapshot) -> None: ...

    def load(self, run_id: str) -> model.RunSnapshot | None: ...

    def delete(self, run_id: str) -> None: ...

    def close(self) -> None: ...
