"""The fake backend: control-plane state only, deterministic, instant.

It keeps its "world" in `<state>/backends/fake.db` so that separate `devcell` processes see
the same cells, and logs every mutating call there (tests use the log to prove a call was or
was not made). It never claims to preserve files: its snapshots are `metadata` only.

Slow steps: `DEVCELL_FAKE_DELAY="step:seconds,..."` (e.g. `start:2`).

Fault injection: `DEVCELL_FAKE_FAIL="step[@cell][:count],..."` (or `failures=` in code)
makes the named step fail; with a count, only the first `count` matching calls fail in this
process. Example: `DEVCELL_FAKE_FAIL=start@api:1`. The count `perm` (`start@api:perm`) makes
every matching call fail with a permanent error, as a missing image would: the reconcile is
terminal and the daemon does not retry it. Other injected failures are temporary.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell.backends.base import (
    Capabilities,
    CellRef,
    Changes,
    CheckpointInfo,
    Consistency,
    Fill,
    Observed,
    Outputs,
    Owned,
    OwnedKind,
)
from devcell.errors import BackendError, BackendNotFound, BackendRefused
from devcell.records import MutableRecord
from devcell.store import faults

if TYPE_CHECKING:
    import threading

_SCHEMA = """
CREATE TABLE IF NOT EXISTS cells (id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL,
    runtime_hash TEXT, volume_id TEXT, frozen INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS volumes (id TEXT PRIMARY KEY, cell_id TEXT, cell_name TEXT,
    from_checkpoint TEXT, writes INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS volumes_by_cell ON volumes(cell_id);
CREATE TABLE IF NOT EXISTS checkpoints (id TEXT PRIMARY KEY, cell_id TEXT, cell_name TEXT,
    volume_id TEXT, volume_writes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS calls (seq INTEGER PRIMARY KEY, method TEXT NOT NULL,
    target TEXT NOT NULL, outcome TEXT NOT NULL);
"""


class InjectedPermanentFailure(BackendError):
    """An injected failure (`step:perm`) that waiting cannot mend.

    Its own class, so tests can make the fake fail the way ImageNotFound or a refused mount
    fails a real backend (terminal: recorded once, not retried) without a Docker engine.
    """

    reason = "InjectedPermanentFailure"
    permanent = True


PERMANENT = "perm"
"""The count that makes an injected failure permanent: `start@api:perm`."""


class Failure(MutableRecord):
    step: str
    cell: str | None
    remaining: int | None
    permanent: bool = False


def parse_failures(text: str) -> list[Failure]:
    """`step[@cell][:count|:perm],...`; steps by their recorded name (create-volume) or
    method name."""
    out = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        spec, _, count = item.partition(":")
        step, _, cell = spec.partition("@")
        permanent = count == PERMANENT
        remaining = int(count) if count and not permanent else None
        out.append(Failure(step.replace("-", "_"), cell or None, remaining, permanent))
    return out


_ENV_FAILURES: dict[str, list[Failure]] = {}
_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because another connection holds a lock (worth waiting for),
    judged by its result code; an extended code keeps the primary one in its low byte."""
    code = getattr(exc, "sqlite_errorcode", None)  # absent on errors not raised by SQLite
    return code is not None and code & 0xFF in _BUSY_CODES


def _env_failures() -> list[Failure]:
    """Failures from DEVCELL_FAKE_FAIL, shared by every instance so counts are per process."""
    text = os.environ.get("DEVCELL_FAKE_FAIL", "")
    if text not in _ENV_FAILURES:
        _ENV_FAILURES[text] = parse_failures(text)
    return _ENV_FAILURES[text]


WATCH_POLL_S = 0.02
"""How often the fake's watch looks at its world (it has no event stream to follow)."""


def _row_observed(state: str, runtime_hash: str | None, frozen: int,
                  services: str | None = None) -> Observed:
    detail: dict[str, Any] = {"state": state}
    if state == "running":  # as the container's: {} until its supervisor writes a state
        detail["services"] = json.loads(services) if services else {}
    return Observed(exists=True, running=state == "running", runtime_hash=runtime_hash,
                    frozen=bool(frozen), detail=detail)


def observe_all(state_dir: Path) -> dict[str, Observed]:
    """Every cell runtime the fake holds for `state_dir`, read-only, in one query."""
    path = state_dir / "backends" / "fake.db"
    if not path.exists():
        return {}
    conn = faults.connect(path, timeout=60, read_only=True)
    try:
        # A backend opening its database for the first time creates the file before the
        # schema: until the table exists, the fake holds no runtimes.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cells'"
                        ).fetchone() is None:
            return {}
        have = {r[1] for r in conn.execute("PRAGMA table_info(cells)")}
        services = "services" if "services" in have else "NULL"
        return {r[0]: _row_observed(*r[1:]) for r in conn.execute(
            f"SELECT id, state, runtime_hash, frozen, {services} FROM cells")}
    finally:
        conn.close()


class FakeBackend:
    name = "fake"
    capabilities = Capabilities(snapshot_consistency=Consistency.METADATA, service_state=True,
                                start_hooks=True)

    def __init__(self, *, state_dir: Path, failures: list[Failure] | None = None) -> None:
        directory = state_dir / "backends"
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.conn = faults.connect(directory / "fake.db", timeout=60)  # made owner-only
        self.conn.execute("PRAGMA busy_timeout = 60000")
        self._ensure_wal()
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.executescript(_SCHEMA)
        for table, column, kind in (("volumes", "writes", "INTEGER NOT NULL DEFAULT 0"),
                                    ("checkpoints", "volume_writes", "INTEGER NOT NULL DEFAULT 0"),
                                    ("volumes", "restored_from", "TEXT"),
                                    ("cells", "services", "TEXT")):
            have = {r[1] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            if column not in have:  # a fake.db made by an older DevCell
                try:
                    self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:
                    # Another worker opening the same fake.db added it between our look and
                    # our ALTER (parallel turns of one converge).
                    if "duplicate column name" not in str(exc):
                        raise
        self.failures = failures if failures is not None else _env_failures()

    def _ensure_wal(self) -> None:
        # Switching a new database to WAL needs an exclusive lock that SQLite does not always
        # wait for; several workers opening a fresh state directory retry instead of failing.
        delay = 0.005
        for _ in range(200):
            try:
                if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        raise BackendError("the fake backend's database stayed locked")

    def close(self) -> None:
        self.conn.close()

    # -- helpers ---------------------------------------------------------------------------

    def _maybe_delay(self, step: str) -> None:
        """DEVCELL_FAKE_DELAY="step:seconds,...": a slow step, to stop a daemon mid-operation."""
        for item in filter(None, os.environ.get("DEVCELL_FAKE_DELAY", "").split(",")):
            name, _, seconds = item.partition(":")
            if name.replace("-", "_") == step.replace("-", "_"):
                time.sleep(float(seconds or 0))

    def _maybe_fail(self, step: str, cell_name: str) -> None:
        self._maybe_delay(step)
        for failure in self.failures:
            if failure.step != step.replace("-", "_") or (failure.cell and failure.cell != cell_name):
                continue
            if failure.remaining is not None:
                if failure.remaining <= 0:
                    continue
                failure.remaining -= 1
            self._log(step, cell_name, "injected-failure")
            message = f"injected failure in step {step} (DEVCELL_FAKE_FAIL)"
            if failure.permanent:
                raise InjectedPermanentFailure(message)
            raise BackendError(message)

    def _log(self, method: str, target: str, outcome: str = "ok") -> None:
        self.conn.execute(
            "INSERT INTO calls (method, target, outcome) VALUES (?, ?, ?)", (method, target, outcome)
        )

    def _mutate(self, method: str, target: str, sql: str, params: tuple[object, ...]) -> int:
        self._maybe_fail(method, target)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            count = self.conn.execute(sql, params).rowcount
            self._log(method, target)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return count

    def _owner(self, table: str, resource_id: str) -> str:
        """The cell name a volume or checkpoint belongs to (log and fault target)."""
        row = self.conn.execute(f"SELECT cell_name FROM {table} WHERE id = ?",
                                (resource_id,)).fetchone()
        return row[0] if row and row[0] else resource_id

    def calls(self) -> list[tuple[str, str, str]]:
        """The call log, oldest first: (method, target, outcome)."""
        return [tuple(r) for r in self.conn.execute(
            "SELECT method, target, outcome FROM calls ORDER BY seq")]

    # -- Backend protocol ------------------------------------------------------------------

    def observe(self, cell: CellRef) -> Observed:
        row = self.conn.execute(
            "SELECT state, runtime_hash, frozen, services FROM cells WHERE id = ?", (cell.id,)
        ).fetchone()
        if row is None:
            return Observed(exists=False)
        return _row_observed(*row)

    def watch(self, on_event: Callable[[str], None], *, stop: threading.Event,
              on_open: Callable[[], None]) -> None:
        """The fake's stand-in for an engine's event stream: its world, polled; every cell
        whose runtime changed (by DevCell or behind its back) is reported."""
        def world() -> dict[str, tuple[str, int]]:
            return {r[0]: (r[1], r[2]) for r in self.conn.execute(
                "SELECT id, state, frozen FROM cells")}

        seen = world()
        on_open()
        while not stop.wait(WATCH_POLL_S):
            now = world()
            for cell_id in sorted(set(seen) | set(now)):
                if seen.get(cell_id) != now.get(cell_id):
                    on_event(cell_id)
            seen = now

    def behind_back(self, cell_id: str, *, state: str | None = None, frozen: bool | None = None,
                    gone: bool = False) -> None:
        """Test hook: change a runtime as someone outside DevCell would (`docker stop`,
        `docker pause`, `docker rm`, an engine restart); not logged as a call."""
        if gone:
            self.conn.execute("DELETE FROM cells WHERE id = ?", (cell_id,))
        if state is not None:
            self.conn.execute("UPDATE cells SET state = ? WHERE id = ?", (state, cell_id))
        if frozen is not None:
            self.conn.execute("UPDATE cells SET frozen = ? WHERE id = ?", (int(frozen), cell_id))

    def set_services(self, cell_id: str, services: dict[str, dict[str, Any]] | None) -> None:
        """Test hook: what the cell's supervisor reports of its services (as the container
        backend reads its state files: backends/service_state.py); None reports nothing."""
        self.conn.execute("UPDATE cells SET services = ? WHERE id = ?",
                          (None if services is None else json.dumps(services), cell_id))

    def restart_service(self, cell: CellRef, service: str) -> Outputs:
        self._maybe_fail("restart_service", cell.name)
        self._log("restart_service", f"{cell.name}/{service}")
        return {"service": service, "restarted": True}

    def volume_exists(self, volume_id: str) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM volumes WHERE id = ?", (volume_id,)).fetchone() is not None

    def create_volume(self, cell: CellRef, volume_id: str, *, from_checkpoint: str | None
                      ) -> Outputs:
        if from_checkpoint is not None and not self.checkpoint_exists(from_checkpoint):
            raise BackendNotFound(f"checkpoint {from_checkpoint} does not exist")
        self._mutate("create_volume", cell.name,
                     "INSERT OR IGNORE INTO volumes (id, cell_id, cell_name, from_checkpoint) "
                     "VALUES (?, ?, ?, ?)", (volume_id, cell.id, cell.name, from_checkpoint))
        return {"volume": volume_id, "restoredFrom": from_checkpoint}

    def delete_volume(self, volume_id: str) -> Outputs:
        self._mutate("delete_volume", self._owner("volumes", volume_id),
                     "DELETE FROM volumes WHERE id = ?", (volume_id,))
        return {"volume": volume_id}

    def create(self, cell: CellRef, runtime_hash: str) -> Outputs:
        self._mutate(
            "create", cell.name,
            "INSERT INTO cells (id, name, state, runtime_hash, volume_id) "
            "VALUES (?, ?, 'created', ?, ?) ON CONFLICT(id) DO UPDATE SET "
            "runtime_hash = excluded.runtime_hash, volume_id = excluded.volume_id, services = NULL",
            (cell.id, cell.name, runtime_hash, cell.volume_id),
        )
        return {"runtime": f"fake://{cell.id}"}

    def start(self, cell: CellRef) -> Outputs:
        row = self.conn.execute("SELECT state FROM cells WHERE id = ?", (cell.id,)).fetchone()
        if not self._mutate("start", cell.name,
                            "UPDATE cells SET state = 'running' WHERE id = ?", (cell.id,)):
            raise BackendNotFound(f"cell {cell.name} does not exist in the fake backend")
        if row is not None and row[0] == "created":
            return self._post_create(cell)
        return {}

    def _post_create(self, cell: CellRef) -> Outputs:
        """The outcome of the cell's postCreate hooks (none run: the fake holds no processes);
        a failure is injected as `post_create@cell` and is an outcome, as the container's."""
        hooks = (cell.spec.get("hooks") or {}).get("postCreate") or []
        if not hooks:
            return {}
        try:
            self._maybe_fail("post_create", cell.name)
        except BackendError as exc:
            return {"hooks": 0, "postCreate": "Failed", "hook": " ".join(hooks[0])[:200],
                    "exitCode": 1, "output": str(exc)}
        self._log("post_create", cell.name)
        return {"hooks": len(hooks), "postCreate": "Succeeded"}

    def rerun_hooks(self, cell: CellRef) -> Outputs:
        row = self.conn.execute("SELECT state FROM cells WHERE id = ?", (cell.id,)).fetchone()
        if row is None or row[0] != "running":
            raise BackendError(f"cell {cell.name} is not running; start it with "
                               f"`devcell cell start {cell.name}`")
        return self._post_create(cell) or {"hooks": 0}

    def stop(self, cell: CellRef) -> Outputs:
        self._mutate("stop", cell.name, "UPDATE cells SET state = 'stopped' WHERE id = ?",
                     (cell.id,))
        return {}

    def delete(self, cell: CellRef) -> Outputs:
        self._mutate("delete", cell.name, "DELETE FROM cells WHERE id = ?", (cell.id,))
        return {}

    def quiesce(self, cell: CellRef) -> Outputs:
        self._mutate("quiesce", cell.name, "UPDATE cells SET frozen = 1 WHERE id = ?", (cell.id,))
        return {"frozen": True}

    def checkpoint(self, cell: CellRef, checkpoint_id: str) -> CheckpointInfo:
        self._mutate("checkpoint", cell.name,
                     "INSERT OR IGNORE INTO checkpoints (id, cell_id, cell_name, volume_id, "
                     "volume_writes) VALUES (?, ?, ?, ?, (SELECT coalesce(max(writes), 0) FROM "
                     "volumes WHERE id = ?))",
                     (checkpoint_id, cell.id, cell.name, cell.volume_id, cell.volume_id))
        return CheckpointInfo(ref=f"fake://{checkpoint_id}", consistency=Consistency.METADATA)

    def resume(self, cell: CellRef) -> Outputs:
        self._mutate("resume", cell.name, "UPDATE cells SET frozen = 0 WHERE id = ?", (cell.id,))
        return {}

    def checkpoint_exists(self, checkpoint_id: str) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone() is not None

    def find_checkpoint(self, checkpoint_id: str) -> CheckpointInfo | None:
        if not self.checkpoint_exists(checkpoint_id):
            return None
        return CheckpointInfo(ref=f"fake://{checkpoint_id}", consistency=Consistency.METADATA)

    def workspace_changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """The fake keeps no files, only a write counter that tests advance with
        `touch_workspace` (standing in for a user editing files)."""
        row = self.conn.execute("SELECT writes FROM volumes WHERE id = ?", (volume_id,)).fetchone()
        if row is None or row[0] == 0:
            return False
        if checkpoint_id is None:
            return True
        seen = self.conn.execute("SELECT volume_writes FROM checkpoints WHERE id = ?",
                                 (checkpoint_id,)).fetchone()
        return seen is None or row[0] > seen[0]

    def restore_workspace(self, cell: CellRef, checkpoint_id: str) -> Outputs:
        """Metadata only (the fake keeps no files): the volume records the checkpoint it was
        restored from, and its write counter moves past every checkpoint's, so it reads as
        changed since the snapshot taken before the restore (which it no longer matches)."""
        if not self.checkpoint_exists(checkpoint_id):
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        if cell.volume_id is None or not self.volume_exists(cell.volume_id):
            raise BackendNotFound(f"cell {cell.name} has no volume to restore into")
        if self.observe(cell).running:
            raise BackendRefused(f"cell {cell.name} is running; its workspace is restored "
                                 "only while it is stopped")
        self._mutate("restore_workspace", cell.name,
                     "UPDATE volumes SET restored_from = ?, writes = max(writes, (SELECT "
                     "volume_writes FROM checkpoints WHERE id = ?)) + 1 WHERE id = ?",
                     (checkpoint_id, checkpoint_id, cell.volume_id))
        return {"volume": cell.volume_id, "restoredFrom": checkpoint_id}

    def workspace_changes(self, volume_id: str, checkpoint_id: str | None) -> Changes:
        """No paths to name: the writes counted since the checkpoint, as changes."""
        row = self.conn.execute("SELECT writes FROM volumes WHERE id = ?", (volume_id,)).fetchone()
        seen = self.conn.execute("SELECT volume_writes FROM checkpoints WHERE id = ?",
                                 (checkpoint_id,)).fetchone() if checkpoint_id else None
        writes = (row[0] if row else 0) - (seen[0] if seen else 0)
        return Changes(changed=max(writes, 0))

    def touch_workspace(self, volume_id: str) -> None:
        """Test hook: pretend someone wrote to this workspace."""
        self.conn.execute("UPDATE volumes SET writes = writes + 1 WHERE id = ?", (volume_id,))

    def list_owned(self) -> list[Owned]:
        """Everything the fake holds, with its owning cell (for the orphan sweep)."""
        out = [Owned(OwnedKind.CELL, r[0], r[0])
               for r in self.conn.execute("SELECT id FROM cells")]
        out += [Owned(OwnedKind.VOLUME, r[0], r[1]) for r in self.conn.execute(
            "SELECT id, cell_id FROM volumes")]
        out += [Owned(OwnedKind.CHECKPOINT, r[0], r[1]) for r in self.conn.execute(
            "SELECT id, cell_id FROM checkpoints")]
        return out

    def volumes_of(self, cell_id: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM volumes WHERE cell_id = ? ORDER BY id", (cell_id,))]

    def delete_checkpoint(self, checkpoint_id: str) -> Outputs:
        self._mutate("delete_checkpoint", self._owner("checkpoints", checkpoint_id),
                     "DELETE FROM checkpoints WHERE id = ?", (checkpoint_id,))
        return {}

    def checkpoint_files(self, checkpoint_id: str) -> Path | None:
        """The fake keeps no files: None for a checkpoint it holds."""
        if not self.checkpoint_exists(checkpoint_id):
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        return None

    def checkpoint_sidecars(self, checkpoint_id: str) -> Path | None:
        """The fake keeps no sidecar data."""
        return None

    def release_checkpoint_files(self, checkpoint_id: str) -> None:
        """Nothing was set up for a read."""

    def import_checkpoint(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                          fill: Fill) -> CheckpointInfo:
        """The archive is checked in full (fill(None)) before the row is recorded."""
        if self.checkpoint_exists(checkpoint_id):
            raise BackendRefused(f"checkpoint {checkpoint_id} already exists")
        fill(None)
        self._mutate("import_checkpoint", cell_name,
                     "INSERT INTO checkpoints (id, cell_id, cell_name) VALUES (?, ?, ?)",
                     (checkpoint_id, cell_id, cell_name))
        return CheckpointInfo(ref=f"fake://{checkpoint_id}", consistency=Consistency.METADATA)

