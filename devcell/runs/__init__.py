"""Run snapshots: what a suspended operation needs to continue, and the stores that keep them.

    from devcell.runs import create_file_snapshot_store, RunSnapshot, StorageError

    store = create_file_snapshot_store(root=state_dir)   # or create_sqlite_snapshot_store(path=...)
    store.save(snapshot)                                  # atomic and durable
    store.load(run_id)                                    # the snapshot, or None
    store.delete(run_id)                                  # no error if there is none

Modules, one job each: `model` (the values), `store` (the SnapshotStore protocol), `runid`
(which run ids are safe), `schema` and `envelope` (the stored bytes and every check a load
makes), `file_store`, `sqlite_store`, `memory_store` (the adapters), `oserrors` (errno to
StorageError code). The adapters, and with them jsonschema and sqlite3, are imported only when
a store is created. See docs/runs.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from devcell.errors import StorageError
from devcell.runs.model import FORMAT_VERSION, CompletedStep, RunSnapshot, RunStatus, utc_timestamp
from devcell.runs.store import SnapshotStore

if TYPE_CHECKING:
    from devcell.runs.file_store import FileSnapshotStore
    from devcell.runs.memory_store import InMemorySnapshotStore
    from devcell.runs.sqlite_store import SqliteSnapshotStore

__all__ = [
    "FORMAT_VERSION", "STORE_KINDS", "CompletedStep", "RunSnapshot", "RunStatus", "SnapshotStore",
    "StorageError", "create_file_snapshot_store", "create_in_memory_snapshot_store",
    "create_sqlite_snapshot_store", "open_store", "utc_timestamp",
]


def create_file_snapshot_store(*, root: str | os.PathLike[str]) -> FileSnapshotStore:
    """Snapshots as `<root>/runs/<runId>/snapshot.json` (directories created on first save)."""
    from devcell.runs import file_store

    return file_store.FileSnapshotStore(Path(root))


def create_sqlite_snapshot_store(*, path: str | os.PathLike[str]) -> SqliteSnapshotStore:
    """Snapshots in the `run_snapshots` table of the SQLite database at `path` (WAL,
    synchronous=FULL; the file and the table are created on first use). `:memory:` is a
    private in-memory database, as with sqlite3 (no file is created)."""
    from devcell.runs import sqlite_store

    return sqlite_store.SqliteSnapshotStore(Path(path))


def create_in_memory_snapshot_store() -> InMemorySnapshotStore:
    """Snapshots in a dict: returned as saved (the same objects), never validated."""
    from devcell.runs import memory_store

    return memory_store.InMemorySnapshotStore()


STORE_KINDS = ("sqlite", "file")
"""What `--run-store` (or $DEVCELL_RUN_STORE) may name."""


def open_store(state_dir: Path, kind: str | None = None) -> SnapshotStore:
    """The run-snapshot store of a state directory: SQLite in its state.db by default, or
    one JSON file per run under it (`--run-store file`)."""
    from devcell.errors import UsageError

    kind = kind or os.environ.get("DEVCELL_RUN_STORE") or "sqlite"
    if kind == "sqlite":
        return create_sqlite_snapshot_store(path=state_dir / "state.db")
    if kind == "file":
        return create_file_snapshot_store(root=state_dir)
    raise UsageError(f"unknown run store {kind!r} (one of: {', '.join(STORE_KINDS)})")
