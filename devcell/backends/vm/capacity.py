"""Capacity accounting of the vm backend, from the real files: `get -o wide` and `devcell df`.

A vm workspace is a chain of qcow2 layers (vm/layers.py) and each layer is one file, so what
a volume or a checkpoint takes is the blocks allocated to the files of its chain (st_blocks,
as `du` and qemu-img's actual-size count them), each layer once however many chains share
it. What deleting one frees is its layers that no other volume's or checkpoint's chain
needs: a checkpoint a fork or its own volume still stands on frees nothing.

A machine holds more than its disk, and it is counted too (host/census.py: lstat only, no link
followed, each inode once, no file content read): its directory (root overlay, config disk,
and `ram.bin`, the guest RAM itself while it runs or sleeps: sparse, so its blocks, not its
size) is its runtime's; a sleep's saved device state and a machine snapshot's memory part
(`machines/<id>/`: RAM copy, device state, root and config disks) are their checkpoint's. A
snapshot's part is freed by deleting it, except a RAM file a running fork still maps (share=off:
an unlinked file lives while mapped). Runtimes are the QEMU processes this state directory
labelled: their resident memory and CPU time from /proc.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from devcell import safeio
from devcell.backends.base import OwnedKind
from devcell.backends.capacity import CheckpointsUsage, CheckpointUsage, RuntimeUsage, Usage, WorkspaceUsage
from devcell.backends.host import usage
from devcell.backends.host.census import Census
from devcell.backends.host.ids import is_safe_id
from devcell.backends.vm import disks as vm_disks
from devcell.backends.vm import memory as vm_memory
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.layout import VmLayout

CELL_MARKER = "cell.json"
CELL_RAM = "ram.bin"
"""A machine's guest RAM file in its cell's directory (vm.RAM_FILE; vm imports this module)."""
CHECKPOINT_MARKER = "checkpoint.json"
SLEEP_MEMORY = "memory.bin"
"""A sleep's saved device state (all of RAM for a fork's; Firecracker's device state beside
it as `.vmstate`): vm_disks.MEMORY."""
MARKER_LIMIT = 1 << 16


def allocated(path: Path) -> int:
    """Blocks allocated to a regular file, as `du` (lstat: a link or anything else is 0)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_blocks * usage.BLOCK if stat.S_ISREG(st.st_mode) else 0


def read_marker(directory: Path, name: str) -> dict[str, Any] | None:
    """A marker DevCell wrote, read without following a link and at most 64 KiB of it."""
    try:
        fd = safeio.open_regular(directory, name)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        raw = safeio.read_some(fd, MARKER_LIMIT)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def entries(parent: Path) -> list[str]:
    """The directories DevCell named under `parent`: safe ids, no dot-temporary (an operation
    in progress, or one a crash left to the sweep), no link."""
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    out = []
    for name in names:
        if name.startswith(".") or not is_safe_id(name):
            continue
        try:
            if stat.S_ISDIR(os.lstat(parent / name).st_mode):
                out.append(name)
        except OSError:
            continue
    return out


def running_machines(layout: VmLayout) -> dict[str, int]:
    """Cell id -> pid of each QEMU this state directory labelled (vm_proc: proven by -name)."""
    prefix = layout.name_prefix
    return {name.removeprefix(prefix): pid for name, pid in vm_proc.scan(prefix).items()}


def ram_users(layout: VmLayout, running: dict[str, int]) -> dict[str, tuple[str, ...]]:
    """Machine snapshot id -> the running cells whose RAM is its `ram.bin` (a fork maps it
    copy-on-write until it next sleeps or stops: cell.json's ram_from says so)."""
    users: dict[str, list[str]] = {}
    for cell_id in sorted(running):
        if not is_safe_id(cell_id):
            continue
        ram_from = (read_marker(layout.cell(cell_id), CELL_MARKER) or {}).get("ram_from")
        if not isinstance(ram_from, str):
            continue
        path = Path(ram_from)
        if path.name == vm_memory.RAM and path.parent.parent == layout.machines:
            users.setdefault(path.parent.name, []).append(cell_id)
    return {part: tuple(cells) for part, cells in users.items()}


def _sleeper(meta: dict[str, Any]) -> str | None:
    cell = meta.get("cell_id")
    return str(cell) if meta.get("kind") == vm_disks.KIND_MACHINE and cell else None


def sleep_cell(directory: Path) -> str | None:
    """The cell whose sleep the checkpoint in `directory` is (a saved machine), else None."""
    return _sleeper(read_marker(directory, CHECKPOINT_MARKER) or {})


class SavedMachines:
    """The checkpoints' directories (markers, a sleep's saved state, a disk's extracted files)
    and the machine snapshots' memory parts, measured together: each inode once, a
    checkpoint's directory and its part as one tree under the checkpoint's id."""

    def __init__(self, layout: VmLayout, *, running: dict[str, int],
                 only: set[str] | None = None) -> None:
        self.layout = layout
        self.census = Census()
        self.memory = Census()
        self.markers: dict[str, dict[str, Any]] = {}
        self.parts: set[str] = set()
        for checkpoint_id in entries(layout.checkpoints):
            if only is not None and checkpoint_id not in only:
                continue
            directory = layout.checkpoints / checkpoint_id
            meta = read_marker(directory, CHECKPOINT_MARKER)
            if meta is None:
                continue  # not a checkpoint (yet): the sweep's, not counted as one
            self.markers[checkpoint_id] = meta
            self.census.add(checkpoint_id, directory)
        for part_id in entries(layout.machines):
            if only is not None and part_id not in only:
                continue
            directory = layout.machines / part_id
            if read_marker(directory, vm_memory.MARKER) is None:
                continue
            self.parts.add(part_id)
            self.census.add(part_id, directory)
            self.memory.add(part_id, directory)
        self.mapped = {part: cells for part, cells in ram_users(layout, running).items()
                       if part in self.parts}

    def ids(self) -> set[str]:
        return set(self.markers) | self.parts

    def sleep_of(self, checkpoint_id: str) -> str | None:
        """The cell a sleep checkpoint (a saved machine) belongs to, else None."""
        return _sleeper(self.markers.get(checkpoint_id) or {})

    def disk(self, checkpoint_id: str) -> int:
        return self.census.usage(checkpoint_id).disk

    def memory_disk(self, checkpoint_id: str) -> int:
        """The machine memory it keeps: its part, or a sleep's saved state."""
        directory = self.layout.checkpoints / checkpoint_id
        return self.memory.usage(checkpoint_id).disk + allocated(
            directory / SLEEP_MEMORY) + allocated(directory / f"{SLEEP_MEMORY}.vmstate")

    def freed(self, checkpoint_ids: set[str]) -> int:
        """What deleting them together frees of these files: inodes all of whose links lie
        in them, less a RAM file a running fork maps (it lives on while mapped)."""
        chosen = checkpoint_ids & self.ids()
        if not chosen:
            return 0
        total = self.census.freed(chosen)
        for part in chosen & set(self.mapped):
            try:
                st = os.lstat(self.layout.machines / part / vm_memory.RAM)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                total -= st.st_blocks * usage.BLOCK
        return max(total, 0)

    def total(self) -> int:
        return self.census.total().disk


class Chains:
    """Every volume's and checkpoint's chain of layers, read once from the markers."""

    def __init__(self, disks: vm_disks.DiskStore) -> None:
        self.disks = disks
        self.layers = disks.layers
        self.volumes: dict[str, dict[str, Any]] = dict(disks.all_volumes())
        self.checkpoints: dict[str, dict[str, Any]] = {
            c: m for c, m in disks.all_checkpoints() if isinstance(m.get("layer"), str)}
        self.chain: dict[tuple[str, str], list[str]] = {}
        for volume_id in self.volumes:
            top = disks.top(volume_id)
            self.chain[("volume", volume_id)] = self.layers.chain(top) if top else []
        for checkpoint_id, meta in self.checkpoints.items():
            self.chain[("checkpoint", checkpoint_id)] = self.layers.chain(str(meta["layer"]))

    def size(self, layer_ids: set[str]) -> int:
        """Blocks of the layers: each one's qcow2 and the record beside it."""
        return self.layers.sizes(layer_ids) + sum(
            allocated(self.layers.path(layer).with_suffix(".json")) for layer in layer_ids)

    def exclusive(self, keys: set[tuple[str, str]]) -> set[str]:
        """Layers only the given chains need: what deleting them all would free."""
        mine = {layer for key in keys for layer in self.chain.get(key, [])}
        others = {layer for key, chain in self.chain.items() if key not in keys
                  for layer in chain}
        return mine - others

    def forks(self, checkpoint_id: str) -> tuple[str, ...]:
        """Volumes other than its own whose chain stands on the checkpoint's layer."""
        meta = self.checkpoints.get(checkpoint_id)
        if meta is None:
            return ()
        return tuple(sorted(v for v in self.volumes
                            if meta["layer"] in self.chain[("volume", v)]
                            and v != meta.get("volume")))


class VmAccounting:
    """Accounting for the vm backend of one state directory."""

    def __init__(self, *, state_dir: Path) -> None:
        self.layout = VmLayout(state_dir)

    def _chains(self) -> Chains | None:
        if not self.layout.layers.is_dir():
            return None  # no vm disk was ever made here: nothing to measure, nothing made
        return Chains(vm_disks.DiskStore(self.layout))

    def workspace_usage(self, volume_id: str) -> WorkspaceUsage | None:
        chains = self._chains()
        if chains is None or volume_id not in chains.volumes:
            return None
        meta = chains.volumes[volume_id]
        chain = chains.chain[("volume", volume_id)]
        top = chain[0] if chain else None
        below = chain[1] if len(chain) > 1 else None
        since = next((c for c, m in chains.checkpoints.items()
                      if m.get("layer") == below and m.get("volume") == volume_id), None)
        fork_of = meta.get("from_checkpoint")
        top_bytes = (chains.layers.written(top) or 0) if top else 0
        marker = usage.exclusive_bytes(self.layout.volume(volume_id))
        return WorkspaceUsage(
            volume_id=volume_id,
            workspace=Usage(logical=chains.layers.view_bytes(top) if top else 0,
                            disk=chains.size(set(chain)) + marker),
            own_disk=chains.size(chains.exclusive({("volume", volume_id)})) + marker,
            logs_disk=0, changed_files=0, changed_bytes=top_bytes, since=since,
            fork_of=fork_of if isinstance(fork_of, str) else None)

    def checkpoints_usage(self, checkpoint_ids: list[str] | None = None) -> CheckpointsUsage:
        chains = self._chains()
        saved = SavedMachines(self.layout, running=running_machines(self.layout),
                              only=None if checkpoint_ids is None else set(checkpoint_ids))
        layered = chains.checkpoints if chains is not None else {}
        known = set(layered) | saved.ids()
        wanted = [c for c in dict.fromkeys(checkpoint_ids if checkpoint_ids is not None
                                           else sorted(known)) if c in known]
        items = [self._checkpoint(chains, saved, c) for c in wanted]
        # Deleting every checkpoint no fork stands on and no sleeping machine wakes from.
        free = {i.checkpoint_id for i in items if not i.forks
                and not self._wakes_from(saved, i.checkpoint_id)}
        layers = {layer for c in wanted for layer in (
            chains.chain.get(("checkpoint", c), []) if chains is not None else [])}
        disk = (chains.size(layers) if chains is not None else 0) + saved.total()
        freed = saved.freed(free) + (chains.size(chains.exclusive(
            {("checkpoint", c) for c in free if c in layered})) if chains is not None else 0)
        return CheckpointsUsage(tuple(items), Usage(disk=disk), freed)

    def _checkpoint(self, chains: Chains | None, saved: SavedMachines, checkpoint_id: str
                    ) -> CheckpointUsage:
        """One checkpoint: its chain of layers with its directory and its memory part."""
        meta = saved.markers.get(checkpoint_id) or (
            chains.checkpoints.get(checkpoint_id) if chains is not None else None) or (
            read_marker(self.layout.machines / checkpoint_id, vm_memory.MARKER) or {})
        memory = saved.memory_disk(checkpoint_id)
        logical = disk = unique = 0
        forks: tuple[str, ...] = ()
        if chains is not None and checkpoint_id in chains.checkpoints:
            chain = chains.chain[("checkpoint", checkpoint_id)]
            logical = chains.layers.view_bytes(chain[0])
            disk = chains.size(set(chain))
            unique = chains.size(chains.exclusive({("checkpoint", checkpoint_id)}))
            forks = chains.forks(checkpoint_id)
        unique = 0 if forks else unique + saved.freed({checkpoint_id})
        return CheckpointUsage(
            checkpoint_id, str(meta.get("cell_id", "")),
            Usage(logical=logical + memory, disk=disk + saved.disk(checkpoint_id)),
            unique=unique, forks=forks, memory_disk=memory,
            mapped_by=saved.mapped.get(checkpoint_id, ()))

    def _wakes_from(self, saved: SavedMachines, checkpoint_id: str) -> bool:
        """A sleep checkpoint whose machine is still there to wake from it."""
        cell = saved.sleep_of(checkpoint_id)
        return cell is not None and is_safe_id(cell) and read_marker(
            self.layout.cell(cell), CELL_MARKER) is not None

    def runtimes_usage(self, *, sizes: bool = False) -> dict[str, RuntimeUsage]:
        """Each machine of this state directory, running or not: resident memory and CPU
        time of its labelled QEMU, and the files of its directory (the RAM file a running or
        sleeping machine keeps included)."""
        out: dict[str, RuntimeUsage] = {}
        running = running_machines(self.layout)
        cells = [c for c in entries(self.layout.cells)
                 if read_marker(self.layout.cells / c, CELL_MARKER) is not None]
        files = Census()
        for cell_id in cells:
            files.add(cell_id, self.layout.cells / cell_id)
        asleep = {cell for cell in (sleep_cell(self.layout.checkpoints / c)
                                    for c in entries(self.layout.checkpoints)) if cell}
        for cell_id in sorted(set(cells) | set(running)):
            pid = running.get(cell_id)
            seen = _process(pid) if pid is not None else None
            kept = cell_id in cells
            if seen is None and not kept:
                continue  # ended since it was listed, and no directory of its own
            out[cell_id] = RuntimeUsage(
                running=seen is not None, memory_bytes=seen[0] if seen else None,
                cpu_seconds=seen[1] if seen else None,
                files_bytes=files.usage(cell_id).disk if kept else None,
                ram_file_bytes=allocated(self.layout.cells / cell_id / CELL_RAM)
                if kept else None,
                held=seen is None and cell_id in asleep)
        return out

    def exclusive_bytes(self, kind: OwnedKind, resource_id: str) -> int:
        """What removing a volume or checkpoint frees: its layers no other chain needs, its
        directory, and a checkpoint's memory part (less a RAM file a running fork maps)."""
        if not is_safe_id(resource_id):
            return 0
        chains = self._chains()
        if kind is OwnedKind.VOLUME:
            key = ("volume", resource_id)
            own = usage.exclusive_bytes(self.layout.volume(resource_id))
        else:
            key = ("checkpoint", resource_id)
            own = SavedMachines(self.layout, running=running_machines(self.layout),
                                only={resource_id}).freed({resource_id})
        if chains is None or key not in chains.chain:
            return own
        return chains.size(chains.exclusive({key})) + own

    def volumes(self) -> list[tuple[str, str]]:
        chains = self._chains()
        if chains is None:
            return []
        return [(v, str(m.get("cell_id", ""))) for v, m in sorted(chains.volumes.items())]

    def close(self) -> None:
        pass


def _process(pid: int) -> tuple[int | None, float | None] | None:
    """Resident memory and CPU seconds of a process from /proc; None once it ended."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rss = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                if line.startswith("VmRSS:")), None)
    fields = stat_line.rsplit(")", 1)[-1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks if len(fields) > 12 else None
    return rss, cpu
