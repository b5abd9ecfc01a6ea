"""Capacity accounting for `get cells|snapshots -o wide`: what each takes, measured now.

The backends measure (Accounting: the filesystem, each inode once, and the engine's
cgroups); the database only says whose each thing is. Nothing here runs unless `-o wide`
asks, so a plain `get` stays fast. `devcell df` (api/df.py) uses the same helpers.
"""

from __future__ import annotations

from pathlib import Path

from devcell import backends
from devcell.backends.base import Backend
from devcell.backends.capacity import Accounting, CheckpointUsage, RuntimeUsage, WorkspaceUsage
from devcell.errors import BackendError, BackendUnavailable, UnknownBackend
from devcell.records import MutableRecord, Record, field
from devcell.store import capacity as records
from devcell.store.db import Database

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any


class CellUsage(Record):
    workspace: WorkspaceUsage | None = None
    runtime: RuntimeUsage | None = None


class Problems(MutableRecord):
    """Why some figures are missing (an engine unreachable, a tree that changed while it was
    walked): said once each, on stderr, by the CLI."""

    messages: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if text not in self.messages:
            self.messages.append(text)


def open_backend(name: str, state_dir: Path, problems: Problems) -> Backend | None:
    try:
        return backends.load(name, state_dir)
    except (BackendUnavailable, UnknownBackend) as exc:
        problems.add(f"backend {name}: {exc}")
        return None


def measurer(name: str, state_dir: Path) -> Accounting | None:
    """Backend `name`'s Accounting, or None when it keeps nothing to measure."""
    return backends.accounting(name, state_dir)


def cells(db: Database, rows: list[dict[str, Any]], problems: Problems
          ) -> dict[str, CellUsage]:
    """Cell id -> its workspace and runtime, for cells whose backend measures (Accounting)."""
    by_backend: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_backend.setdefault(str(row["backend"]), []).append(row)
    volumes = records.live_volumes(db.conn, [str(r["id"]) for r in rows])
    out: dict[str, CellUsage] = {}
    for name, group in by_backend.items():
        backend = measurer(name, db.state_dir)
        if backend is None:
            continue
        try:
            found_runtimes = measure_runtimes(backend, name, problems, sizes=False)
            for row in group:
                cell_id = str(row["id"])
                held = volumes.get(cell_id, [])
                out[cell_id] = CellUsage(
                    measure_workspace(backend, held[0], problems) if held else None,
                    found_runtimes.get(cell_id))
        finally:
            backend.close()
    return out


def measure_runtimes(backend: Accounting, name: str, problems: Problems, *, sizes: bool
                     ) -> dict[str, RuntimeUsage]:
    try:
        return backend.runtimes_usage(sizes=sizes)
    except BackendError as exc:
        problems.add(f"backend {name}: runtimes not measured: {exc}")
        return {}


def measure_workspace(backend: Accounting, volume_id: str, problems: Problems
                      ) -> WorkspaceUsage | None:
    try:
        return backend.workspace_usage(volume_id)
    except BackendError as exc:
        problems.add(f"volume {volume_id} not measured: {exc}")
        return None


def snapshots(db: Database, rows: list[dict[str, Any]], problems: Problems
              ) -> dict[str, CheckpointUsage]:
    """Snapshot id -> its checkpoint's size and unique bytes, where its backend measures."""
    taken = records.checkpoints_of(db.conn, [str(r["id"]) for r in rows])
    by_backend: dict[str, list[str]] = {}
    for snap_id, name in taken.items():
        by_backend.setdefault(name, []).append(snap_id)
    out: dict[str, CheckpointUsage] = {}
    for name, wanted in by_backend.items():
        backend = measurer(name, db.state_dir)
        if backend is None:
            continue
        try:
            for item in backend.checkpoints_usage(wanted).items:
                out[item.checkpoint_id] = item
        except BackendError as exc:
            problems.add(f"backend {name}: checkpoints not measured: {exc}")
        finally:
            backend.close()
    return out
