"""vm backend: block-diff disk snapshots vs full copies, after a 1% change, same run.

One vm cell's workspace is filled with `--data` MiB of random files and snapshotted once.
Then, `--runs` times: 1% of that data is overwritten in the guest (dd conv=notrunc over one
file), and the same state is captured both ways, in turns:
  diff       backend.checkpoint(): guest frozen through its agent, QMP
             blockdev-snapshot-sync; the frozen qcow2 layer holds the blocks written since
  full       what the first slice did (and what any whole-disk snapshot costs): the whole
             disk copied (qemu-img convert of the chain to one image, the guest frozen)
  fork       backend.create_volume(from_checkpoint=...): an empty overlay on the layer, vs
             a full copy of the disk (the first slice's fork)
  bitmap     the alternative not taken, on a second cell: a dirty bitmap on the disk and,
             per snapshot, the guest frozen, QMP drive-backup sync=incremental of the blocks
             it marked into a new qcow2, waited for, thawed
Sizes are blocks allocated on the host (st_blocks, as du). Medians, ratios. Real QEMU (TCG
here), never a mock. Needs scripts/docker-setup and scripts/vm-setup. Run by hand:

    .venv/bin/python bench/vm_disk.py --data 100 --runs 5
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.base import CellRef  # noqa: E402
from devcell.backends.vm.backend import VmBackend  # noqa: E402
from devcell.backends.vm.drivers.qmp import Qmp  # noqa: E402
from devcell.backends.vm.layout import VmLayout  # noqa: E402
from devcell.backends.vm.proc import kill, scan  # noqa: E402

IMAGE = "devcell/busybox:latest"
SPEC = {"backend": "vm", "image": IMAGE, "workspace": {"mountPath": "/workspace"},
        "resources": {"memory": 256 << 20}}


def sh(backend: VmBackend, ref: CellRef, script: str) -> str:
    out, err = io.BytesIO(), io.BytesIO()
    code = backend.exec(ref, ["sh", "-c", script], stdout=out, stderr=err)
    if code != 0:
        raise SystemExit(f"{script!r} failed: {err.getvalue().decode()}")
    return out.getvalue().decode()


def start_filled_cell(backend: VmBackend, ref: CellRef, data_mib: int) -> int:
    """Create and start `ref` on its own workspace volume and write `data_mib` MiB of random
    data in the guest, in files of about 10 MiB; returns how many files."""
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    backend.create(ref, "bench")
    backend.start(ref)
    files = max(1, data_mib // 10)
    sh(backend, ref, f"for i in $(seq 1 {files}); do dd if=/dev/urandom of=/workspace/f$i "
                     f"bs=1M count={data_mib // files} 2>/dev/null; done; sync")
    return files


def blocks(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def measure(state: Path, data_mib: int, runs: int) -> dict[str, list[float]]:
    backend = VmBackend(state_dir=state, max_chain=runs + 8)
    ref = CellRef("cell_benchdisk1", "benchdisk", SPEC, "vol_benchdisk1")
    files = start_filled_cell(backend, ref, data_mib)
    backend.checkpoint(ref, "snap_bench0")
    change_kib = max(4, data_mib * 1024 // 100)  # 1% of the data
    out: dict[str, list[float]] = {k: [] for k in (
        "diff_bytes", "diff_s", "full_bytes", "full_s", "fork_bytes", "fork_s",
        "copy_fork_bytes", "copy_fork_s")}
    scratch = state / "bench-full"
    scratch.mkdir()
    for n in range(1, runs + 1):
        sh(backend, ref, f"dd if=/dev/urandom of=/workspace/f{1 + n % files} bs=1K "
                         f"count={change_kib} seek={n * 7} conv=notrunc 2>/dev/null; sync")
        began = time.perf_counter()
        info = backend.checkpoint(ref, f"snap_bench{n}")
        out["diff_s"].append(time.perf_counter() - began)
        out["diff_bytes"].append(info.size_bytes)

        full = scratch / f"full{n}.qcow2"
        began = time.perf_counter()
        backend.quiesce(ref)
        try:
            subprocess.run(["qemu-img", "convert", "-U", "-f", "qcow2", "-O", "qcow2",
                            str(backend.disks.volume_disk("vol_benchdisk1")), str(full)],
                           check=True)
        finally:
            backend.resume(ref)
        out["full_s"].append(time.perf_counter() - began)
        out["full_bytes"].append(blocks(full))

        began = time.perf_counter()
        backend.create_volume(ref, f"vol_benchfork{n}", from_checkpoint=f"snap_bench{n}")
        out["fork_s"].append(time.perf_counter() - began)
        out["fork_bytes"].append(blocks(backend.disks.volume_disk(f"vol_benchfork{n}")))
        began = time.perf_counter()
        copy = scratch / f"copy{n}.qcow2"
        subprocess.run(["cp", "--sparse=always", str(full), str(copy)], check=True)
        out["copy_fork_s"].append(time.perf_counter() - began)
        out["copy_fork_bytes"].append(blocks(copy))
        full.unlink()
        copy.unlink()
    return out


def measure_bitmaps(state: Path, data_mib: int, runs: int) -> dict[str, list[float]]:
    backend = VmBackend(state_dir=state)
    ref = CellRef("cell_benchdisk2", "benchbitmap", SPEC, "vol_benchdisk2")
    files = start_filled_cell(backend, ref, data_mib)
    config = backend._running_config(ref)
    with Qmp(config.directory, timeout=60.0) as qmp:
        # Qmp.command's own `name` parameter hides the command's: send it as QMP has it.
        qmp.channel.send({"execute": "block-dirty-bitmap-add",
                          "arguments": {"node": "d2", "name": "since"}})
        while "return" not in (reply := qmp.channel.read_json(time.monotonic() + 30)):
            if "error" in reply:
                raise SystemExit(f"block-dirty-bitmap-add: {reply['error']}")
    change_kib = max(4, data_mib * 1024 // 100)
    out: dict[str, list[float]] = {"bitmap_bytes": [], "bitmap_s": []}
    scratch = state / "bench-bitmap"
    scratch.mkdir()
    for n in range(1, runs + 1):
        sh(backend, ref, f"dd if=/dev/urandom of=/workspace/f{1 + n % files} bs=1K "
                         f"count={change_kib} seek={n * 7} conv=notrunc 2>/dev/null; sync")
        target = scratch / f"inc{n}.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(target), "1G"],
                       check=True)
        began = time.perf_counter()
        backend.quiesce(ref)
        try:
            with Qmp(config.directory, timeout=60.0) as qmp:
                qmp.command("drive-backup", None, **{
                    "job-id": f"inc{n}", "device": "d2", "target": str(target),
                    "format": "qcow2", "mode": "existing", "sync": "incremental",
                    "bitmap": "since"})
                while qmp.command("query-block-jobs"):
                    time.sleep(0.01)
        finally:
            backend.resume(ref)
        out["bitmap_s"].append(time.perf_counter() - began)
        out["bitmap_bytes"].append(blocks(target))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=int, default=100, help="MiB of data in the workspace")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vmdisk-") as tmp:
        state = Path(tmp) / "state"
        try:
            found = measure(state, args.data, args.runs)
            found |= measure_bitmaps(state, args.data, args.runs)
        finally:
            for name, pid in scan(VmLayout(state).name_prefix).items():
                kill(pid, name)
    med = {k: statistics.median(v) for k, v in found.items()}
    mib = 1 << 20
    print(f"workspace data {args.data} MiB, change 1% per snapshot, {args.runs} runs, medians")
    print("| what | block diff | full copy | diff / full |")
    print("| --- | --- | --- | --- |")
    print(f"| snapshot size | {med['diff_bytes'] / mib:.2f} MiB | "
          f"{med['full_bytes'] / mib:.2f} MiB | {med['diff_bytes'] / med['full_bytes']:.1%} |")
    print(f"| snapshot time | {med['diff_s']:.2f} s | {med['full_s']:.2f} s | "
          f"{med['diff_s'] / med['full_s']:.1%} |")
    print(f"| dirty bitmap + incremental backup: size | "
          f"{med['bitmap_bytes'] / mib:.2f} MiB | - | "
          f"{med['bitmap_bytes'] / med['full_bytes']:.1%} |")
    print(f"| dirty bitmap + incremental backup: time | {med['bitmap_s']:.2f} s | - | "
          f"{med['bitmap_s'] / med['full_s']:.1%} |")
    print(f"| fork size up front | {med['fork_bytes'] / mib:.2f} MiB | "
          f"{med['copy_fork_bytes'] / mib:.2f} MiB | "
          f"{med['fork_bytes'] / med['copy_fork_bytes']:.1%} |")
    print(f"| fork time | {med['fork_s']:.2f} s | {med['copy_fork_s']:.2f} s | "
          f"{med['fork_s'] / med['copy_fork_s']:.1%} |")


if __name__ == "__main__":
    main()
