"""A vm cell's new workspace disk made from a snapshot archive (`spec.workspace.source.archive`),
without booting: the disk holds the archive's tree, and a damaged archive leaves no disk and
no temporary (the same reader as an import, pointed at the tree mkfs is given)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from devcell.backends.archives import write as archive_write
from devcell.backends.host.workspace_seed import ArchiveSource
from devcell.backends.vm import extract
from devcell.backends.vm import layers as vm_layers
from devcell.backends.vm.disks import DiskStore
from devcell.backends.vm.layout import VmLayout
from devcell.errors import ArchiveRefused
from tests.backends.archive_support import HEADER, make_tree

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("debugfs", "mkfs.ext4", "qemu-img")),
    reason="the vm backend's disk tools (e2fsprogs, qemu-utils) are not installed")


def _archive(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    make_tree(tree)
    path = tmp_path / "snap.tar"
    with path.open("wb") as out:
        archive_write.write(out, HEADER, tree)
    return path


def test_an_archive_seeds_a_new_vm_workspace_disk_and_a_damaged_one_leaves_none(
        tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    store = DiskStore(VmLayout(tmp_path / "state"))
    store.create_volume(cell_id="cell_1", cell_name="c", volume_id="vol_1",
                        from_checkpoint=None, op_id=None, seed=ArchiveSource(str(archive)))
    raw = tmp_path / "disk.raw"
    vm_layers.qemu_img(["convert", "-q", "-f", "qcow2", "-O", "raw",
                        str(store.volume_disk("vol_1")), str(raw)])
    out = tmp_path / "out"
    out.mkdir()
    extract.extract(raw, out, budget=1 << 30)
    assert (out / "src" / "main.py").read_text() == "print('hello')\n"
    assert (out / "src" / "pkg" / "data.bin").read_bytes() == \
        (tmp_path / "tree" / "src" / "pkg" / "data.bin").read_bytes()
    assert os.readlink(out / "python") == "/usr/bin/python3"

    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "damaged.tar"
    damaged.write_bytes(bytes(data))
    volumes = VmLayout(tmp_path / "state").state_dir / "vm" / "volumes"
    before = sorted(os.listdir(volumes))
    with pytest.raises(ArchiveRefused, match="no workspace made"):
        store.create_volume(cell_id="cell_2", cell_name="d", volume_id="vol_2",
                            from_checkpoint=None, op_id=None, seed=ArchiveSource(str(damaged)))
    assert sorted(os.listdir(volumes)) == before
