"""Where the vm backend keeps things under the state directory.

Every path is built from an id that passed `host.ids.safe_id` (letters, digits, `_`
and `-`), so no name can make a path escape the state directory. Everything is owner-only.

    <state>/vm/images/<image-id>-g<v>/rootfs.ext4 the image's root filesystem (+ guest agent
                                                 and init), shared read-only by every cell
    <state>/vm/boot/<release>-g<v>/initrd.cpio  loads virtio drivers, mounts the rootfs
    <state>/vm/cells/<cell_id>/cell.json         marker: cell, runtime hash, image, volume
    <state>/vm/cells/<cell_id>/root.qcow2        the cell's writable rootfs (overlay on the base)
    <state>/vm/cells/<cell_id>/config.img        supervisor.sh + secrets.env, at /devcell
    <state>/vm/cells/<cell_id>/qmp.sock, ga.in, ga.out, ga.lock  QMP (a unix socket) and the
        guest agent (FIFOs QEMU holds open; clients take turns by an flock on ga.lock)
    <state>/vm/cells/<cell_id>/qemu.pid          the QEMU process (checked against its -name)
    <state>/vm/volumes/<vol_id>/volume.json      marker: the workspace disk's top layer
    <state>/vm/layers/<layer-id>.qcow2, .json    the workspace disks' qcow2 layers (vm/layers.py)
    <state>/vm/checkpoints/<id>/checkpoint.json  marker: a disk checkpoint's frozen layer, or
                                                 memory.bin (a machine saved by sleep)
    <state>/vm/machines/<id>/machine.json        a machine snapshot's memory part (vm/memory.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devcell.backends.host.ids import safe_id, state_hash


@dataclass(frozen=True)
class VmLayout:
    state_dir: Path

    @property
    def root(self) -> Path:
        return self.state_dir / "vm"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def boot(self) -> Path:
        return self.root / "boot"

    @property
    def cells(self) -> Path:
        return self.root / "cells"

    @property
    def volumes(self) -> Path:
        return self.root / "volumes"

    @property
    def layers(self) -> Path:
        return self.root / "layers"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def machines(self) -> Path:
        return self.root / "machines"

    def cell(self, cell_id: str) -> Path:
        return self.cells / safe_id("cell", cell_id)

    def volume(self, volume_id: str) -> Path:
        return self.volumes / safe_id("volume", volume_id)

    def checkpoint(self, checkpoint_id: str) -> Path:
        return self.checkpoints / safe_id("checkpoint", checkpoint_id)

    def machine_name(self, cell_id: str) -> str:
        """QEMU's -name for a cell: the label that says whose process it is."""
        return f"devcell-{state_hash(self.state_dir)}-{safe_id('cell', cell_id)}"

    @property
    def name_prefix(self) -> str:
        return f"devcell-{state_hash(self.state_dir)}-"
