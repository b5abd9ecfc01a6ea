"""Capacity accounting of the vm backend, from the real files: `get -o wide` and `devcell df`.

A vm workspace is a chain of qcow2 layers (vm_layers.py) and each layer is one file, so what
a volume or a checkpoint takes is the blocks allocated to the files of its chain (st_blocks,
as `du` and qemu-img's actual-size count them), each layer once however many chains share
it. What deleting one frees is its layers that no other volume's or checkpoint's chain
needs: a checkpoint a fork or its own volume still stands on frees nothing. Runtimes are the
QEMU processes this state directory labelled: their resident memory and CPU time from /proc.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from devcell.backends import vm_disks, vm_proc
from devcell.backends.base import (
    CheckpointsUsage,
    CheckpointUsage,
    OwnedKind,
    RuntimeUsage,
    Usage,
    WorkspaceUsage,
)
from devcell.backends.vm_layout import VmLayout


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
        return self.layers.sizes(layer_ids)

    def exclusive(self, keys: set[tuple[str, str]]) -> set[str]:
        """Layers only the given chains need: what deleting them all would free."""
        mine = {layer for key in keys for layer in self.chain.get(key, [])}
        others = {layer for key, chain in self.chain.items() if key not in keys
                  for layer in chain}
        return mine - others


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
        return WorkspaceUsage(
            volume_id=volume_id,
            workspace=Usage(logical=chains.layers.view_bytes(top) if top else 0,
                            disk=chains.size(set(chain))),
            own_disk=chains.size(chains.exclusive({("volume", volume_id)})),
            logs_disk=0, changed_files=0, changed_bytes=top_bytes, since=since,
            fork_of=fork_of if isinstance(fork_of, str) else None)

    def checkpoints_usage(self, checkpoint_ids: list[str] | None = None) -> CheckpointsUsage:
        chains = self._chains()
        if chains is None:
            return CheckpointsUsage((), Usage(), 0)
        wanted = [c for c in (checkpoint_ids if checkpoint_ids is not None
                              else sorted(chains.checkpoints)) if c in chains.checkpoints]
        items = []
        for checkpoint_id in wanted:
            meta = chains.checkpoints[checkpoint_id]
            chain = chains.chain[("checkpoint", checkpoint_id)]
            forks = tuple(sorted(v for v in chains.volumes
                                 if meta["layer"] in chains.chain[("volume", v)]
                                 and v != meta.get("volume")))
            items.append(CheckpointUsage(
                checkpoint_id, str(meta.get("cell_id", "")),
                Usage(logical=chains.layers.view_bytes(str(meta["layer"])),
                      disk=chains.size(set(chain))),
                unique=chains.size(chains.exclusive({("checkpoint", checkpoint_id)})),
                forks=forks))
        every = {layer for c in wanted for layer in chains.chain[("checkpoint", c)]}
        free = {c for c in wanted if not any(i.forks for i in items if i.checkpoint_id == c)}
        return CheckpointsUsage(
            tuple(items), Usage(disk=chains.size(every)),
            chains.size(chains.exclusive({("checkpoint", c) for c in free})))

    def runtimes_usage(self, *, sizes: bool = False) -> dict[str, RuntimeUsage]:
        """Each labelled QEMU of this state directory: resident memory and CPU time."""
        out: dict[str, RuntimeUsage] = {}
        prefix = self.layout.name_prefix
        ticks = os.sysconf("SC_CLK_TCK")
        for name, pid in vm_proc.scan(prefix).items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue  # ended since it was listed
            rss = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                        if line.startswith("VmRSS:")), None)
            fields = stat.rsplit(")", 1)[-1].split()
            cpu = (int(fields[11]) + int(fields[12])) / ticks if len(fields) > 12 else None
            out[name.removeprefix(prefix)] = RuntimeUsage(running=True, memory_bytes=rss,
                                                          cpu_seconds=cpu)
        return out

    def exclusive_bytes(self, kind: OwnedKind, resource_id: str) -> int:
        chains = self._chains()
        if chains is None:
            return 0
        key = ("volume" if kind is OwnedKind.VOLUME else "checkpoint", resource_id)
        return chains.size(chains.exclusive({key})) if key in chains.chain else 0

    def volumes(self) -> list[tuple[str, str]]:
        chains = self._chains()
        if chains is None:
            return []
        return [(v, str(m.get("cell_id", ""))) for v, m in sorted(chains.volumes.items())]

    def close(self) -> None:
        pass
