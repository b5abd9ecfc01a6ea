"""The memory half of a vm cell's machine snapshot: its RAM, device state, root and config.

A Snapshot with `consistency: machine` of a running vm cell is two parts taken at one paused
moment: the workspace disk checkpoint (vm/disks.py, the same as a filesystem snapshot's) and
this machine part, `<state>/vm/machines/<id>/`:

    machine.json   marker: cell, RAM size, CPUs, accel, whether the RAM is in ram.bin
    ram.bin        the guest's RAM (a sparse copy of its memory-backend file), read-only:
                   every fork maps it copy-on-write (share=off), so it is never written again
    state.bin      QEMU's device state (migrate with x-ignore-shared: a few hundred KiB)
    root.qcow2     the cell's root overlay and config.img its config disk, as they were

The part is built in `.tmp-<id>-<owner>-...` and renamed into place after its marker is
written, then the disk checkpoint is taken; a snapshot is `machine` only when both exist, so a
crash between them leaves a part no snapshot names, which a retake replaces and the orphan
sweep removes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell.backends.host import removal, temporaries
from devcell.backends.host.ids import safe_id
from devcell.backends.vm.disks import read_json, write_json
from devcell.backends.vm.layout import VmLayout

MARKER = "machine.json"
RAM = "ram.bin"
STATE = "state.bin"
ROOT = "root.qcow2"
CONFIG = "config.img"


class MachineParts:
    def __init__(self, layout: VmLayout) -> None:
        self.root = layout.root / "machines"
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def path(self, checkpoint_id: str) -> Path:
        return self.root / safe_id("checkpoint", checkpoint_id)

    def meta(self, checkpoint_id: str) -> dict[str, Any] | None:
        return read_json(self.path(checkpoint_id) / MARKER)

    def take(self, checkpoint_id: str, fill: Callable[[Path], dict[str, Any]]
             ) -> dict[str, Any]:
        """Build the part: `fill(tmp)` writes its files and returns its marker."""
        final = self.path(checkpoint_id)
        temporaries.remove_dead(self.root, f"{temporaries.TMP}{checkpoint_id}-")
        tmp = self.root / temporaries.temp_name(checkpoint_id)
        tmp.mkdir(mode=0o700)
        try:
            meta = fill(tmp)
            for name in (RAM, STATE, ROOT, CONFIG):
                if (tmp / name).exists():
                    (tmp / name).chmod(0o400)  # forks map or copy it; nothing writes it
            write_json(tmp / MARKER, meta)
            self.delete(checkpoint_id)  # one no snapshot named (a crash before its disk)
            os.rename(tmp, final)
        except BaseException:
            removal.remove_quietly(tmp)
            raise
        return meta

    def delete(self, checkpoint_id: str) -> bool:
        path = self.path(checkpoint_id)
        if not path.exists():
            return False
        trash = temporaries.trash(self.root)
        os.rename(path, trash)
        removal.remove_quietly(trash)
        return True

    def all(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for entry in sorted(os.listdir(self.root)):
            if entry.startswith("."):
                continue
            meta = read_json(self.root / entry / MARKER)
            if meta is not None:
                out.append((entry, meta))
        return out

    def size(self, checkpoint_id: str) -> int:
        """Bytes the part holds on disk (its sparse RAM file counts what it allocated)."""
        total = 0
        for name in (RAM, STATE, ROOT, CONFIG):
            try:
                total += os.stat(self.path(checkpoint_id) / name,
                                 follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
        return total
