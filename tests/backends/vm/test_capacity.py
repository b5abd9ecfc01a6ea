"""The vm backend's accounting of what machines hold beside their disks, on plain sparse files
(no QEMU): RAM files, a sleep's saved state and machine snapshots' memory parts, each counted
as `du -B1` counts them (blocks, each inode once), attributed to the cell or the snapshot,
and what deleting a snapshot frees. The same numbers against a real machine are in
test_capacity_cli.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.base import OwnedKind
from devcell.backends.vm import backend as vm
from devcell.backends.vm import capacity as vm_capacity
from devcell.backends.vm.capacity import VmAccounting, running_machines
from devcell.backends.vm.layout import VmLayout

MiB = 1 << 20


def du(*paths: Path) -> int:
    """`du -scxB1` of the paths: blocks allocated, each inode once over all of them."""
    out = subprocess.run(["du", "-scxB1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout
    return int(out.splitlines()[-1].split()[0])


def _sparse(path: Path, size: int, written: list[tuple[int, int]]) -> None:
    """A file of apparent `size` whose only data is `written` (offset, length)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, length in written:
            f.seek(offset)
            f.write(os.urandom(length))
        f.flush()
        os.fsync(f.fileno())


def _marker(path: Path, meta: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A vm state directory as the backend leaves it: a sleeping cell (its RAM file and its
    sleep's device state), its volume on two layers, a machine snapshot of it whose config disk
    is hard-linked with an orphan machine part's, and things DevCell must not count."""
    state = tmp_path / "state"
    layout = VmLayout(state)
    cell = layout.cell("cell_a")
    _marker(cell / "cell.json", {"cell_id": "cell_a"})
    _sparse(cell / vm.RAM_FILE, 64 * MiB, [(8 * MiB, MiB), (40 * MiB, 256 << 10)])
    _sparse(cell / "root.qcow2", 2 * MiB, [(0, 192 << 10)])
    _sparse(cell / "config.img", 8 * MiB, [(0, 64 << 10)])
    _marker(layout.checkpoint("sleep-a") / "checkpoint.json",
            {"kind": "machine", "cell_id": "cell_a"})
    _sparse(layout.checkpoint("sleep-a") / "memory.bin", 70 << 10, [(0, 70 << 10)])
    _marker(layout.layers / "layb.json", {"parent": None, "volume": "vol_a"})
    _sparse(layout.layers / "layb.qcow2", 4 * MiB, [(0, 320 << 10)])
    _marker(layout.layers / "layt.json", {"parent": "layb", "volume": "vol_a"})
    _sparse(layout.layers / "layt.qcow2", 4 * MiB, [(0, 64 << 10)])
    _marker(layout.volume("vol_a") / "volume.json", {"cell_id": "cell_a", "top": "layt"})
    _marker(layout.checkpoint("snap_b") / "checkpoint.json",
            {"kind": "disk", "cell_id": "cell_a", "volume": "vol_a", "layer": "layb",
             "for_machine": True})
    part = layout.machines / "snap_b"
    _marker(part / "machine.json", {"cell_id": "cell_a", "memory_in_file": True})
    _sparse(part / "ram.bin", 64 * MiB, [(0, 2 * MiB)])
    _sparse(part / "state.bin", 300 << 10, [(0, 300 << 10)])
    _sparse(part / "root.qcow2", 2 * MiB, [(0, 192 << 10)])
    _sparse(part / "config.img", 8 * MiB, [(0, 64 << 10)])
    orphan = layout.machines / "snap_c"  # a part whose disk half a crash never took
    _marker(orphan / "machine.json", {"cell_id": "cell_a"})
    os.link(part / "config.img", orphan / "config.img")
    # Never counted: a link planted where a part could be, a temporary of a save in
    # progress, a link inside a part (its own blocks only, never its target's).
    outside = tmp_path / "outside"
    _sparse(outside / "big", 16 * MiB, [(0, 16 * MiB)])
    (layout.machines / "snap_x").symlink_to(outside)
    _sparse(layout.machines / ".tmp-snap_d-1-2" / "ram.bin", 64 * MiB, [(0, 4 * MiB)])
    (part / "evil").symlink_to(outside / "big")
    return state


def test_a_sleeping_machine_holds_its_directory_and_ram_file_counted_as_du_does(
        state: Path) -> None:
    layout = VmLayout(state)
    run = VmAccounting(state_dir=state).runtimes_usage()["cell_a"]
    ram = layout.cell("cell_a") / vm.RAM_FILE
    assert (run.running, run.held) == (False, True)  # asleep: in use, not reclaimable
    assert run.ram_file_bytes == du(ram) < ram.stat().st_size  # blocks, not apparent size
    assert run.ram_file_bytes >= MiB + (256 << 10)
    assert run.files_bytes == du(layout.cell("cell_a"))


def test_a_machine_snapshot_counts_its_memory_part_and_deleting_it_frees_it(
        state: Path) -> None:
    layout = VmLayout(state)
    part, orphan = layout.machines / "snap_b", layout.machines / "snap_c"
    found = VmAccounting(state_dir=state).checkpoints_usage()
    items = {i.checkpoint_id: i for i in found.items}
    assert set(items) == {"sleep-a", "snap_b", "snap_c"}
    snap = items["snap_b"]
    layer = [layout.layers / "layb.qcow2", layout.layers / "layb.json"]
    assert snap.usage.disk == du(layout.checkpoint("snap_b"), part, *layer)
    assert snap.memory_disk == du(part)
    # Its frozen layer is its volume's too: deleting the snapshot frees its directory and its
    # part but the config disk, whose other link is in the orphan part.
    config = (part / "config.img").stat().st_blocks * 512
    assert snap.unique == du(layout.checkpoint("snap_b"), part) - config
    assert items["snap_c"].unique == du(orphan) - config
    sleep = items["sleep-a"]
    assert sleep.memory_disk == du(layout.checkpoint("sleep-a") / "memory.bin")
    assert sleep.unique == du(layout.checkpoint("sleep-a"))
    # Every checkpoint's files once; together the two parts free their shared disk too; the
    # sleep a machine wakes from is not reclaimable.
    assert found.total.disk == du(*layout.checkpoints.iterdir(), part, orphan, *layer)
    assert found.freed_together == du(layout.checkpoint("snap_b"), part, orphan)
    before = du(layout.root)
    assert VmAccounting(state_dir=state).exclusive_bytes(
        OwnedKind.CHECKPOINT, "snap_b") == snap.unique
    for gone in (layout.checkpoint("snap_b"), part):
        subprocess.run(["rm", "-rf", str(gone)], check=True)
    assert before - du(layout.root) == snap.unique


def test_only_the_snapshots_asked_for_are_measured(state: Path) -> None:
    found = VmAccounting(state_dir=state).checkpoints_usage(["snap_b", "nope"])
    assert [i.checkpoint_id for i in found.items] == ["snap_b"]
    layout = VmLayout(state)
    assert found.total.disk == du(layout.checkpoint("snap_b"), layout.machines / "snap_b",
                                  layout.layers / "layb.qcow2", layout.layers / "layb.json")


def test_a_volume_counts_its_layers_and_its_marker(state: Path) -> None:
    layout = VmLayout(state)
    ws = VmAccounting(state_dir=state).workspace_usage("vol_a")
    assert ws is not None
    layers = [layout.layers / f"{lay}.{ext}" for lay in ("layb", "layt")
              for ext in ("qcow2", "json")]
    assert ws.workspace.disk == du(layout.volume("vol_a"), *layers)
    assert ws.own_disk == du(layout.volume("vol_a"), *layers[2:])  # layb is the snapshot's


@pytest.fixture
def fork_running(state: Path) -> Iterator[str]:
    """A cell whose running machine maps snap_b's RAM file (a fork's, before it next sleeps):
    its marker says so, and a stand-in process carries the machine's label the way QEMU's
    -name does (vm_proc's scan finds machines by it; a real fork's mapping is not booted
    here)."""
    layout = VmLayout(state)
    _marker(layout.cell("cell_f") / "cell.json",
            {"cell_id": "cell_f", "ram_from": str(layout.machines / "snap_b" / "ram.bin")})
    stand_in = subprocess.Popen(
        ["qemu-system-x86_64", "-c", "sleep 60; :", "-name", layout.machine_name("cell_f")],
        executable="/bin/sh")
    deadline = time.monotonic() + 30  # until the child has exec'd, its cmdline is ours
    while "cell_f" not in running_machines(layout) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield "cell_f"
    finally:
        stand_in.kill()
        stand_in.wait()


def test_a_ram_file_a_running_fork_maps_is_not_reclaimable_and_says_who_maps_it(
        state: Path, fork_running: str) -> None:
    layout = VmLayout(state)
    accounting = VmAccounting(state_dir=state)
    assert accounting.runtimes_usage()[fork_running].running
    found = accounting.checkpoints_usage()
    snap = {i.checkpoint_id: i for i in found.items}["snap_b"]
    part = layout.machines / "snap_b"
    config = (part / "config.img").stat().st_blocks * 512
    assert snap.mapped_by == (fork_running,)
    assert snap.unique == du(layout.checkpoint("snap_b"), part) - config - du(part / "ram.bin")
    assert found.freed_together == du(layout.checkpoint("snap_b"), part,
                                      layout.machines / "snap_c") - du(part / "ram.bin")


def test_a_stopped_machine_is_reclaimable_and_keeps_no_ram(state: Path) -> None:
    layout = VmLayout(state)
    (layout.cell("cell_a") / vm.RAM_FILE).unlink()  # stop empties it
    (layout.checkpoint("sleep-a") / "checkpoint.json").unlink()
    run = VmAccounting(state_dir=state).runtimes_usage()["cell_a"]
    assert (run.running, run.held, run.ram_file_bytes) == (False, False, 0)
    assert run.files_bytes == du(layout.cell("cell_a"))


def test_the_ram_file_name_is_the_backends() -> None:
    assert vm_capacity.CELL_RAM == vm.RAM_FILE
