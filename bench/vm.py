"""vm backend: cold boot vs resume from a memory snapshot, by guest RAM, and snapshot sizes.

For each guest RAM size, one vm cell (the base image, a workspace disk, one service) is
booted cold and put to sleep and woken, in turns, `--runs` times:
  cold boot  backend.start() until the guest agent runs a command (`true`) for us
  save       backend.save_machine(): QMP stop + migrate to a file, QEMU exits
  resume     backend.restore_machine() until the agent runs `true` again
Same run, same cell, medians; the ratio resume / cold boot and the memory file's size against
guest RAM. Real QEMU (TCG here: /dev/kvm does not work nested on this host), never a mock.
Needs scripts/docker-setup and scripts/vm-setup. Run by hand, never by pytest:

    .venv/bin/python bench/vm.py                    # 128 and 512 MiB, 5 runs each
    .venv/bin/python bench/vm.py --sizes 128,512,2048 --runs 5
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.base import CellRef  # noqa: E402
from devcell.backends.vm import VmBackend  # noqa: E402
from devcell.backends.vm_proc import kill, scan  # noqa: E402
from devcell.errors import BackendError  # noqa: E402

IMAGE = "devcell/busybox:latest"
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 1; done"


def until_usable(backend: VmBackend, ref: CellRef, began: float) -> float:
    """Seconds from `began` until the guest agent ran `true` for us."""
    while True:
        try:
            code = backend.exec(ref, ["true"], stdout=io.BytesIO(), stderr=io.BytesIO())
            if code == 0:
                return time.perf_counter() - began
        except BackendError:
            pass
        time.sleep(0.02)


def measure(state: Path, mib: int, runs: int) -> dict[str, list[float]]:
    backend = VmBackend(state_dir=state)
    spec = {"backend": "vm", "image": IMAGE, "workspace": {"mountPath": "/workspace"},
            "resources": {"memory": mib << 20},
            "services": [{"name": "counter", "command": ["sh", "-c", COUNTER]}]}
    ref = CellRef(f"cell_bench{mib:05d}", f"bench-{mib}", spec, f"vol_bench{mib:05d}")
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    backend.create(ref, "bench")
    out: dict[str, list[float]] = {"cold": [], "save": [], "resume": [], "bytes": []}
    try:
        for n in range(runs + 1):  # the first round warms the page cache: not counted
            began = time.perf_counter()
            backend.start(ref)
            cold = until_usable(backend, ref, began)
            began = time.perf_counter()
            info = backend.save_machine(ref, f"sleep-bench-{n}")
            save = time.perf_counter() - began
            began = time.perf_counter()
            backend.restore_machine(ref, f"sleep-bench-{n}")
            resume = until_usable(backend, ref, began)
            backend.stop(ref)
            if n:
                for key, value in (("cold", cold), ("save", save), ("resume", resume),
                                   ("bytes", float(info.size_bytes))):
                    out[key].append(value)
            print(f"  {mib} MiB run {n}{' (warm-up)' if not n else ''}: cold {cold:.2f} s, "
                  f"save {save:.2f} s, resume {resume:.2f} s, "
                  f"memory file {info.size_bytes / 2**20:.0f} MiB", flush=True)
    finally:
        backend.delete(ref)
        for name, pid in scan(backend.layout.name_prefix).items():
            kill(pid, name)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="128,512", help="guest RAM sizes in MiB (default 128,512)")
    p.add_argument("--runs", type=int, default=5, help="timed rounds per size (default 5)")
    args = p.parse_args()
    if not 1 <= args.runs <= 50:
        p.error("--runs must be 1 to 50")
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vm-") as work:
        for mib in sizes:
            results[mib] = measure(Path(work) / f"state-{mib}", mib, args.runs)
    print(f"\nmedians of {args.runs} runs (TCG unless KVM works here)")
    print("| guest RAM | cold boot | save | resume | resume / cold | memory file | file / RAM |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for mib, r in results.items():
        cold, save, resume = (statistics.median(r[k]) for k in ("cold", "save", "resume"))
        size = statistics.median(r["bytes"])
        print(f"| {mib} MiB | {cold:.2f} s | {save:.2f} s | {resume:.2f} s | "
              f"{resume / cold:.0%} | {size / 2**20:.0f} MiB | {size / (mib << 20):.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
