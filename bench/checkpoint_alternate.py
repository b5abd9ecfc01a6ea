#!/usr/bin/env python3
"""`devcell snapshot create` of one container cell by two builds taking turns, unchanged and
after 1% of the files changed: the smallest A/B of the snapshot path's fixed costs (process
start, imports, engine calls, walk), where bench/checkpoint.py's 1 GiB runs spread too widely
on a shared machine to tell two builds apart.

Both builds act on the same state directory and cell (filled once on the host), in turns
(after, main; then main, after), each snapshot deleted before the next; whole processes (wall,
and the child's CPU: user + system, which a loaded machine inflates far less), the quiesce +
checkpoint + resume steps from the operations table, medians and ratios; `python -c pass` in
the same rounds, for scale. Every timed run starts after a sync (untimed), so no run's syncfs
writes back what the run before it (or the 1% change) left dirty.
Run by hand: .venv/bin/python bench/checkpoint_alternate.py --compare-devcell OTHER
    [--runs 9] [--files 10000] [--mib 100]
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from typing import Any

import _common as c
from checkpoint import change_one_percent, make_world

STEPS = ("quiesce", "checkpoint", "resume")


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=9)
    c.add_workspace_options(p, mib=100)
    args = p.parse_args()
    c.check_args(args)
    builds = c.builds(args)
    if len(builds) != 2:
        raise SystemExit("--compare-devcell is required: this bench compares two builds")
    with c.workdir(args.keep) as work:
        world = make_world(builds[0], work, "big", args.files, args.mib)
        time.sleep(0.05)  # the fill is older than the first checkpoint's clock tick
        world.dc("snapshot", "create", world.cell, "--name", "base")
        wall: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        steps: dict[str, list[float]] = {}
        salt = iter(range(10**6))
        loads = [os.getloadavg()[0]]
        for change in (False, True):
            what = "1% changed" if change else "unchanged"
            for r in range(args.runs + args.warmup):
                for b in builds if r % 2 == 0 else builds[::-1]:
                    if change:
                        change_one_percent(world.workspace, args.files, next(salt))
                        time.sleep(0.02)  # older than the checkpoint's clock tick
                    os.sync()
                    ms, used = timed([b.devcell, "snapshot", "create", world.cell, "--name",
                                      "ab"], world.env)
                    if r >= args.warmup:
                        wall.setdefault(f"{what}{b.tag}", []).append(ms)
                        cpu.setdefault(f"{what}{b.tag}", []).append(used)
                        steps.setdefault(f"{what}{b.tag}", []).append(
                            world.steps_ms("Snapshot", STEPS))
                    world.dc("delete", "snapshot", "ab")
                if r >= args.warmup:
                    ms, used = timed([args.python or sys.executable, "-c", "pass"], world.env)
                    wall.setdefault("python -c pass", []).append(ms)
                    cpu.setdefault("python -c pass", []).append(used)
            loads.append(os.getloadavg()[0])
        report(builds, wall, cpu, steps, args, loads)
        world.dc("delete", "snapshot", "base")
        world.dc("delete", "cell", world.cell, "--approve")
    return 0


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one child process that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    c.run_ok(argv, env)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def report(builds: list[c.Build], wall: dict[str, list[float]], cpu: dict[str, list[float]],
           steps: dict[str, list[float]], args: Any, loads: list[float]) -> None:
    print(f"{args.files} files, {args.mib} MiB, {args.runs} runs each, builds taking turns; "
          f"load average {' -> '.join(f'{x:.1f}' for x in loads)}; medians in ms")
    for label in wall:
        step = f"   steps {statistics.median(steps[label]):8.1f}" if label in steps else ""
        print(f"  {label:<28} whole {statistics.median(wall[label]):8.1f}   cpu "
              f"{statistics.median(cpu[label]):8.1f}{step}")
    a, b = builds[0].tag, builds[1].tag
    for what in ("unchanged", "1% changed"):
        w = statistics.median(wall[what + a]) / statistics.median(wall[what + b])
        u = statistics.median(cpu[what + a]) / statistics.median(cpu[what + b])
        s = statistics.median(steps[what + a]) / statistics.median(steps[what + b])
        print(f"{what}: {builds[0].name} / {builds[1].name} whole {w:.3f}, cpu {u:.3f}, "
              f"steps {s:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
