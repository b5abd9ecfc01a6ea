"""Workspace disks and checkpoints of the vm backend: each made whole or not at all.

A vm cell's workspace is its own disk (attached as /dev/vdc): a chain of qcow2 layers
(vm/layers.py) whose top the volume's marker names. A disk checkpoint freezes that top and
puts a new empty one over it (`snapshot_volume`): the checkpoint holds only the blocks written
since the previous one, and its marker names its frozen layer. A fork's volume is a new empty
top on that layer, so it costs nothing up front. Deleting a volume or a checkpoint drops its
reference; `collect` then removes or merges the layers nothing else needs. A machine
checkpoint (sleep) holds `memory.bin`, QEMU's saved memory and device state. Markers are
built in `.tmp-<id>-<owner>-...` and renamed into place (host/temporaries.py removes what a killed
owner left), removed by renaming to `.trash-...` first. A disk no machine ever ran on holds
no user files: the orphan sweep may remove it; any other is kept for a decision (`content`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell.backends.archives import unpack as archive_unpack
from devcell.backends.base import Fill
from devcell.backends.host import children, removal, temporaries, workspace_seed
from devcell.backends.host.ids import safe_id
from devcell.backends.vm import exact_disk as vm_exact
from devcell.backends.vm import extract as vm_extract
from devcell.backends.vm import image as vm_image
from devcell.backends.vm import layers as vm_layers
from devcell.backends.vm.layout import VmLayout
from devcell.errors import BackendError, BackendNotFound, BackendRefused

WORKSPACE_BYTES = 1 << 30
DISK = "workspace.img"
"""A volume's raw disk before layers (the first vm slice), adopted as a layer."""
MEMORY = "memory.bin"
KIND_DISK, KIND_MACHINE = "disk", "machine"


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def copy_disk(source: Path, target: Path) -> None:
    """A disk image copied whole, holes kept (a machine snapshot's root and config disks)."""
    done = children.run(["cp", "--sparse=always", "--reflink=auto", str(source), str(target)])
    if done.returncode != 0:
        raise BackendError(f"copying disk {source.name} failed: {done.stderr.strip()[-300:]}")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class DiskStore:
    def __init__(self, layout: VmLayout, *, max_depth: int | None = None,
                 busy: Callable[[], set[str]] = set) -> None:
        """`busy()` names the volumes a running machine has open (never written here)."""
        self.layout = layout
        for path in (layout.state_dir, layout.root, layout.volumes, layout.checkpoints,
                     layout.cells, layout.images, layout.boot):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.layers = vm_layers.LayerStore(layout.layers, max_depth=max_depth)
        self.busy = busy

    def _build(self, parent: Path, resource_id: str, marker: str,
               make: Any) -> Path:
        """Make `parent/<id>` through a temporary directory; `make(tmp)` fills it."""
        final = parent / safe_id("resource", resource_id)
        temporaries.remove_dead(parent, f"{temporaries.TMP}{resource_id}-")
        tmp = parent / temporaries.temp_name(resource_id)
        tmp.mkdir(mode=0o700)
        try:
            meta = make(tmp)
            write_json(tmp / marker, meta)
            if final.exists():
                if (final / marker).is_file():
                    raise BackendRefused(f"{final.name} already exists")
                self._remove(final, parent)  # a directory whose marker was never written
            os.rename(tmp, final)
        except BaseException:
            removal.remove_quietly(tmp)
            raise
        return final

    @staticmethod
    def _remove(path: Path, parent: Path) -> None:
        if not path.exists():
            return
        trash = temporaries.trash(parent)
        os.rename(path, trash)
        removal.remove_quietly(trash)

    # -- volumes ---------------------------------------------------------------------------

    def volume_meta(self, volume_id: str) -> dict[str, Any] | None:
        return read_json(self.layout.volume(volume_id) / "volume.json")

    def _write_volume(self, volume_id: str, meta: dict[str, Any]) -> None:
        write_json(self.layout.volume(volume_id) / "volume.json", meta)

    def top(self, volume_id: str) -> str | None:
        """The volume's writable layer. A snapshot that died after QEMU made the new top and
        before the marker named it left `pending`: when that file exists, it is the top (the
        machine writes there, or will from its next boot: it is empty over the old top)."""
        meta = self.volume_meta(volume_id)
        if meta is None:
            return None
        pending = meta.get("pending")
        if isinstance(pending, str) and self.layers.path(pending).is_file():
            return pending
        top = meta.get("top")
        return top if isinstance(top, str) else None

    def volume_drive(self, volume_id: str) -> tuple[Path, str]:
        """(file, format) to attach: the top layer, or a disk from before layers (raw)."""
        top = self.top(volume_id)
        if top is None:
            return self.layout.volume(volume_id) / DISK, "raw"
        return self.layers.path(top), "qcow2"

    def volume_disk(self, volume_id: str) -> Path:
        return self.volume_drive(volume_id)[0]

    def adopt(self, volume_id: str) -> None:
        """A raw disk from before layers becomes the bottom layer (while nothing runs on it)."""
        meta = self.volume_meta(volume_id)
        raw = self.layout.volume(volume_id) / DISK
        if meta is None or meta.get("top") or not raw.is_file():
            return
        with self.layers.making():
            layer = self.layers.from_raw(raw, volume=volume_id)
            self._write_volume(volume_id, dict(meta, top=layer))
        raw.unlink()

    def create_volume(self, *, cell_id: str, cell_name: str, volume_id: str,
                      from_checkpoint: str | None, op_id: str | None,
                      seed: workspace_seed.Seed | None = None) -> dict[str, Any]:
        """A new workspace disk: empty, on a checkpoint's layer (a fork), or holding `seed`
        cloned (made in a temporary: a failed clone leaves no disk)."""
        existing = self.volume_meta(volume_id)
        if existing is not None:
            return existing
        with self.layers.making():  # the snapshot's layer stays while the fork is made
            base = self.checkpoint_layer(from_checkpoint) if from_checkpoint else None
            return self._make_volume(cell_id=cell_id, cell_name=cell_name,
                                     volume_id=volume_id, from_checkpoint=from_checkpoint,
                                     op_id=op_id, base=base, seed=seed)

    def _make_volume(self, *, cell_id: str, cell_name: str, volume_id: str,
                     from_checkpoint: str | None, op_id: str | None, base: str | None,
                     seed: workspace_seed.Seed | None = None) -> dict[str, Any]:

        def make(tmp: Path) -> dict[str, Any]:
            if base is None and seed is not None:
                if isinstance(seed, workspace_seed.ArchiveSource):
                    archive_unpack.unpack(seed, tmp / "tree")
                else:
                    workspace_seed.fill(seed, tmp / "tree", cell_name=cell_name)
                size = vm_image.tree_bytes(tmp / "tree", "the workspace's source")
                vm_image.mkfs(tmp / "tree", tmp / DISK, max(WORKSPACE_BYTES, size * 2),
                              "devcell-work", exact=True)
                removal.remove(tmp / "tree")
                top = self.layers.from_raw(tmp / DISK, volume=volume_id)
                (tmp / DISK).unlink()
            elif base is None:
                vm_image.mkfs(None, tmp / DISK, WORKSPACE_BYTES, "devcell-work", exact=True)
                top = self.layers.from_raw(tmp / DISK, volume=volume_id)
                (tmp / DISK).unlink()
            else:
                # A fork: an empty qcow2 on the snapshot's layer; nothing is copied.
                top = self.layers.prepare_overlay(base, volume=volume_id)
                self.layers.overlay(top)
                if self.layers.needs_flattening(top):
                    self.layers.flatten_stopped(top)
            return {"volume": volume_id, "cell_id": safe_id("cell", cell_id), "cell": cell_name,
                    "from_checkpoint": from_checkpoint, "operation": op_id, "top": top,
                    "created": time.time(), "used": base is not None}

        self._build(self.layout.volumes, volume_id, "volume.json", make)
        return self.volume_meta(volume_id) or {}

    def mark_used(self, volume_id: str) -> None:
        """A machine runs on this disk: from now on it may hold the user's files."""
        meta = self.volume_meta(volume_id)
        if meta is not None and not meta.get("used"):
            write_json(self.layout.volume(volume_id) / "volume.json", dict(meta, used=True))

    def delete_volume(self, volume_id: str) -> None:
        self._remove(self.layout.volume(volume_id), self.layout.volumes)
        self.collect()

    def collect(self) -> dict[str, int]:
        """Remove the layers no volume or checkpoint needs; merge those no snapshot stands
        on (never under a running machine's disk)."""
        return self.layers.collect(self._needed, self._busy_tops)

    def _needed(self) -> list[str]:
        volumes = self.all_volumes()
        return vm_layers.each_needed(
            [self.top(v) for v, _ in volumes],
            [m["pending"] for _, m in volumes if isinstance(m.get("pending"), str)],
            [m["layer"] for _, m in self.all_checkpoints() if isinstance(m.get("layer"), str)])

    def _busy_tops(self) -> list[str]:
        return [top for top in (self.top(v) for v in self.busy()) if top]

    def all_volumes(self) -> list[tuple[str, dict[str, Any]]]:
        return self._all(self.layout.volumes, "volume.json")

    def _all(self, parent: Path, marker: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for entry in sorted(os.listdir(parent)) if parent.is_dir() else []:
            if entry.startswith("."):
                continue
            meta = read_json(parent / entry / marker)
            if meta is not None:
                out.append((entry, meta))
        return out

    # -- checkpoints -----------------------------------------------------------------------

    def checkpoint_meta(self, checkpoint_id: str) -> dict[str, Any] | None:
        return read_json(self.layout.checkpoint(checkpoint_id) / "checkpoint.json")

    def checkpoint_disk(self, volume_id: str, checkpoint_id: str, *, cell_id: str,
                        cell_name: str, switch: vm_layers.Switch | None = None,
                        flatten: Callable[[], None] | None = None,
                        for_machine: bool = False) -> dict[str, Any]:
        """Freeze the volume's top as the checkpoint's layer and put a new top over it.

        `switch(path)` makes the new top with the running machine (QEMU), None when nothing
        runs on the disk; `flatten()` streams the running top when the chain grows past the
        bound. `for_machine`: the disk half of a machine snapshot whose memory comes next
        (recorded, so a retry after a crash between the two knows it is its own)."""
        with self.layers.making():
            return self._snapshot_volume(volume_id, checkpoint_id, cell_id=cell_id,
                                         cell_name=cell_name, switch=switch, flatten=flatten,
                                         for_machine=for_machine)

    def _snapshot_volume(self, volume_id: str, checkpoint_id: str, *, cell_id: str,
                         cell_name: str, switch: vm_layers.Switch | None,
                         flatten: Callable[[], None] | None,
                         for_machine: bool = False) -> dict[str, Any]:
        volume = self.volume_meta(volume_id)
        if volume is None:
            raise BackendNotFound(f"volume {volume_id} does not exist")
        if self.top(volume_id) is None:
            if switch is not None:
                raise BackendRefused(f"volume {volume_id} is a disk from before snapshots were "
                                     "block diffs: stop its cell once, then checkpoint")
            self.adopt(volume_id)
        frozen = self.top(volume_id)
        if frozen is None:
            raise BackendNotFound(f"volume {volume_id} has no disk")
        volume = dict(self.volume_meta(volume_id) or {}, top=frozen)
        volume.pop("pending", None)
        new_top = self.layers.prepare_overlay(frozen, volume=volume_id)
        self._write_volume(volume_id, dict(volume, pending=new_top))
        try:
            if switch is not None:
                switch(self.layers.path(new_top))
            else:
                self.layers.overlay(new_top)
        except BaseException:
            self.layers.forget(new_top)
            self._write_volume(volume_id, volume)
            raise

        def make(tmp: Path) -> dict[str, Any]:
            return {"kind": KIND_DISK, "checkpoint": checkpoint_id, "cell_id": cell_id,
                    "cell": cell_name, "volume": volume_id, "taken": time.time(),
                    "layer": frozen, "depth": self.layers.depth(frozen),
                    "size_bytes": vm_layers.allocated(self.layers.path(frozen)),
                    "used": bool(volume.get("used")), "for_machine": for_machine}

        self._build(self.layout.checkpoints, checkpoint_id, "checkpoint.json", make)
        self._write_volume(volume_id, dict(volume, top=new_top))
        if self.layers.needs_flattening(new_top):
            if flatten is not None:
                flatten()
                self.layers.set_parent(new_top, None)
            else:
                self.layers.flatten_stopped(new_top)
        return self.checkpoint_meta(checkpoint_id) or {}

    def checkpoint_layer(self, checkpoint_id: str) -> str:
        """The disk checkpoint's frozen layer; a copied disk from before layers (the first
        slice) becomes one first."""
        meta = self.checkpoint_meta(checkpoint_id)
        if meta is None or meta.get("kind") != KIND_DISK:
            raise BackendNotFound(f"checkpoint {checkpoint_id} does not exist")
        layer = meta.get("layer")
        if isinstance(layer, str):
            return layer
        raw = self.layout.checkpoint(checkpoint_id) / DISK
        if not raw.is_file():
            raise BackendNotFound(f"checkpoint {checkpoint_id} has no disk")
        with self.layers.making():
            layer = self.layers.from_raw(raw, volume=None)
            write_json(self.layout.checkpoint(checkpoint_id) / "checkpoint.json",
                       dict(meta, layer=layer, depth=1))
        raw.unlink()
        return layer

    def checkpoint_machine(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                           save: Any) -> dict[str, Any]:
        """A machine checkpoint whose memory `save(path)` writes; returns its marker."""

        def make(tmp: Path) -> dict[str, Any]:
            saved = save(tmp / MEMORY)
            return {"kind": KIND_MACHINE, "checkpoint": checkpoint_id, "cell_id": cell_id,
                    "cell": cell_name, "taken": time.time(), "size_bytes": saved.size_bytes,
                    "save_seconds": round(saved.seconds, 3), "used": True}

        self._build(self.layout.checkpoints, checkpoint_id, "checkpoint.json", make)
        return self.checkpoint_meta(checkpoint_id) or {}

    def import_checkpoint(self, checkpoint_id: str, *, cell_id: str, cell_name: str,
                          fill: Fill) -> dict[str, Any]:
        if self.checkpoint_meta(checkpoint_id) is not None:
            raise BackendRefused(f"checkpoint {checkpoint_id} already exists")

        def make(tmp: Path) -> dict[str, Any]:
            files, size = fill(tmp / "tree")
            times = vm_exact.times_of(tmp / "tree")  # before any read moves the atimes
            vm_image.tree_bytes(tmp / "tree", "the snapshot archive")  # bounds, before mkfs
            vm_image.mkfs(tmp / "tree", tmp / DISK, max(WORKSPACE_BYTES, size * 2),
                          "devcell-work", exact=True, times=times)
            removal.remove(tmp / "tree")
            layer = self.layers.from_raw(tmp / DISK, volume=None)
            (tmp / DISK).unlink()
            return {"kind": KIND_DISK, "checkpoint": checkpoint_id, "cell_id": cell_id,
                    "cell": cell_name, "taken": time.time(), "imported": True, "layer": layer,
                    "depth": 1, "size_bytes": vm_layers.allocated(self.layers.path(layer)),
                    "files": files, "used": True}

        with self.layers.making():
            self._build(self.layout.checkpoints, checkpoint_id, "checkpoint.json", make)
        return self.checkpoint_meta(checkpoint_id) or {}

    def files_of(self, checkpoint_id: str) -> Path:
        """The disk's tree, read out of the guest-written ext4 by vm_extract (never mounted,
        never followed, bounded) into a temporary of this process beside the checkpoint:
        the caller removes it with `release_files` when its read is over (a crashed reader's
        is swept as any dead temporary), so no second copy of the tree outlives the read."""
        directory = self.layout.checkpoint(checkpoint_id)
        meta = self.checkpoint_meta(checkpoint_id) or {}
        layer = meta.get("layer")
        temporaries.remove_dead(directory)
        removal.remove_quietly(directory / "files")  # a lasting copy earlier versions kept
        tmp = directory / temporaries.temp_name("files")
        tmp.mkdir(mode=0o700)
        try:
            raw = tmp / "disk.raw"
            if isinstance(layer, str):
                vm_layers.qemu_img(["convert", "-q", "-U", "-f", "qcow2", "-O", "raw",
                                    str(self.layers.path(layer)), str(raw)])
            else:
                raw = directory / DISK
            tree = tmp / "tree"
            tree.mkdir(mode=0o700)
            vm_extract.extract(raw, tree, budget=max(os.stat(raw).st_size, WORKSPACE_BYTES))
            if raw.parent == tmp:
                raw.unlink()
        except BaseException:
            removal.remove_quietly(tmp)
            raise
        return tree

    @staticmethod
    def release_files(tree: Path) -> None:
        """Remove a tree `files_of` made (its temporary directory with it)."""
        removal.remove_quietly(tree.parent)

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        self._remove(self.layout.checkpoint(checkpoint_id), self.layout.checkpoints)
        self.collect()

    def all_checkpoints(self) -> list[tuple[str, dict[str, Any]]]:
        return self._all(self.layout.checkpoints, "checkpoint.json")

    def changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """Whether the disk was written after the checkpoint was taken from it: its top
        stands on the checkpoint's layer and holds no block of its own (a machine that only
        mounted it counts as a change, never the reverse)."""
        volume = self.volume_meta(volume_id)
        if volume is None or not volume.get("used"):
            return False
        meta = self.checkpoint_meta(checkpoint_id) if checkpoint_id else None
        top = self.top(volume_id)
        if meta is None or meta.get("volume") != volume_id or top is None:
            return True
        layer = self.layers.get(top)
        if layer is None or layer.parent != meta.get("layer"):
            return True
        return self.layers.has_data(top)
