"""Shared builders for the run-store tests: stores by adapter name, sample snapshots, raw bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from devcell.runs import (
    CompletedStep,
    RunSnapshot,
    SnapshotStore,
    create_file_snapshot_store,
    create_in_memory_snapshot_store,
    create_sqlite_snapshot_store,
)

ADAPTERS = ("file", "sqlite", "memory")
PERSISTENT = ("file", "sqlite")


def make_store(kind: str, tmp_path: Path) -> SnapshotStore:
    if kind == "file":
        return create_file_snapshot_store(root=tmp_path / "state")
    if kind == "sqlite":
        return create_sqlite_snapshot_store(path=tmp_path / "state" / "runs.db")
    if kind == "memory":
        return create_in_memory_snapshot_store()
    raise ValueError(kind)


def make_snapshot(run_id: str = "op_0001", **changes: Any) -> RunSnapshot:
    """A realistic snapshot: a checkpoint plan suspended at its copy step, awaiting approval."""
    fields: dict[str, Any] = {
        "run_id": run_id,
        "plan_id": "plan_7f3a",
        "plan": [
            {"stepId": "quiesce", "action": "quiesce", "cell": "api"},
            {"stepId": "copy", "action": "copy-workspace", "cell": "api", "bytes": 1048576},
            {"stepId": "record", "action": "record-snapshot", "snapshot": "nightly"},
            {"stepId": "resume", "action": "resume", "always": True},
        ],
        "completed_steps": (
            CompletedStep(step_id="quiesce", outputs={"frozen": True, "services": 2,
                                                       "took": 0.25, "note": None}),
        ),
        "suspended_step_id": "copy",
        "resume_schema": {
            "type": "object",
            "required": ["approve"],
            "properties": {"approve": {"const": True}, "reason": {"type": "string"}},
        },
        "suspended_at": "2025-01-31T12:00:00.000Z",
    }
    fields.update(changes)
    return RunSnapshot(**fields)


def location(store: SnapshotStore, run_id: str) -> str:
    """The path a StorageError about `run_id` carries in this store."""
    if hasattr(store, "path_of"):
        return str(store.path_of(run_id))
    return str(store.where(run_id))  # type: ignore[attr-defined]


def read_raw(store: SnapshotStore, run_id: str) -> bytes:
    if hasattr(store, "path_of"):
        return Path(store.path_of(run_id)).read_bytes()
    with sqlite3.connect(store.path) as conn:  # type: ignore[attr-defined]
        row = conn.execute("SELECT envelope FROM run_snapshots WHERE run_id = ?",
                           (run_id,)).fetchone()
    assert row is not None
    return bytes(row[0])


def write_raw(store: SnapshotStore, run_id: str, data: bytes) -> None:
    """Put `data` where the store keeps `run_id`'s snapshot, bypassing every check."""
    if hasattr(store, "path_of"):
        path = Path(store.path_of(run_id))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return
    conn = sqlite3.connect(store.path)  # type: ignore[attr-defined]
    try:
        with conn:
            conn.execute("INSERT INTO run_snapshots (run_id, envelope, saved_at) VALUES (?, ?, '') "
                         "ON CONFLICT (run_id) DO UPDATE SET envelope = excluded.envelope",
                         (run_id, data))
    finally:
        conn.close()
