"""`devcell df`: what the state directory takes and what could be freed, by type.

`df` is a list of sources (SOURCES), each one a function that turns what was measured into
one row (TYPE, TOTAL, ACTIVE, SIZE, RECLAIMABLE, as `docker system df`) and the items behind
it (`df -v`): a new kind of storage (images, say) is one more function in the list. Each
backend is measured once (api/capacity.py's helpers, the backends' Accounting) into an
Inventory every source reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import backends
from devcell.api import capacity
from devcell.backends.base import Owned, OwnedKind
from devcell.backends.capacity import CheckpointsUsage, RuntimeUsage, WorkspaceUsage
from devcell.errors import BackendError, DevCellError
from devcell.store import capacity as records
from devcell.store import objects, references
from devcell.store.db import Database

NOT_MEASURED = "its backend keeps no files: nothing to measure"


@dataclass(frozen=True)
class Row:
    """One line of `df`: a type of storage."""

    type: str
    total: int
    active: int
    size: int
    reclaimable: int

    def document(self) -> dict[str, Any]:
        return {"type": self.type, "total": self.total, "active": self.active,
                "sizeBytes": self.size, "reclaimableBytes": self.reclaimable}


@dataclass(frozen=True)
class Item:
    """One thing behind a row (`df -v`)."""

    type: str
    name: str
    backend: str
    owner: str
    """The cell (or snapshot) it belongs to, by name; `-` when the database names none."""
    active: bool
    size: int
    """Bytes on disk it holds (a checkpoint: what deleting it alone would free)."""
    logical: int | None = None
    detail: str = ""
    measured: dict[str, int | float | str | None] = field(default_factory=dict)
    """Further figures for -o json|yaml (a workspace's changed bytes, a runtime's memory)."""

    def document(self) -> dict[str, Any]:
        return {"type": self.type, "name": self.name, "backend": self.backend,
                "owner": self.owner, "active": self.active, "sizeBytes": self.size,
                "logicalBytes": self.logical, **self.measured, "detail": self.detail}


@dataclass
class Measured:
    """One backend's holdings, measured once and shared by every source."""

    backend: str
    volumes: list[WorkspaceUsage] = field(default_factory=list)
    volume_owner: dict[str, str] = field(default_factory=dict)
    checkpoints: CheckpointsUsage | None = None
    runtimes: dict[str, RuntimeUsage] = field(default_factory=dict)
    owned: list[Owned] = field(default_factory=list)
    """What a backend that does not measure holds (the fake: rows, no files)."""
    running: frozenset[str] = frozenset()
    """Cells whose runtime runs, for a backend that does not measure."""
    measures: bool = False

    def unmeasured(self, kind: OwnedKind) -> list[Owned]:
        return [] if self.measures else [o for o in self.owned if o.kind is kind]


@dataclass
class Inventory:
    """What every source reads: the state directory's references and each backend's
    measurements."""

    state_dir: Path
    refs: references.References
    cell_names: dict[str, str]
    snapshot_names: dict[str, str]
    measured: list[Measured]
    problems: capacity.Problems


Source = Callable[[Inventory], tuple[Row, list[Item]]]


def _owner(inv: Inventory, cell_id: str) -> str:
    return inv.cell_names.get(cell_id, "-")


def _volume_rows(inv: Inventory, *, forks: bool, what: str) -> tuple[Row, list[Item]]:
    items = []
    count = active = 0
    for m in inv.measured:
        for owned in m.unmeasured(OwnedKind.VOLUME) if not forks else []:
            live = owned.cell_id in inv.refs.live_cells
            count += 1
            active += live
            items.append(Item(what, owned.id, m.backend, _owner(inv, owned.cell_id), live, 0,
                              0, NOT_MEASURED))
        for vol in m.volumes:
            if (vol.fork_of is not None) != forks:
                continue
            cell_id = m.volume_owner.get(vol.volume_id, "")
            live = cell_id in inv.refs.live_cells
            count += 1
            active += live
            size = vol.own_disk - vol.logs_disk
            base = inv.snapshot_names.get(vol.fork_of or "", vol.fork_of or "")
            detail = (f"on {base}; " if forks else "") + (
                (f"{vol.changed_files} file{'' if vol.changed_files == 1 else 's'}"
                 if vol.changed_files or not vol.changed_bytes
                 else f"{vol.changed_bytes // 1024} KiB of blocks") + " changed since "
                f"{inv.snapshot_names.get(vol.since, vol.since)}" if vol.since else
                "never checkpointed")
            items.append(Item(what, vol.volume_id, m.backend, _owner(inv, cell_id), live,
                              size, vol.workspace.logical, detail, {
                                  "changedFiles": vol.changed_files,
                                  "changedBytes": vol.changed_bytes,
                                  "since": inv.snapshot_names.get(vol.since or "", vol.since)}))
    size = sum(i.size for i in items)
    free = sum(i.size for i in items if not i.active)
    return Row(what, count, active, size, free), items


def workspaces(inv: Inventory) -> tuple[Row, list[Item]]:
    """Workspaces that are directories of their own (a fork's overlay is the next row)."""
    return _volume_rows(inv, forks=False, what="Workspaces")


def fork_layers(inv: Inventory) -> tuple[Row, list[Item]]:
    """Forks' own writes (overlay upper layers); their snapshot's files are Checkpoints'."""
    return _volume_rows(inv, forks=True, what="Fork layers")


def _checkpoint_name(inv: Inventory, checkpoint_id: str, cell_id: str) -> str:
    if checkpoint_id in inv.snapshot_names:
        return inv.snapshot_names[checkpoint_id]
    if checkpoint_id in inv.refs.sleep_checkpoints:
        return f"sleep of {_owner(inv, cell_id)}"
    return checkpoint_id


def checkpoints(inv: Inventory) -> tuple[Row, list[Item]]:
    """Checkpoints, each shared inode once. Active: one a fork stands on, or a sleeping cell
    wakes from; reclaimable: what deleting all the others together would free."""
    items = []
    total = active = size = free = 0
    for m in inv.measured:
        for owned in m.unmeasured(OwnedKind.CHECKPOINT):
            needed = owned.id in inv.refs.depended_on or owned.id in inv.refs.sleep_checkpoints
            total += 1
            active += needed
            items.append(Item("Checkpoints", _checkpoint_name(inv, owned.id, owned.cell_id),
                              m.backend, _owner(inv, owned.cell_id), needed, 0, 0,
                              NOT_MEASURED))
        if m.checkpoints is None:
            continue
        size += m.checkpoints.total.disk
        free += m.checkpoints.freed_together
        for item in m.checkpoints.items:
            needed = bool(item.forks) or bool(item.mapped_by) \
                or item.checkpoint_id in inv.refs.sleep_checkpoints \
                or item.checkpoint_id in inv.refs.depended_on
            total += 1
            active += needed
            forks = ", ".join(_owner(inv, m.volume_owner.get(f, "")) for f in item.forks)
            detail = f"forks stand on it: {forks}" if forks else (
                "kept by a live snapshot" if item.checkpoint_id in inv.refs.live_snapshots
                else "a sleeping cell's" if item.checkpoint_id in inv.refs.sleep_checkpoints
                else "referenced by nothing (devcell gc)")
            if item.memory_disk:
                detail += f"; memory {item.memory_disk} B"
            if item.mapped_by:
                detail += ("; its RAM file is mapped by running "
                           f"{', '.join(_owner(inv, c) for c in item.mapped_by)}: not freed")
            items.append(Item("Checkpoints", _checkpoint_name(inv, item.checkpoint_id,
                                                              item.cell_id),
                              m.backend, _owner(inv, item.cell_id), needed, item.unique,
                              item.usage.logical, detail,
                              {"diskBytes": item.usage.disk, "memoryDiskBytes": item.memory_disk,
                               "mappedBy": ", ".join(_owner(inv, c) for c in item.mapped_by)
                               or None}))
    return Row("Checkpoints", total, active, size, free), items


def logs(inv: Inventory) -> tuple[Row, list[Item]]:
    """Service logs kept with each volume (gone with it)."""
    items = []
    for m in inv.measured:
        for vol in m.volumes:
            cell_id = m.volume_owner.get(vol.volume_id, "")
            items.append(Item("Logs", vol.volume_id, m.backend, _owner(inv, cell_id),
                              cell_id in inv.refs.live_cells, vol.logs_disk))
    return (Row("Logs", len(items), sum(i.active for i in items), sum(i.size for i in items),
                sum(i.size for i in items if not i.active)), items)


def runtimes(inv: Inventory) -> tuple[Row, list[Item]]:
    """Cell runtimes: containers' writable layers as the engine counts them, vm machines'
    directories (root overlay, config disk, RAM file); a stopped one's is reclaimable, as
    `docker system df` counts containers, a sleeping machine's is not (it wakes from it), nor
    a sleeping container's whose root filesystem its sleep kept (what was installed)."""
    items = []
    count = active = 0
    for m in inv.measured:
        for owned in m.unmeasured(OwnedKind.CELL):
            running = owned.cell_id in m.running
            count += 1
            active += running
            items.append(Item("Runtimes", owned.id, m.backend, _owner(inv, owned.cell_id),
                              running, 0, None, NOT_MEASURED))
        for cell_id, run in m.runtimes.items():
            count += 1
            kept = not run.running and cell_id in inv.refs.kept_runtimes
            in_use = run.running or run.held or kept
            active += in_use
            memory = "" if run.memory_bytes is None else f"memory {run.memory_bytes} B"
            cpu = "" if run.cpu_seconds is None else f"CPU {run.cpu_seconds:.2f}s"
            ram = "" if not run.ram_file_bytes else f"RAM file {run.ram_file_bytes} B"
            state = ("running" if run.running else "asleep" if run.held else
                     "asleep, root filesystem kept" if kept else "stopped")
            size = run.writable_bytes if run.writable_bytes is not None else run.files_bytes
            items.append(Item("Runtimes", cell_id, m.backend, _owner(inv, cell_id),
                              in_use, size or 0, None,
                              ", ".join(filter(None, (state, memory, cpu, ram))),
                              {"memoryBytes": run.memory_bytes, "cpuSeconds": run.cpu_seconds,
                               "cgroup": run.cgroup, "ramFileBytes": run.ram_file_bytes}))
    return (Row("Runtimes", count, active, sum(i.size for i in items),
                sum(i.size for i in items if not i.active)), items)


def pulled_and_built_images(inv: Inventory) -> tuple[Row, list[Item]]:
    """Images DevCell pulled or built for this state directory (`devcell image ls`), at the
    engine's sizes; one no live cell names and no container uses is reclaimable (`devcell
    image prune`). The engine is asked only when the state directory uses it."""
    from devcell.api import images
    from devcell.backends.container.images import RECORD_FILE

    uses_engine = any(m.backend == "container" for m in inv.measured)
    if not uses_engine and not (inv.state_dir / RECORD_FILE).exists():
        return Row("Images", 0, 0, 0, 0), []
    try:
        rows = [r for r in images.list_images(inv.state_dir) if r.present and not r.moved]
    except DevCellError as exc:
        inv.problems.add(f"images: {exc}")
        return Row("Images", 0, 0, 0, 0), []
    items = [Item("Images", r.image, "container", ", ".join(r.cells) or "-", r.in_use, r.size,
                  None, r.origin) for r in rows]
    return (Row("Images", len(items), sum(i.active for i in items), sum(i.size for i in items),
                sum(i.size for i in items if not i.active)), items)


SOURCES: list[Source] = [workspaces, fork_layers, checkpoints, logs, runtimes,
                         pulled_and_built_images]
"""The rows of `df`, in order: add a function to add a type of storage."""


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    items: tuple[Item, ...]
    problems: tuple[str, ...]

    def document(self, *, verbose: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {"types": [r.document() for r in self.rows],
                               "totalBytes": sum(r.size for r in self.rows),
                               "reclaimableBytes": sum(r.reclaimable for r in self.rows)}
        if verbose:
            doc["items"] = [i.document() for i in self.items]
        if self.problems:
            doc["problems"] = list(self.problems)
        return doc


def _unmeasured(name: str, state_dir: Path, problems: capacity.Problems) -> Measured | None:
    """What a backend that keeps nothing to measure holds (the fake's rows): counted."""
    backend = capacity.open_backend(name, state_dir, problems)
    if backend is None:
        return None
    try:
        running = frozenset(cell_id for cell_id, seen in
                            backends.observe_all(name, state_dir).items() if seen.running)
        return Measured(name, owned=backend.list_owned(), running=running)
    except BackendError as exc:
        problems.add(f"backend {name}: {exc}")
        return None
    finally:
        backend.close()


def _measure(name: str, state_dir: Path, problems: capacity.Problems) -> Measured | None:
    if name not in backends.REGISTRY:
        problems.add(f"backend {name}: unknown to this version of DevCell; not measured")
        return None
    backend = capacity.measurer(name, state_dir)
    if backend is None:
        return _unmeasured(name, state_dir, problems)
    try:
        found = Measured(name, measures=True)
        for volume_id, cell_id in backend.volumes():
            found.volume_owner[volume_id] = cell_id
            vol = capacity.measure_workspace(backend, volume_id, problems)
            if vol is not None:
                found.volumes.append(vol)
        found.checkpoints = backend.checkpoints_usage(None)
        found.runtimes = capacity.measure_runtimes(backend, name, problems, sizes=True)
        return found
    except BackendError as exc:
        problems.add(f"backend {name}: {exc}")
        return None
    finally:
        backend.close()


def df(state_dir: Path) -> Report:
    """Measure every backend the state directory uses and run every source over it. A state
    directory with no database yet holds nothing: every row is empty, nothing is created."""
    from devcell.store import guard

    problems = capacity.Problems()
    empty = frozenset[str]()
    refs = references.References(empty, empty, empty, empty, empty, empty)
    names: tuple[dict[str, str], dict[str, str]] = ({}, {})
    measured: list[Measured] = []
    db: Database | None = None
    if guard.database_exists(state_dir):
        db = Database(state_dir, create=False)
    try:
        if db is not None:
            for name in backends.holding(state_dir, objects.backends_in_use(db.conn)):
                found = _measure(name, state_dir, problems)
                if found is not None:
                    measured.append(found)
            names, refs = records.names(db.conn), references.read(db.conn)
        inv = Inventory(state_dir, refs, names[0], names[1], measured, problems)
        made = [source(inv) for source in SOURCES]
    finally:
        if db is not None:
            db.close()
    return Report(tuple(r for r, _ in made), tuple(i for _, items in made for i in items),
                  tuple(problems.messages))
