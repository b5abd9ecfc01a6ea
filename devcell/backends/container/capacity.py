"""Measuring what the container backend holds: workspaces, checkpoints, runtimes.

Every figure comes from the filesystem (lstat of each entry, each inode once, links never
followed: host/census.py, changes.py) or from the engine and the kernel (cgroups.py), never from
the sizes DevCell recorded when it wrote something: a cell keeps writing, a checkpoint shares
files with the next, and an operation killed mid-way recorded nothing. Called only when a
user asks (`get -o wide`, `devcell df`); the fast paths never measure.

It is the container backend's `Accounting` (named in its `devcell/backend_registry.py` entry), apart from
`ContainerBackend` so that measuring needs neither the docker SDK (the engine is asked over
its socket, as `container_observe` does) nor the engine for what lies on disk: with the
engine down, workspaces and checkpoints are still measured.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell.backends.capacity import CheckpointsUsage, CheckpointUsage, RuntimeUsage, Usage, WorkspaceUsage
from devcell.backends.container import cgroups, changes, overlay, workspaces
from devcell.backends.container import observe as container_observe
from devcell.backends.container.labels import BASE_IMAGE, KEPT_ROOTFS, SIDECAR_OF
from devcell.backends.container.layout import Layout
from devcell.backends.container.spec import CELL_ID
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import usage
from devcell.backends.host.census import Census
from devcell.backends.host.ids import is_safe_id
from devcell.errors import BackendError, BackendNotFound


def _identities(path: Path, volume_id: str) -> dict[str, tuple[int, ...]]:
    """Relative path -> (inode, size, mtime, ctime, mode) of each file a sources record
    vouches for (none when it is absent, damaged or another volume's)."""
    sources = workspaces._read_sources(path, volume_id)
    if sources is None:
        return {}
    return {rel: tuple(int(v) for v in entry[1:6]) for rel, entry in sources.files().items()}


def _baseline(store: WorkspaceStore, volume_id: str
              ) -> tuple[str | None, changes.Unchanged | None, set[str] | None]:
    """What the workspace is compared with: (checkpoint, rule, the paths it recorded). The
    volume's newest checkpoint (a snapshot's or a sleep's), or the one it was restored from
    since (snapshot restore: what the next checkpoint shares); for a fork never checkpointed,
    the snapshot it was made from; with neither, nothing (everything counts as changed)."""
    layout = store.layout
    latest = store.latest_checkpoint_of_volume(volume_id)
    restored = store.restored_from(volume_id, latest)
    if restored is not None:  # restored since its newest checkpoint: compared with that one
        recorded = _identities(layout.volume(volume_id) / workspaces.RESTORED, volume_id)
        saved = changes.same_as(store.earlier(restored, {}).file)  # no view mounted
        return restored, changes.by_record(recorded, saved), set(recorded) or None
    if latest is not None:
        home = layout.checkpoint(store.holder_of(latest))
        recorded = _identities(home / workspaces.SOURCES, volume_id)
        saved = changes.same_as(store.earlier(latest, {}).file)
        return latest, changes.by_record(recorded, saved), set(recorded) or None
    origin = (store.marker(volume_id) or {}).get("from_checkpoint")
    if not isinstance(origin, str) or store.find_checkpoint(origin) is None:
        return None, None, None
    saved = changes.same_as(store.earlier(origin, {}).file)
    if store.lower_of(volume_id) is None:
        return origin, saved, None
    index = overlay.UpperIndex(layout.upper(volume_id))
    return origin, changes.either(lambda rel, _: index.unchanged(rel), saved), None


def workspace_usage(store: WorkspaceStore, volume_id: str) -> WorkspaceUsage | None:
    """The volume's workspace (as the cell sees it), its own bytes, and what changed."""
    if not is_safe_id(volume_id) or not store.volume_exists(volume_id):
        return None
    store.ensure_mounted(volume_id)
    since, unchanged, recorded = _baseline(store, volume_id)
    live = store.live_path(volume_id)
    found = changes.measure(live or store.layout.workspace(volume_id), unchanged, since=since,
                            recorded=recorded)
    logs = Census()
    logs.add("logs", store.layout.logs(volume_id))
    lower = store.lower_of(volume_id)
    if lower is not None or live is not None:  # the upper layer; a live folder is not ours
        own = usage.exclusive_bytes(store.layout.volume(volume_id))
    else:  # its workspace was just walked: the rest of its directory beside it
        own = found.exclusive_disk + _beside_workspace(store.layout.volume(volume_id))
    return WorkspaceUsage(
        volume_id=volume_id, workspace=found.usage, own_disk=own,
        logs_disk=logs.usage("logs").disk, changed_files=found.changes.files,
        changed_bytes=found.changes.bytes, since=since, fork_of=lower)


def _beside_workspace(volume: Path) -> int:
    """Blocks a volume's directory holds besides its workspace (itself, marker, logs)."""
    total = volume.lstat().st_blocks * usage.BLOCK
    with os.scandir(volume) as entries:
        for entry in entries:
            if entry.name != "workspace":
                total += usage.exclusive_bytes(Path(entry.path))
    return total


def checkpoints_usage(store: WorkspaceStore, checkpoint_ids: list[str] | None
                      ) -> CheckpointsUsage:
    """The checkpoints measured together: each one's size, what deleting it alone frees, and
    the total with every shared inode counted once."""
    owners = dict(store.all_checkpoints())
    wanted = list(owners) if checkpoint_ids is None else [
        c for c in dict.fromkeys(checkpoint_ids) if c in owners]
    in_use = store.checkpoints_in_use()
    census = Census()
    # A checkpoint of an unchanged workspace names an earlier checkpoint's tree (SAME_AS):
    # each tree is counted once, under the directory that holds it, and a checkpoint that
    # names it shows that tree's size; what deleting one frees is nothing while another
    # checkpoint still names the tree (it is only retired), its record apart.
    # A layer (a checkpoint holding only what changed since a full tree, OVER) keeps that
    # full tree as a checkpoint naming it does: its size is its own tree and the one below
    # (what reading it takes), and the tree below is freed only with the last layer over it.
    holder_of = {c: store.holder_of(c) for c in owners}
    below = {h: store.over_of(h) for h in dict.fromkeys(holder_of.values())}
    namers: dict[str, list[str]] = {}
    for checkpoint_id, holder in holder_of.items():
        namers.setdefault(holder, []).append(checkpoint_id)
    trees = list(dict.fromkeys(holder_of[c] for c in wanted))
    for holder in dict.fromkeys(trees + [b for h in trees if (b := below[h]) is not None]):
        census.add(holder, store.layout.checkpoint(holder))
    for checkpoint_id in wanted:
        if holder_of[checkpoint_id] != checkpoint_id:
            census.add(checkpoint_id, store.layout.checkpoint(checkpoint_id))

    def freed(ids: list[str]) -> int:
        going = set(ids)
        keys = [c for c in ids if holder_of[c] != c]  # their records
        gone = {h for c in ids if set(namers[h := holder_of[c]]) <= going}  # nothing names
        kept = True
        while kept:  # a tree a layer stands on stays as long as that layer
            kept = False
            for tree in [t for t in gone if any(b == t and h not in gone
                                                for h, b in below.items())]:
                gone.discard(tree)
                kept = True
        for tree in {b for h in gone if (b := below[h]) is not None} - gone:
            if (set(namers.get(tree, ())) <= going  # a full tree only layers kept
                    and all(h in gone for h, b in below.items() if b == tree)):
                gone.add(tree)
        return census.freed(keys + sorted(gone))

    def size(checkpoint_id: str) -> Usage:
        own = census.usage(holder_of[checkpoint_id])
        tree = below[holder_of[checkpoint_id]]
        if tree is None:
            return own
        under = census.usage(tree)
        return Usage(own.logical + under.logical, own.disk + under.disk, own.files + under.files)

    items = tuple(
        CheckpointUsage(checkpoint_id, owners[checkpoint_id], size(checkpoint_id),
                        0 if in_use.get(checkpoint_id) else freed([checkpoint_id]),
                        tuple(in_use.get(checkpoint_id, ())))
        for checkpoint_id in wanted)
    free = [c for c in wanted if not in_use.get(c)]
    return CheckpointsUsage(items, census.total(), freed(free))


def kept_bytes(info: dict[str, Any]) -> int:
    """The layers of a container's root filesystem kept across recreates (container/rootfs.py):
    its image's size less the cell's own image's, as the engine counts them; 0 for a
    container made from the cell's image."""
    labels = info.get("Labels") or {}
    base, made_from = str(labels.get(BASE_IMAGE) or ""), str(info.get("ImageID") or "")
    if labels.get(KEPT_ROOTFS) != "true" or not base or base == made_from:
        return 0
    whole, below = container_observe.image_size(made_from), container_observe.image_size(base)
    return max(whole - below, 0) if whole is not None and below is not None else 0


Inspect = Callable[[str], dict[str, Any]]
"""The engine's inspection of a container, by id."""


def runtime_usage(info: dict[str, Any], inspect: Inspect, *, proc: Path = Path("/proc")
                  ) -> RuntimeUsage:
    """One listed container: memory and CPU from its cgroup when it runs."""
    running = info.get("State") in ("running", "paused")
    size = info.get("SizeRw")
    writable = int(size) if isinstance(size, int) else None
    if writable is not None:
        writable += kept_bytes(info)
    if not running:
        return RuntimeUsage(running=False, writable_bytes=writable)
    container_id = str(info.get("Id", ""))
    details = inspect(container_id)
    pid = (details.get("State") or {}).get("Pid")
    parent = str((details.get("HostConfig") or {}).get("CgroupParent") or "")
    found = cgroups.usage_of(pid=pid if isinstance(pid, int) and pid > 0 else None,
                             container_id=container_id, parent=parent, proc=proc)
    if found is None:
        return RuntimeUsage(running=True, writable_bytes=writable)
    return RuntimeUsage(running=True, memory_bytes=found.memory_bytes,
                        cpu_seconds=found.cpu_seconds, cgroup=found.version,
                        writable_bytes=writable)


class ContainerAccounting:
    """Accounting for the container backend of one state directory."""

    def __init__(self, *, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.store = WorkspaceStore(Layout(state_dir))

    def workspace_usage(self, volume_id: str) -> WorkspaceUsage | None:
        try:
            return workspace_usage(self.store, volume_id)
        except OSError as exc:  # removed or changed while measured
            raise BackendError(f"measuring volume {volume_id}: {exc.strerror or exc}") from None

    def checkpoints_usage(self, checkpoint_ids: list[str] | None = None) -> CheckpointsUsage:
        try:
            return checkpoints_usage(self.store, checkpoint_ids)
        except OSError as exc:
            raise BackendError(f"measuring checkpoints: {exc.strerror or exc}") from None

    def runtimes_usage(self, *, sizes: bool = False) -> dict[str, RuntimeUsage]:
        """Every container of this state directory, by cell id: memory and CPU from its
        cgroup, and (sizes) its writable layer as the engine counts it; a cell's sidecars'
        added to its own (they run for it, as a Pod's containers count for the Pod)."""
        out: dict[str, RuntimeUsage] = {}
        sidecars: list[tuple[str, RuntimeUsage]] = []
        for info in container_observe.list_containers(self.state_dir, size=sizes):
            labels = info.get("Labels") or {}
            cell_id, owner = labels.get(CELL_ID), labels.get(SIDECAR_OF)
            ours = cell_id or owner
            if not ours or not is_safe_id(ours):
                continue  # a label DevCell did not write is not ours
            try:
                found = runtime_usage(
                    info, lambda cid: container_observe.inspect(self.state_dir, cid))
            except BackendNotFound:  # removed since it was listed
                continue
            if cell_id:
                out[cell_id] = found
            else:
                sidecars.append((ours, found))
        for cell_id, found in sidecars:
            if cell_id in out:
                out[cell_id] = with_sidecar(out[cell_id], found)
        return out

    def volumes(self) -> list[tuple[str, str]]:
        """(volume id, owning cell id) of every volume, from the markers."""
        return self.store.all_volumes()

    def close(self) -> None:
        pass


def _plus(a: int | float | None, b: int | float | None) -> Any:
    return a if b is None else b if a is None else a + b


def with_sidecar(cell: RuntimeUsage, sidecar: RuntimeUsage) -> RuntimeUsage:
    """The cell's usage with one sidecar's added (memory, CPU, writable layer)."""
    return RuntimeUsage(
        running=cell.running, memory_bytes=_plus(cell.memory_bytes, sidecar.memory_bytes),
        cpu_seconds=_plus(cell.cpu_seconds, sidecar.cpu_seconds), cgroup=cell.cgroup,
        writable_bytes=_plus(cell.writable_bytes, sidecar.writable_bytes),
        files_bytes=cell.files_bytes, ram_file_bytes=cell.ram_file_bytes, held=cell.held)
