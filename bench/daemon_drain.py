#!/usr/bin/env python3
"""Reconcile throughput and memory of the daemon: drain 1,000 queued Cells on the fake backend.

Method (how the 1,000 cells get queued, honestly). The 1,000 Cell files are written into the
watched directory while no daemon runs; then `devcell controller run` starts. At startup it
syncs the directory (records all 1,000 as desired state in one transaction) and queues every
object; its workers (--workers, default 4) then drain the queue. `devcell apply --no-wait`
while a daemon runs is not used: the daemon only notices such changes at its next resync.

Figures, per run (fresh state dir each run), all from state.db after the fact:
  start s    daemon process started -> first operation created (interpreter and imports, lease,
             recovery, reading and recording the 1,000 files, queueing);
  drain s    first operation created -> last operation finished (operations table timestamps,
             millisecond resolution);
  ops/s      operations finished per second over the drain (1,000 / drain s); each operation
             is one full reconcile with a plan: create-volume, create, start, each step recorded
             (every cell is also decided once more to confirm it settled: no operation, not
             counted);
  best 1 s   the most operations finished within any 1 s window;
  RSS MB     the daemon's VmRSS from /proc/<pid>/status once all 1,000 are Ready (VmHWM: peak).
Medians over --runs. Targets: >= 230 reconciles/s (controller-runtime's published figure),
RSS <= 100 MB with 1,000 cells.

Run by hand: .venv/bin/python bench/daemon_drain.py [--cells 1000] [--runs 3] [--workers 4]
             [--compare-devcell PATH]   (another build's daemon, taking turns with --devcell's)
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import _common as c

TARGET_RATE = 230.0
TARGET_RSS_MB = 100.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", type=int, default=1000, help="cells to drain (default 1000)")
    p.add_argument("--runs", type=int, default=3, help="runs, fresh state each (default 3)")
    p.add_argument("--workers", type=int, default=4, help="daemon --workers (default 4)")
    p.add_argument("--devcell", default=str(c.VENV_BIN / "devcell"),
                   help="the devcell console script (default: the project's .venv)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir and print its path")
    c.add_compare_options(p)
    args = p.parse_args()
    if not 1 <= args.runs <= 20 or not 10 <= args.cells <= 20000:
        sys.exit("--runs 1..20, --cells 10..20000")
    if not os.access(args.devcell, os.X_OK):
        sys.exit(f"{args.devcell} not found; run ./scripts/setup first (or pass --devcell)")
    c.check_compare(args)
    return args


def stamp(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()



def one_run(args: argparse.Namespace, build: c.Build, work: Path, n: int) -> dict[str, float]:
    """One daemon of `build` drains the cells on a state dir of its own (two builds never
    share one: their schemas may differ)."""
    suffix = f"{build.name}-{n}" if build.name else f"{n}"
    state, watched = work / f"state-{suffix}", work / f"watched-{suffix}"
    c.write_cells(watched, args.cells)
    log_path = work / f"daemon-{suffix}.log"
    log = open(log_path, "wb")
    started_wall = time.time()
    daemon = subprocess.Popen(
        [build.devcell, "controller", "run", "--manifests", str(watched), "--workers",
         str(args.workers)], stdout=log, stderr=subprocess.STDOUT, env=c.env_for(state), cwd=work)
    try:
        deadline = time.monotonic() + 300
        done = 0
        while True:
            if daemon.poll() is not None:
                sys.exit(f"the daemon exited ({daemon.returncode}); see {log_path} (--keep)")
            if time.monotonic() > deadline:
                sys.exit(f"not drained within 300 s ({done} of {args.cells}); see {log_path}")
            if (state / "state.db").exists():
                try:
                    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
                    done = conn.execute(
                        "SELECT count(*) FROM cells WHERE phase = 'Running' AND "
                        "observed_generation = generation AND deleted_at IS NULL").fetchone()[0]
                    conn.close()
                except sqlite3.OperationalError:
                    done = 0
                if done == args.cells:
                    break
            time.sleep(0.05)
        mem = c.process_memory_mb(daemon.pid)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            code = daemon.wait()
        log.close()
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        ops = conn.execute("SELECT created_at, finished_at, status FROM operations").fetchall()
        steps = conn.execute("SELECT count(*), sum(status = 'Succeeded') FROM operation_steps"
                             ).fetchone()
    finally:
        conn.close()
    calls = c.count(state / "backends" / "fake.db", "SELECT count(*) FROM calls WHERE outcome = 'ok'")
    text = log_path.read_text(errors="replace")
    problems = []
    if len(ops) != args.cells or any(s != "Succeeded" for _, _, s in ops):
        problems.append(f"{len(ops)} operations, expected {args.cells} Succeeded")
    if not (steps[0] == steps[1] == calls == 3 * args.cells):
        problems.append(f"{steps[0]} steps ({steps[1]} Succeeded), {calls} backend calls, "
                        f"expected {3 * args.cells} each")
    if code != 0 or c.daemon_log_errors(text):
        problems.append(f"daemon exit {code}; errors in its log ({log_path}, --keep)")
    if problems:
        sys.exit(f"CHECK FAILED{build.tag}: " + "; ".join(problems))
    first = min(stamp(o[0]) for o in ops)
    last = max(stamp(o[1]) for o in ops)
    finished = sorted(stamp(o[1]) for o in ops)
    busiest, lo = 0, 0
    for hi, t in enumerate(finished):  # the most operations finished within any 1 s window
        while t - finished[lo] >= 1.0:
            lo += 1
        busiest = max(busiest, hi - lo + 1)
    drain = last - first
    if not args.keep:
        shutil.rmtree(state)
        shutil.rmtree(watched)
    return {"sync": first - started_wall, "drain": drain, "rate": args.cells / drain,
            "best": busiest, "rss": mem["VmRSS"], "hwm": mem["VmHWM"]}


def print_rows(build: c.Build, rows: list[dict[str, float]], cells: int) -> dict[str, float]:
    """The per-run table of one build and its targets; returns its medians."""
    w = 7 + len(build.tag)
    print(f"\n{'run' + build.tag:<{w}}{'start s':>8}{'drain s':>9}{'ops/s':>8}{'best 1 s':>10}"
          f"{'RSS MB':>9}{'HWM MB':>9}")
    for i, r in enumerate(rows, 1):
        print(f"{i:<{w}}{r['sync']:8.2f}{r['drain']:9.2f}{r['rate']:8.0f}{r['best']:10d}"
              f"{r['rss']:9.1f}{r['hwm']:9.1f}")
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"{'median':<{w}}{med['sync']:8.2f}{med['drain']:9.2f}{med['rate']:8.0f}"
          f"{med['best']:10.0f}{med['rss']:9.1f}{med['hwm']:9.1f}")
    print(f"reconciles/s (median){build.tag}: {med['rate']:.0f}, target >= {TARGET_RATE:.0f} "
          f"{c.verdict(med['rate'] >= TARGET_RATE)}; RSS with {cells} cells (median): "
          f"{med['rss']:.1f} MB, target <= {TARGET_RSS_MB:.0f} MB "
          f"{c.verdict(med['rss'] <= TARGET_RSS_MB)}")
    return med


def print_comparison(builds: list[c.Build], medians: dict[str, dict[str, float]]) -> None:
    """Each median of the first build over that of the second. For ops/s and best 1 s more is
    better, so a ratio below 1 there is the slower side; the note says which way is worse."""
    first, second = builds[0].name, builds[1].name
    print(f"\n{'median':<10}{first:>10}{second:>10}{'ratio':>8}  ({first}/{second})")
    for key, title, worse in (("sync", "start s", "higher"), ("drain", "drain s", "higher"),
                              ("rate", "ops/s", "lower"), ("best", "best 1 s", "lower"),
                              ("rss", "RSS MB", "higher"), ("hwm", "HWM MB", "higher")):
        a, b = medians[first][key], medians[second][key]
        ratio = a / b if b else float("nan")
        print(f"{title:<10}{a:10.2f}{b:10.2f}{ratio:8.2f}  ({worse} is worse)")


def main() -> int:
    args = parse_args()
    builds = c.builds(args)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"daemon drain: {args.cells} cells, {args.runs} runs, workers={args.workers}; "
          f"{os.cpu_count()} CPUs, load average {load}")
    c.print_builds(args)
    rows: dict[str, list[dict[str, float]]] = {b.name: [] for b in builds}
    with c.workdir(args.keep) as work:
        for b in builds:  # the first run's start must not include compiling the modules
            c.warm_bytecode(b.devcell, work)
        for n in range(args.runs):
            # two builds take turns, and swap which goes first every run
            for b in builds if n % 2 == 0 else builds[::-1]:
                rows[b.name].append(one_run(args, b, work, n))
    medians = {b.name: print_rows(b, rows[b.name], args.cells) for b in builds}
    if len(builds) > 1:
        print_comparison(builds, medians)
    print(f"checks per run: {args.cells} operations Succeeded, {3 * args.cells} steps Succeeded "
          "and as many backend calls, all cells Running at their generation, clean daemon log"
          f"{' (every build)' if len(builds) > 1 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
