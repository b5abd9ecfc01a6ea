#!/usr/bin/env python3
"""What a `devcell snapshot create` and a `cell sleep` process cost besides their work: both
timed on a container cell whose workspace is (nearly) empty, so the steps are small and the
rest is the process (start-up, imports, SQLite, engine calls, observe-first).

Two builds take turns on one state directory and cell (after, main; then main, after), each
snapshot deleted and each slept cell started again between runs, untimed. Reported, medians:
the whole process (wall), its CPU time (user + system of the child: less sensitive than wall
to a shared machine's load), the quiesce + checkpoint + resume steps from the operations
table, and wall minus steps ("outside the steps"); `python -c pass` is the floor. Also the
modules each build imports for `snapshot create` (a deterministic count).
Run by hand: .venv/bin/python bench/snapshot_process.py --compare-devcell OTHER [--runs 11]
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
from checkpoint import drop_world, make_world

STEPS = ("quiesce", "checkpoint", "resume")
LISTING = """
import atexit, runpy, sys
atexit.register(lambda: sys.__stdout__.write("\\nMODULES %d" % len(sys.modules)))
script = sys.argv.pop(1)
sys.argv[0] = "devcell"
runpy.run_path(script, run_name="__main__")
"""
"""The build's own console script run with a count of the modules at exit: a script that puts
another tree first on sys.path (a build compared from its worktree) is counted as that tree,
not as the installed package its interpreter would import."""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) milliseconds of one child process that must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    c.run_ok(argv, env)
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000
    return wall, cpu


def python_of(devcell: str) -> str:
    return Path(devcell).read_text(errors="replace").splitlines()[0].removeprefix("#!").strip()


def modules(devcell: str, env: dict[str, str], cell: str) -> int:
    done = subprocess.run([python_of(devcell), "-c", LISTING, devcell, "snapshot", "create",
                           cell, "--name", "count"], env=env, capture_output=True, text=True,
                          check=True, cwd="/")  # not this checkout: -c puts the cwd on sys.path
    subprocess.run([devcell, "delete", "snapshot", "count"], env=env, capture_output=True,
                   check=True)
    return int(done.stdout.rpartition("MODULES ")[2])


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=11)
    args = p.parse_args()
    c.check_args(args)
    builds = c.builds(args)
    c.print_builds(args)
    with c.workdir(args.keep) as work:
        world = make_world(builds[0], work, "small", 1, 0)
        try:  # the cell and its snapshots go even when a step fails (a container left)
            time.sleep(0.05)
            world.dc("snapshot", "create", world.cell, "--name", "base")
            samples: dict[str, list[tuple[float, float, float]]] = {}
            for r in range(args.runs + args.warmup):
                floor = timed([sys.executable, "-c", "pass"], world.env)
                if r >= args.warmup:
                    samples.setdefault("python -c pass", []).append((*floor, 0.0))
                for b in builds if r % 2 == 0 else builds[::-1]:
                    wall, cpu = timed([b.devcell, "snapshot", "create", world.cell, "--name", "ab"],
                                      world.env)
                    steps = world.steps_ms("Snapshot", STEPS)
                    world.dc("delete", "snapshot", "ab")
                    slept = timed([b.devcell, "cell", "sleep", world.cell], world.env)
                    # A sleep releases the container (delete) or, since issue 30, stops it (stop).
                    sleep_steps = world.steps_ms("Cell", ("quiesce", "checkpoint", "delete", "stop"))
                    world.dc("cell", "start", world.cell)
                    if r >= args.warmup:
                        samples.setdefault(f"snapshot create{b.tag}", []).append((wall, cpu, steps))
                        samples.setdefault(f"cell sleep{b.tag}", []).append((*slept, sleep_steps))
            report(builds, samples, {b.name: modules(b.devcell, world.env, world.cell)
                                     for b in builds})
        finally:
            drop_world(world)
    return 0


def report(builds: list[c.Build], samples: dict[str, list[tuple[float, float, float]]],
           counts: dict[str, int]) -> None:
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; medians in ms")
    print(f"{'command':<28} {'n':>3} {'wall':>8} {'cpu':>8} {'steps':>8} {'outside':>8}")
    med: dict[str, tuple[float, float, float]] = {}
    for label, rows in samples.items():
        wall, cpu, steps = (statistics.median(x[i] for x in rows) for i in range(3))
        med[label] = (wall, cpu, steps)
        print(f"{label:<28} {len(rows):>3} {wall:8.1f} {cpu:8.1f} {steps:8.1f} "
              f"{statistics.median(x[0] - x[2] for x in rows):8.1f}")
    print("modules imported by snapshot create: "
          + ", ".join(f"{name or 'this build'} {n}" for name, n in counts.items()))
    if len(builds) == 2:
        a, b = builds[0], builds[1]
        for what in ("snapshot create", "cell sleep"):
            x: Any = med[what + a.tag]
            y: Any = med[what + b.tag]
            print(f"{what}: {a.name} / {b.name} wall {x[0] / y[0]:.3f}, cpu {x[1] / y[1]:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
