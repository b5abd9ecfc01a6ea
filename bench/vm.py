"""vm backend: cold boot vs resume from a memory snapshot, by guest RAM, snapshot sizes, and
the host memory of forks of one machine snapshot.

For each guest RAM size, one vm cell (the base image, a workspace disk, one service) is
booted cold and put to sleep and woken, in turns, `--runs` times:
  cold boot  backend.start() until the guest agent runs a command (`true`) for us
  save       backend.save_machine(): QMP stop, device state to a file (x-ignore-shared), the
             RAM file flushed, QEMU exits
  resume     backend.restore_machine() (a new QEMU maps the RAM file, loads the device state)
             until the agent runs `true` again; "of which QEMU": until QEMU says the guest
             runs (restore_machine's `seconds`)
  snapshot   backend.snapshot_machine() of the running cell: its size (device state + RAM
             file + root/config disks + workspace disk checkpoint), RAM part and device state
Same run, same cell, medians; the ratio resume / cold boot and the sizes against guest RAM.
Then `--forks` cells are forked from one machine snapshot of a 256 MiB cell and resumed (each
given its own identity); once all run and have idled `--idle` seconds, each QEMU's PSS and
RSS are read from /proc/PID/smaps_rollup: their total PSS against one guest (the parent,
read alone after idling as long, before the snapshot: its RAM file mapped, its TCG buffer,
QEMU itself with its copy of the kernel, which a resumed machine has not), and by part from
/proc/PID/smaps (guest RAM, TCG's translation buffer: the anonymous rwx mapping, the rest of
QEMU); and against one guest made of the parent's RAM and one fork's QEMU (the same kind of
process as a fork).
Real QEMU (TCG here: /dev/kvm does not work nested on this host), never a mock.
Needs scripts/docker-setup and scripts/vm-setup. Run by hand, never by pytest:

    .venv/bin/python bench/vm.py                    # 128 and 512 MiB, 5 runs each, 10 forks
    .venv/bin/python bench/vm.py --sizes 128,512,2048 --runs 5 --forks 10
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
from devcell.backends.vm.backend import VmBackend  # noqa: E402
from devcell.backends.vm.proc import find, kill, scan  # noqa: E402
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
    out: dict[str, list[float]] = {"cold": [], "save": [], "resume": [], "bytes": [],
                                   "state": [], "snapshot": [], "snapshot_ram": [],
                                   "qemu": []}
    try:
        for n in range(runs + 1):  # the first round warms the page cache: not counted
            began = time.perf_counter()
            backend.start(ref)
            cold = until_usable(backend, ref, began)
            snap = backend.snapshot_machine(ref, f"snap-bench-{n}")
            part = backend.machines.path(f"snap-bench-{n}")
            snap_ram = (part / "ram.bin").stat().st_blocks * 512
            backend.delete_checkpoint(f"snap-bench-{n}")
            began = time.perf_counter()
            info = backend.save_machine(ref, f"sleep-bench-{n}")
            save = time.perf_counter() - began
            state = (backend.layout.checkpoint(f"sleep-bench-{n}") / "memory.bin").stat().st_size
            began = time.perf_counter()
            restored = backend.restore_machine(ref, f"sleep-bench-{n}")
            resume = until_usable(backend, ref, began)
            qemu = float(restored.get("seconds") or 0.0)
            backend.stop(ref)
            if n:
                for key, value in (("cold", cold), ("save", save), ("resume", resume),
                                   ("bytes", float(info.size_bytes)), ("state", float(state)),
                                   ("snapshot", float(snap.size_bytes)),
                                   ("snapshot_ram", float(snap_ram)), ("qemu", qemu)):
                    out[key].append(value)
            print(f"  {mib} MiB run {n}{' (warm-up)' if not n else ''}: cold {cold:.2f} s, "
                  f"save {save:.2f} s, resume {resume:.2f} s (QEMU running after {qemu:.2f} s), "
                  f"saved {info.size_bytes / 2**20:.0f} MiB (device state {state >> 10} KiB), "
                  f"machine snapshot {snap.size_bytes / 2**20:.0f} MiB", flush=True)
    finally:
        backend.delete(ref)
        for name, pid in scan(backend.layout.name_prefix).items():
            kill(pid, name)
    return out


def _memory(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes of one process, from /proc/PID/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Rss"):
            values[key] = int(rest.split()[0]) << 10
    return values["Pss"], values["Rss"]


def _parts(pid: int) -> dict[str, int]:
    """PSS in bytes of one QEMU by what it is, from /proc/PID/smaps: `ram` (the mapping of
    a ram.bin: guest memory, shared pages divided among the forks mapping them, copied
    pages whole), `tcg` (TCG's translation cache: the big anonymous rwx mapping, which KVM
    does not have) and `rest` (QEMU itself)."""
    out = {"ram": 0, "tcg": 0, "rest": 0}
    kind = "rest"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            start, end = (int(x, 16) for x in fields[0].split("-"))
            path = fields[5] if len(fields) > 5 else ""
            kind = ("ram" if path.endswith("/ram.bin") else
                    "tcg" if not path and fields[1] == "rwxp"
                    else "rest")
        elif fields and fields[0] == "Pss:":
            out[kind] += int(fields[1]) << 10
    return out


def forks(state: Path, count: int, idle: float) -> dict[str, float]:
    """`count` forks of one machine snapshot of a 256 MiB cell, resumed and idle: memory."""
    backend = VmBackend(state_dir=state)
    spec = {"backend": "vm", "image": IMAGE, "workspace": {"mountPath": "/workspace"},
            "resources": {"memory": 256 << 20},
            "services": [{"name": "counter", "command": ["sh", "-c", COUNTER]}]}
    parent = CellRef("cell_benchparent", "parent", spec, "vol_benchparent")
    backend.create_volume(parent, "vol_benchparent", from_checkpoint=None)
    backend.create(parent, "bench")
    refs = []
    try:
        began = time.perf_counter()
        backend.start(parent)
        until_usable(backend, parent, began)
        # The guest reads its files once (page cache), as a used machine has.
        backend.exec(parent, ["sh", "-c", "cat /bin/* >/dev/null 2>&1; true"],
                     stdout=io.BytesIO(), stderr=io.BytesIO())
        # One guest, alone (no fork shares its libraries' pages yet), idle as long as the
        # forks will be: the same QEMU options as a fork, booted rather than resumed.
        time.sleep(idle)
        parent_pid = find(backend.layout.cell(parent.id), backend.layout.machine_name(parent.id))
        assert parent_pid is not None
        one_pss, one_rss = _memory(parent_pid)
        one = _parts(parent_pid)
        backend.snapshot_machine(parent, "snap-bench-forks")
        resumes = []
        for n in range(count):
            ref = CellRef(f"cell_benchfork{n:02d}", f"fork-{n}", spec, f"vol_benchfork{n:02d}")
            backend.create_volume(ref, ref.volume_id or "", from_checkpoint="snap-bench-forks")
            backend.create(ref, "bench")
            began = time.perf_counter()
            backend.start(ref)
            resumes.append(until_usable(backend, ref, began))
            refs.append(ref)
        time.sleep(idle)
        pids = [find(backend.layout.cell(r.id), backend.layout.machine_name(r.id)) for r in refs]
        live = [pid for pid in pids if pid is not None]
        pss, rss = zip(*(_memory(pid) for pid in live), strict=True)
        parts = [_parts(pid) for pid in live]
        beside_pss, _ = _memory(parent_pid)  # the same guest, its libraries now shared
        return {"forks": float(len(pss)), "pss_total": float(sum(pss)),
                "rss_total": float(sum(rss)), "one_rss": float(one_rss),
                "one_pss": float(one_pss), "fork_rss_median": statistics.median(rss),
                "resume_median": statistics.median(resumes), "one_beside_pss": float(beside_pss),
                **{f"forks_{k}": float(sum(p[k] for p in parts)) for k in one},
                "fork_qemu_median": statistics.median(p["tcg"] + p["rest"] for p in parts),
                **{f"one_{k}": float(v) for k, v in one.items()}}
    finally:
        for ref in [*refs, parent]:
            backend.delete(ref)
        for name, pid in scan(backend.layout.name_prefix).items():
            kill(pid, name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="128,512", help="guest RAM sizes in MiB (default 128,512)")
    p.add_argument("--runs", type=int, default=5, help="timed rounds per size (default 5)")
    p.add_argument("--forks", type=int, default=10, help="forks of one snapshot (default 10; 0: "
                   "skip)")
    p.add_argument("--idle", type=float, default=20.0, help="seconds the forks idle before "
                   "their memory is read (default 20)")
    args = p.parse_args()
    if not 1 <= args.runs <= 50:
        p.error("--runs must be 1 to 50")
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vm-") as work:
        for mib in sizes:
            results[mib] = measure(Path(work) / f"state-{mib}", mib, args.runs)
        forked = forks(Path(work) / "state-forks", args.forks, args.idle) if args.forks else {}
    print(f"\nmedians of {args.runs} runs (TCG unless KVM works here)")
    print("| guest RAM | cold boot | save (sleep) | resume (wake) | of which QEMU | resume / cold "
          "| device state | saved memory (RAM file) | / RAM | machine snapshot | its RAM part |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for mib, r in results.items():
        cold, save, resume = (statistics.median(r[k]) for k in ("cold", "save", "resume"))
        size, state, snap, snap_ram = (statistics.median(r[k]) for k in (
            "bytes", "state", "snapshot", "snapshot_ram"))
        qemu = statistics.median(r["qemu"])
        print(f"| {mib} MiB | {cold:.2f} s | {save:.2f} s | {resume:.2f} s | {qemu:.2f} s | "
              f"{resume / cold:.0%} | {state / 2**10:.0f} KiB | {size / 2**20:.0f} MiB | "
              f"{size / (mib << 20):.0%} | {snap / 2**20:.0f} MiB | {snap_ram / 2**20:.0f} MiB |")
    if forked:
        n = int(forked["forks"])
        print(f"\n{n} forks of one machine snapshot (256 MiB guests), idle {args.idle:.0f} s: "
              f"total PSS {forked['pss_total'] / 2**20:.0f} MiB, total RSS "
              f"{forked['rss_total'] / 2**20:.0f} MiB, one fork's RSS "
              f"{forked['fork_rss_median'] / 2**20:.0f} MiB (median); one guest (the parent) "
              f"PSS {forked['one_pss'] / 2**20:.0f} MiB (RSS {forked['one_rss'] / 2**20:.0f}); "
              f"{n}x one guest {n * forked['one_pss'] / 2**20:.0f} MiB; total PSS / one guest = "
              f"{forked['pss_total'] / forked['one_pss']:.2f}x (target <= 2x); the same guest "
              f"read beside the forks: PSS {forked['one_beside_pss'] / 2**20:.0f} MiB "
              f"({forked['pss_total'] / forked['one_beside_pss']:.2f}x); fork resume "
              f"{forked['resume_median']:.2f} s (median)")
        mib = {k: v / 2**20 for k, v in forked.items()}
        same = forked["one_ram"] + forked["fork_qemu_median"]
        print(f"  by part (PSS): guest RAM {mib['forks_ram']:.0f} MiB for the {n} forks vs "
              f"{mib['one_ram']:.0f} MiB of one guest ({forked['forks_ram'] / forked['one_ram']:.2f}x); "
              f"TCG translation buffers {mib['forks_tcg']:.0f} MiB (one guest: "
              f"{mib['one_tcg']:.0f}); QEMU itself {mib['forks_rest']:.0f} MiB (one guest: "
              f"{mib['one_rest']:.0f}); without TCG's buffers (as under KVM): "
              f"{(forked['pss_total'] - forked['forks_tcg']) / 2**20:.0f} MiB = "
              f"{(forked['pss_total'] - forked['forks_tcg']) / (forked['one_pss'] - forked['one_tcg']):.2f}x "
              f"one guest's {(forked['one_pss'] - forked['one_tcg']) / 2**20:.0f} MiB")
        print(f"  one guest as a fork's kind of process (its RAM {mib['one_ram']:.0f} MiB + one "
              f"fork's QEMU, TCG buffer and the rest, {mib['fork_qemu_median']:.0f} MiB: no "
              f"kernel copy, the resumed machine's TCG buffer): {same / 2**20:.0f} MiB; total PSS "
              f"/ that = {forked['pss_total'] / same:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
