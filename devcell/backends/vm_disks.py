"""Workspace disks and checkpoints of the vm backend: each a file, made whole or not at all.

A vm cell's workspace is its own disk (`workspace.img`, sparse ext4, attached as /dev/vdc), so
a workspace checkpoint is a copy of that disk taken while the guest's filesystems are frozen
through its agent (`cp --sparse=always --reflink=auto`: on btrfs or XFS a reflink, here a
sparse copy of the allocated blocks). A machine checkpoint (sleep) holds `memory.bin`, QEMU's
saved memory and device state. Each is built in `.tmp-<id>-<owner>-...` and renamed into
place after its marker is written (temporaries.py removes what a killed owner left), removed
by renaming to `.trash-...` first. A disk that no machine ever ran on holds no user files: the
orphan sweep may remove it; any other is kept for a decision (its `content`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from devcell.backends import children, temporaries, vm_image
from devcell.backends.base import Fill
from devcell.backends.container_layout import safe_id
from devcell.backends.vm_layout import VmLayout
from devcell.errors import BackendError, BackendNotFound, BackendRefused

WORKSPACE_BYTES = 1 << 30
DISK = "workspace.img"
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


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def allocated(path: Path) -> int:
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def copy_disk(source: Path, target: Path) -> None:
    done = children.run(["cp", "--sparse=always", "--reflink=auto", str(source), str(target)])
    if done.returncode != 0:
        raise BackendError(f"copying disk {source.name} failed: {done.stderr.strip()[-300:]}")


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


class DiskStore:
    def __init__(self, layout: VmLayout) -> None:
        self.layout = layout
        for path in (layout.state_dir, layout.root, layout.volumes, layout.checkpoints,
                     layout.cells, layout.images, layout.boot):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)

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
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    @staticmethod
    def _remove(path: Path, parent: Path) -> None:
        if not path.exists():
            return
        trash = temporaries.trash(parent)
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    # -- volumes ---------------------------------------------------------------------------

    def volume_meta(self, volume_id: str) -> dict[str, Any] | None:
        return read_json(self.layout.volume(volume_id) / "volume.json")

    def volume_disk(self, volume_id: str) -> Path:
        return self.layout.volume(volume_id) / DISK

    def create_volume(self, *, cell_id: str, cell_name: str, volume_id: str,
                      from_checkpoint: str | None, op_id: str | None) -> dict[str, Any]:
        existing = self.volume_meta(volume_id)
        if existing is not None:
            return existing
        source = None
        if from_checkpoint is not None:
            meta = self.checkpoint_meta(from_checkpoint)
            if meta is None or meta.get("kind") != KIND_DISK:
                raise BackendNotFound(f"checkpoint {from_checkpoint} does not exist")
            source = self.layout.checkpoint(from_checkpoint) / DISK

        def make(tmp: Path) -> dict[str, Any]:
            if source is None:
                vm_image.mkfs(None, tmp / DISK, WORKSPACE_BYTES, "devcell-work")
            else:
                copy_disk(source, tmp / DISK)
            return {"volume": volume_id, "cell_id": safe_id("cell", cell_id), "cell": cell_name,
                    "from_checkpoint": from_checkpoint, "operation": op_id,
                    "created": time.time(), "used": source is not None}

        self._build(self.layout.volumes, volume_id, "volume.json", make)
        return self.volume_meta(volume_id) or {}

    def mark_used(self, volume_id: str) -> None:
        """A machine runs on this disk: from now on it may hold the user's files."""
        meta = self.volume_meta(volume_id)
        if meta is not None and not meta.get("used"):
            write_json(self.layout.volume(volume_id) / "volume.json", dict(meta, used=True))

    def delete_volume(self, volume_id: str) -> None:
        self._remove(self.layout.volume(volume_id), self.layout.volumes)

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
                        cell_name: str) -> dict[str, Any]:
        volume = self.volume_meta(volume_id)
        if volume is None:
            raise BackendNotFound(f"volume {volume_id} does not exist")
        disk = self.volume_disk(volume_id)

        def make(tmp: Path) -> dict[str, Any]:
            mtime = _mtime(disk)
            copy_disk(disk, tmp / DISK)
            return {"kind": KIND_DISK, "checkpoint": checkpoint_id, "cell_id": cell_id,
                    "cell": cell_name, "volume": volume_id, "taken": time.time(),
                    "size_bytes": allocated(tmp / DISK), "source_mtime_ns": mtime,
                    "used": bool(volume.get("used"))}

        self._build(self.layout.checkpoints, checkpoint_id, "checkpoint.json", make)
        return self.checkpoint_meta(checkpoint_id) or {}

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
            vm_image.mkfs(tmp / "tree", tmp / DISK, max(WORKSPACE_BYTES, size * 2),
                          "devcell-work")
            shutil.rmtree(tmp / "tree")
            return {"kind": KIND_DISK, "checkpoint": checkpoint_id, "cell_id": cell_id,
                    "cell": cell_name, "taken": time.time(), "imported": True,
                    "size_bytes": allocated(tmp / DISK), "files": files, "used": True}

        self._build(self.layout.checkpoints, checkpoint_id, "checkpoint.json", make)
        return self.checkpoint_meta(checkpoint_id) or {}

    def files_of(self, checkpoint_id: str) -> Path:
        """`<checkpoint>/files`: the disk's tree, dumped by debugfs on first use."""
        directory = self.layout.checkpoint(checkpoint_id)
        final = directory / "files"
        if final.is_dir():
            return final
        tmp = directory / temporaries.temp_name("files")
        tmp.mkdir(mode=0o700)
        try:
            target = str(tmp).replace("\\", "\\\\").replace('"', '\\"')
            done = children.run(["debugfs", "-R", f'rdump / "{target}"', str(directory / DISK)])
            if done.returncode != 0 or "rdump:" in done.stderr:
                raise BackendError(f"reading checkpoint {checkpoint_id}'s disk failed: "
                                   f"{done.stderr.strip()[-300:]}")
            lost = tmp / "lost+found"
            if lost.is_dir() and not any(lost.iterdir()):
                lost.rmdir()
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return final

    def delete_checkpoint(self, checkpoint_id: str) -> None:
        self._remove(self.layout.checkpoint(checkpoint_id), self.layout.checkpoints)

    def all_checkpoints(self) -> list[tuple[str, dict[str, Any]]]:
        return self._all(self.layout.checkpoints, "checkpoint.json")

    def changed_since(self, volume_id: str, checkpoint_id: str | None) -> bool:
        """Whether the disk was written after the checkpoint was taken from it (by its
        mtime: a machine that only mounted it counts as a change, never the reverse)."""
        volume = self.volume_meta(volume_id)
        if volume is None or not volume.get("used"):
            return False
        meta = self.checkpoint_meta(checkpoint_id) if checkpoint_id else None
        if meta is None or meta.get("volume") != volume_id:
            return True
        return _mtime(self.volume_disk(volume_id)) != meta.get("source_mtime_ns")
