"""Which run-snapshot store a reconciler uses: `--run-store file|sqlite` (or
$DEVCELL_RUN_STORE), SQLite in the state directory by default."""

from __future__ import annotations

import os
from pathlib import Path

from devcell.errors import UsageError
from devcell.runs.store import SnapshotStore

KINDS = ("sqlite", "file")


def open_run_store(state_dir: Path, kind: str | None = None) -> SnapshotStore:
    from devcell import runs

    kind = kind or os.environ.get("DEVCELL_RUN_STORE") or "sqlite"
    if kind == "sqlite":
        return runs.create_sqlite_snapshot_store(path=state_dir / "state.db")
    if kind == "file":
        return runs.create_file_snapshot_store(root=state_dir)
    raise UsageError(f"unknown run store {kind!r} (one of: {', '.join(KINDS)})")
