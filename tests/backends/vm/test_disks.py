"""Block-diff disk snapshots of vm cells on real QEMU (TCG here, no mocks): what a snapshot
holds, forks as free overlays, chains flattened past their bound, parents deleted under a live
fork, accounting against `du` and qemu-img, and nothing left behind.

One parent machine and one fork are shared by the module; the tests run in file order and
each builds on what the previous one left (the chain grows snapshot by snapshot)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.base import CellRef, Consistency
from devcell.backends.vm.backend import VmBackend
from devcell.backends.vm.capacity import VmAccounting
from tests.backends.vm.conftest import SPEC, booted_cell, run

BOUND = 3
FORK = CellRef("cell_vmdisk0002", "fork", SPEC, "vol_vmdisk0002")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path
          ) -> Iterator[dict[str, Any]]:
    state = tmp_path_factory.mktemp("vmdisk") / "state"
    ref = CellRef("cell_vmdisk0001", "disky", SPEC, "vol_vmdisk0001")
    with booted_cell(state, vm_cache, ref, max_chain=BOUND) as backend:
        yield {"backend": backend, "ref": ref, "state": state}


def ok(backend: VmBackend, ref: CellRef, script: str) -> str:
    code, out, err = run(backend, ref, script)
    assert code == 0, (script, out, err)
    return out


def layer_of(backend: VmBackend, checkpoint_id: str) -> Path:
    meta = backend.disks.checkpoint_meta(checkpoint_id) or {}
    return backend.disks.layers.path(str(meta["layer"]))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def qemu_img_info(path: Path) -> dict[str, Any]:
    out = subprocess.run(["qemu-img", "info", "-U", "--output=json", "-f", "qcow2", str(path)],
                         check=True, capture_output=True, text=True).stdout
    value: dict[str, Any] = json.loads(out)
    return value


def test_a_file_written_before_a_snapshot_is_in_the_fork_and_one_after_is_not(
        world: dict[str, Any]) -> None:
    backend, ref = world["backend"], world["ref"]
    ok(backend, ref, "echo before > /workspace/before.txt")
    info = backend.checkpoint(ref, "snap_d1")
    assert info.consistency is Consistency.FILESYSTEM
    assert not backend.observe(ref).frozen
    ok(backend, ref, "echo after > /workspace/after.txt; sync")
    frozen = digest(layer_of(backend, "snap_d1"))

    backend.create_volume(FORK, "vol_vmdisk0002", from_checkpoint="snap_d1")
    fork_top = backend.disks.volume_disk("vol_vmdisk0002")
    assert os.stat(fork_top).st_blocks * 512 < 1 << 20  # nothing copied up front
    assert qemu_img_info(fork_top)["backing-filename"] == str(layer_of(backend, "snap_d1"))
    backend.create(FORK, "hash-1")
    backend.start(FORK)
    assert ok(backend, FORK, "cat /workspace/before.txt") == "before\n"
    assert ok(backend, FORK, "test -e /workspace/after.txt || echo absent") == "absent\n"

    ok(backend, FORK, "echo fork > /workspace/before.txt; echo mine > /workspace/fork.txt; "
                      "sync")
    assert ok(backend, ref, "cat /workspace/before.txt; ls /workspace") == \
        "before\nafter.txt\nbefore.txt\n"  # no lost+found: a workspace holds what it was given
    assert digest(layer_of(backend, "snap_d1")) == frozen  # the fork never wrote it
    tree = backend.checkpoint_files("snap_d1")
    assert tree is not None and (tree / "before.txt").read_text() == "before\n"
    assert not (tree / "after.txt").exists() and not (tree / "fork.txt").exists()


def test_a_block_diff_snapshot_holds_only_the_blocks_written_since_the_previous(
        world: dict[str, Any]) -> None:
    backend, ref = world["backend"], world["ref"]
    assert backend.capabilities.block_diff  # declared, as it is done
    ok(backend, ref, "dd if=/dev/urandom of=/workspace/blob bs=1M count=2 2>/dev/null; sync")
    info = backend.checkpoint(ref, "snap_d2")
    # 2 MiB of data plus the filesystem's metadata and journal blocks, not the disk.
    assert 2 << 20 <= info.size_bytes < 6 << 20, info.size_bytes
    assert (backend.disks.checkpoint_meta("snap_d2") or {})["depth"] == 2
    assert layer_of(backend, "snap_d2") != layer_of(backend, "snap_d1")
    top = backend.disks.top("vol_vmdisk0001") or ""
    assert backend.disks.layers.sizes([top]) < 1 << 20  # the new top starts (nearly) empty
    ok(backend, ref, "echo x > /workspace/changed; sync")
    assert backend.workspace_changed_since("vol_vmdisk0001", "snap_d2")


def du_all(*paths: Path) -> int:
    """`du -scxB1`: blocks allocated, each inode once over all the paths."""
    out = subprocess.run(["du", "-scxB1", *map(str, paths)], check=True, capture_output=True,
                         text=True).stdout
    return int(out.splitlines()[-1].split()[0])


@contextlib.contextmanager
def frozen(backend: VmBackend, *refs: CellRef) -> Iterator[None]:
    """The guests' filesystems frozen (fsfreeze through the agent), so no layer grows while
    `du` and the accounting measure it: a running guest writes its journal every few seconds."""
    try:
        for ref in refs:
            backend.quiesce(ref)
        yield
    finally:
        for ref in refs:
            backend.resume(ref)


def test_accounting_matches_du_and_qemu_img_each_layer_once(world: dict[str, Any]) -> None:
    with frozen(world["backend"], world["ref"], FORK):
        _accounting_matches_du_and_qemu_img(world)


def _accounting_matches_du_and_qemu_img(world: dict[str, Any]) -> None:
    backend, state = world["backend"], world["state"]
    accounting = VmAccounting(state_dir=state)
    layers = state / "vm" / "layers"
    files = sorted(layers.glob("*.qcow2"))
    du = {p.name: int(subprocess.run(["du", "-B1", str(p)], check=True, capture_output=True,
                                     text=True).stdout.split()[0]) for p in files}
    for path in files:
        assert qemu_img_info(path)["actual-size"] == du[path.name]

    def layer_files(*ids: str) -> list[Path]:  # a layer is its qcow2 and its record
        return [layers / f"{i}.{ext}" for i in ids for ext in ("qcow2", "json")]

    volume, fork_volume = (backend.layout.volume(v) for v in ("vol_vmdisk0001",
                                                              "vol_vmdisk0002"))
    chain = backend.disks.layers.chain(backend.disks.top("vol_vmdisk0001") or "")
    usage = accounting.workspace_usage("vol_vmdisk0001")
    assert usage is not None
    assert usage.workspace.disk == du_all(volume, *layer_files(*chain))
    # The blocks holding data as the guest sees them: the blob and the filesystem's own.
    assert 2 << 20 < usage.workspace.logical < 128 << 20
    assert usage.own_disk == du_all(volume, *layer_files(chain[0]))  # the rest: snapshots'
    assert usage.since == "snap_d2"
    assert 0 < usage.changed_bytes < 1 << 20  # blocks written since snap_d2, not tables
    snaps = accounting.checkpoints_usage(None)
    by_id = {item.checkpoint_id: item for item in snaps.items}
    assert by_id["snap_d1"].forks == ("vol_vmdisk0002",) and by_id["snap_d1"].unique == 0
    checkpoints = [backend.layout.checkpoint(s) for s in ("snap_d1", "snap_d2")]
    # A checkpoint's directory counts too (its marker, snap_d1's extracted files).
    assert snaps.total.disk == du_all(*checkpoints, *layer_files(
        *{layer_of(backend, s).stem for s in ("snap_d1", "snap_d2")}))
    # Every layer once: the parent, the fork and the snapshots together are the directory.
    fork = accounting.workspace_usage("vol_vmdisk0002")
    assert fork is not None and fork.fork_of == "snap_d1"
    assert snaps.total.disk + usage.own_disk + fork.own_disk == du_all(
        *layer_files(*(p.stem for p in files)), volume, fork_volume, *checkpoints)
    assert dict(accounting.volumes()) == {"vol_vmdisk0001": "cell_vmdisk0001",
                                          "vol_vmdisk0002": "cell_vmdisk0002"}
    runtimes = accounting.runtimes_usage()
    assert set(runtimes) == {"cell_vmdisk0001", "cell_vmdisk0002"}
    assert all((r.memory_bytes or 0) > 16 << 20 for r in runtimes.values())


def test_a_chain_deeper_than_the_bound_is_flattened_and_keeps_every_file(
        world: dict[str, Any]) -> None:
    backend, ref = world["backend"], world["ref"]
    blob = ok(backend, ref, "md5sum < /workspace/blob")
    ok(backend, ref, "echo three > /workspace/three.txt")
    backend.checkpoint(ref, "snap_d3")  # the top would be 4 deep: streamed to stand alone
    top = backend.disks.top("vol_vmdisk0001") or ""
    assert backend.disks.layers.depth(top) == 1
    assert "backing-filename" not in qemu_img_info(backend.disks.layers.path(top))
    ok(backend, ref, "echo four > /workspace/four.txt")
    backend.checkpoint(ref, "snap_d4")
    assert backend.disks.layers.depth(backend.disks.top("vol_vmdisk0001") or "") == 2
    backend.stop(ref)
    backend.start(ref)  # the chain as written on disk, read by a new QEMU
    assert ok(backend, ref, "cat /workspace/before.txt /workspace/three.txt "
                            "/workspace/four.txt; md5sum < /workspace/blob") == \
        "before\nthree\nfour\n" + blob
    tree = backend.checkpoint_files("snap_d3")
    assert tree is not None and (tree / "three.txt").read_text() == "three\n"


def test_deleting_the_parent_and_its_snapshots_keeps_the_fork_working(
        world: dict[str, Any]) -> None:
    backend, ref, state = world["backend"], world["ref"], world["state"]
    backend.delete(ref)
    backend.delete_volume("vol_vmdisk0001")
    for snap in ("snap_d1", "snap_d2", "snap_d3", "snap_d4"):
        assert backend.delete_checkpoint(snap) == {"deleted": True}
    assert ok(backend, FORK, "cat /workspace/before.txt /workspace/fork.txt") == "fork\nmine\n"
    # The fork runs on its top over the first snapshot's layer: that layer stays while QEMU
    # has it open, and is merged into the fork's top when the fork stops.
    assert len(list((state / "vm" / "layers").glob("*.qcow2"))) == 2
    assert backend.disks.collect() == {"removed": 0, "merged": 0}
    backend.stop(FORK)
    top = backend.disks.volume_disk("vol_vmdisk0002")
    assert sorted((state / "vm" / "layers").glob("*.qcow2")) == [top]
    assert "backing-filename" not in qemu_img_info(top)
    backend.start(FORK)
    assert ok(backend, FORK, "cat /workspace/before.txt /workspace/fork.txt; "
                             "test -e /workspace/after.txt || echo absent") == \
        "fork\nmine\nabsent\n"


def test_nothing_is_left_after_every_snapshot_and_cell_is_deleted(
        world: dict[str, Any]) -> None:
    backend, state = world["backend"], world["state"]
    backend.checkpoint(FORK, "snap_d5")
    backend.delete(FORK)
    backend.delete_volume("vol_vmdisk0002")
    backend.delete_checkpoint("snap_d5")
    for part in ("cells", "volumes", "checkpoints", "layers"):
        assert os.listdir(state / "vm" / part) == [], part
