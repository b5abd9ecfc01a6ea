"""The vm backend's disk store on stopped disks (real mkfs.ext4 and qemu-img, no machine):
snapshots and forks of a disk nothing runs on, a snapshot killed (-9) at each point of its
switch, and disks from the first vm slice (raw files) adopted as layers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devcell.backends.vm import disks as vm_disks
from devcell.backends.vm.layout import VmLayout
from tests.backends.engine import in_ci

_MISSING = shutil.which("qemu-img") is None or shutil.which("mkfs.ext4") is None
if _MISSING and in_ci():
    pytest.fail("CI needs qemu-img and mkfs.ext4 (scripts/vm-setup)", pytrace=False)
pytestmark = pytest.mark.skipif(_MISSING, reason="qemu-utils or e2fsprogs is not installed")


def store(state: Path) -> vm_disks.DiskStore:
    return vm_disks.DiskStore(VmLayout(state))


def volume(disks: vm_disks.DiskStore, volume_id: str = "vol_a",
           from_checkpoint: str | None = None) -> None:
    disks.create_volume(cell_id="cell_a", cell_name="a", volume_id=volume_id,
                        from_checkpoint=from_checkpoint, op_id=None)


def layer_files(state: Path) -> list[str]:
    return sorted(p.stem for p in (state / "vm" / "layers").glob("*.qcow2"))


def test_a_stopped_disk_snapshots_forks_and_is_collected_to_nothing(tmp_path: Path) -> None:
    disks = store(tmp_path)
    volume(disks)
    first = disks.top("vol_a")
    meta = disks.checkpoint_disk("vol_a", "snap_a", cell_id="cell_a", cell_name="a")
    assert meta["layer"] == first and disks.top("vol_a") != first
    volume(disks, "vol_b", "snap_a")
    assert disks.layers.chain(disks.top("vol_b") or "")[1:] == [first]
    disks.delete_checkpoint("snap_a")  # both volumes still stand on its layer
    assert first in layer_files(tmp_path)
    disks.delete_volume("vol_a")  # one child left: merged into the fork's top
    assert layer_files(tmp_path) == [disks.top("vol_b")]
    disks.delete_volume("vol_b")
    assert layer_files(tmp_path) == []
    assert sorted(os.listdir(tmp_path / "vm" / "layers")) == []


CRASH = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    from devcell.backends.vm import disks as vm_disks
    from devcell.backends.vm.layout import VmLayout
    disks = vm_disks.DiskStore(VmLayout(Path(sys.argv[1])))
    made = sys.argv[2] == "after-switch"

    def switch(path):
        if made:
            disks.layers.overlay(path.stem)  # what QEMU's blockdev-snapshot-sync makes
        os._exit(137)  # killed: no cleanup runs

    disks.checkpoint_disk("vol_a", "snap_x", cell_id="cell_a", cell_name="a", switch=switch)
    """)


@pytest.mark.parametrize("point", ["before-switch", "after-switch"])
def test_a_snapshot_killed_at_its_switch_leaves_a_disk_that_boots_and_collects(
        tmp_path: Path, point: str) -> None:
    disks = store(tmp_path)
    volume(disks)
    old_top = disks.top("vol_a")
    died = subprocess.run([sys.executable, "-c", CRASH, str(tmp_path), point],
                          cwd=Path(__file__).resolve().parents[3])
    assert died.returncode == 137
    assert disks.checkpoint_meta("snap_x") is None  # never recorded: the retry takes it
    top = disks.top("vol_a")
    if point == "after-switch":
        # The machine writes to the new top: it is the disk from now on.
        assert top != old_top and disks.layers.chain(top or "")[1:] == [old_top]
    else:
        assert top == old_top
    assert disks.volume_drive("vol_a") == (disks.layers.path(top or ""), "qcow2")
    disks.collect()  # what no marker names is removed or merged; the disk's view stays
    top = disks.top("vol_a")
    assert layer_files(tmp_path) == [top]
    meta = disks.checkpoint_disk("vol_a", "snap_x", cell_id="cell_a", cell_name="a")
    assert meta["layer"] == top


def test_disks_of_the_first_slice_become_layers(tmp_path: Path) -> None:
    """A volume and a checkpoint from before layers (raw workspace.img files)."""
    disks = store(tmp_path)
    layout = VmLayout(tmp_path)
    old_volume = layout.volume("vol_old")
    old_volume.mkdir(mode=0o700)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(old_volume / vm_disks.DISK), "64M"],
                   check=True)
    vm_disks.write_json(old_volume / "volume.json", {"volume": "vol_old", "cell_id": "cell_a",
                                                     "used": True})
    old_checkpoint = layout.checkpoint("snap_old")
    old_checkpoint.mkdir(mode=0o700)
    shutil.copyfile(old_volume / vm_disks.DISK, old_checkpoint / vm_disks.DISK)
    vm_disks.write_json(old_checkpoint / "checkpoint.json", {"kind": "disk",
                                                             "volume": "vol_old"})
    assert disks.volume_drive("vol_old") == (old_volume / vm_disks.DISK, "raw")
    disks.checkpoint_disk("vol_old", "snap_new", cell_id="cell_a", cell_name="a")
    path, fmt = disks.volume_drive("vol_old")
    assert fmt == "qcow2" and not (old_volume / vm_disks.DISK).exists()
    volume(disks, "vol_fork", "snap_old")
    assert not (old_checkpoint / vm_disks.DISK).exists()
    assert (disks.checkpoint_meta("snap_old") or {}).get("layer") in layer_files(tmp_path)
