#!/usr/bin/env python3
"""The vm backend's accounting of machines' files (what `devcell df` asks it: runtimes and
checkpoints) over a state directory of many machines, against `du -sxB1` of the same files.

The state is made of plain files, as the backend leaves them (no QEMU): N cells, each with a
sparse 256 MiB `ram.bin` holding --mib MiB, a root overlay and a config disk; half of them
asleep (a sleep checkpoint with its device state), and a machine snapshot of each (its memory
part: a sparse RAM copy, device state, root and config disks; its disk half names no layer,
so no `qemu-img map` runs: that cost, one process per snapshot, is the disk's and the same in
both builds). Timed, interleaved, whole
processes, medians: the accounting of this build, the accounting of --before's build (main's,
which does not count these files: the cost of counting them), and `du -sxB1 STATE/vm` (the
floor: one walk, nothing attributed). Checked once, untimed: the runtimes' and checkpoints'
bytes add up to `du -scxB1` of the same files.
Run by hand: .venv/bin/python bench/vm_df.py [--runs 9] [--machines 40] [--mib 8]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import _common as c

MiB = 1 << 20
MEASURE = ("import sys; from pathlib import Path; "
           "from devcell.backends.vm.capacity import VmAccounting; "
           "a = VmAccounting(state_dir=Path(sys.argv[1])); "
           "r = a.runtimes_usage(); k = a.checkpoints_usage(); "
           "print(sum(getattr(u, 'files_bytes', None) or 0 for u in r.values()), k.total.disk)")


def _sparse(path: Path, size: int, written: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
        for offset in range(0, written, MiB):
            f.seek(offset * 3)  # spread, as a guest's touched pages are
            f.write(os.urandom(min(MiB, written - offset)))


def _marker(path: Path, meta: dict[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))


def make_state(vm: Path, machines: int, mib: int) -> None:
    (vm / "layers").mkdir(parents=True)
    for i in range(machines):
        cell = f"cell_bench{i:04d}"
        _marker(vm / "cells" / cell / "cell.json", {"cell_id": cell})
        _sparse(vm / "cells" / cell / "ram.bin", 256 * MiB, mib * MiB)
        _sparse(vm / "cells" / cell / "root.qcow2", 2 * MiB, 192 << 10)
        _sparse(vm / "cells" / cell / "config.img", 8 * MiB, 64 << 10)
        if i % 2:
            sleep = vm / "checkpoints" / f"sleep-{cell}"
            _marker(sleep / "checkpoint.json", {"kind": "machine", "cell_id": cell})
            _sparse(sleep / "memory.bin", 72 << 10, 72 << 10)
        part = vm / "machines" / f"snap_bench{i:04d}"
        _marker(part / "machine.json", {"cell_id": cell})
        _sparse(part / "ram.bin", 256 * MiB, mib * MiB)
        for name, size, data in (("state.bin", 300 << 10, 300 << 10),
                                 ("root.qcow2", 2 * MiB, 192 << 10),
                                 ("config.img", 8 * MiB, 64 << 10)):
            _sparse(part / name, size, data)
        _marker(vm / "checkpoints" / f"snap_bench{i:04d}" / "checkpoint.json",
                {"kind": "disk", "cell_id": cell, "for_machine": True})


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=9)
    p.add_argument("--machines", type=int, default=40)
    p.add_argument("--mib", type=int, default=8, help="MiB each RAM file holds (default 8)")
    p.add_argument("--before", default="/work/main/.venv/bin/python",
                   help="interpreter of the build to compare with (default: main's)")
    args = p.parse_args()
    c.check_args(args)
    with c.workdir(args.keep) as work:
        state = work / "state"
        make_state(state / "vm", args.machines, args.mib)
        env = dict(os.environ)
        argv = [args.python, "-c", MEASURE, str(state)]
        runtimes, checkpoints = map(int, subprocess.run(argv, capture_output=True, text=True,
                                                        check=True).stdout.split())
        vm = state / "vm"
        files = [*(vm / "cells").iterdir(), *(vm / "checkpoints").iterdir(),
                 *(vm / "machines").iterdir()]
        du = int(subprocess.run(["du", "-scxB1", *map(str, files)], capture_output=True,
                                text=True, check=True).stdout.splitlines()[-1].split()[0])
        print(f"{args.machines} machines, {args.mib} MiB in each RAM file and its copy: "
              f"runtimes {runtimes} B + checkpoints {checkpoints} B = {runtimes + checkpoints}"
              f" B; du -scxB1 {du} B: {'equal' if runtimes + checkpoints == du else 'DIFFER'}")
        subjects = [c.Subject("accounting (this build)", argv, c.fixed(env))]
        if Path(args.before).exists():
            subjects.append(c.Subject("accounting (--before)",
                                      [args.before, "-c", MEASURE, str(state)], c.fixed(env)))
        subjects.append(c.Subject("du -sxB1 STATE/vm", ["du", "-sxB1", str(vm)], c.fixed(env)))
        samples = c.time_interleaved(subjects, args.runs, args.warmup)
        c.print_timings("whole processes", samples, baseline="du -sxB1 STATE/vm")
        return 0 if runtimes + checkpoints == du else 1


if __name__ == "__main__":
    sys.exit(main())
