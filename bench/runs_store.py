"""Saves and loads per second for each run snapshot store at its durable settings.

    python3 bench/runs_store.py [--runs 7] [--ops 200] [--dir DIR]

Each run opens a fresh store in a new directory, saves one snapshot for each of RUN_IDS
(untimed: the runs exist, as they do when an operation is suspended again), then times `--ops`
saves that overwrite them in turn, then `--ops` loads (every load makes all its corruption
checks). The figure reported is the median over `--runs` runs. The durable stores are the file
store (fsync of the file and of its directory) and the SQLite store (WAL, synchronous=FULL);
SQLite with synchronous=NORMAL is shown for comparison only, and the in-memory store as the
ceiling (no copy, no check). Saves are bound by fsync, so put `--dir` on the disk you care
about: on tmpfs fsync is free and the figures mean little. Run by hand, never by pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from loguru import logger  # noqa: E402

from devcell.runs import (  # noqa: E402
    CompletedStep,
    RunSnapshot,
    SnapshotStore,
    create_file_snapshot_store,
    create_in_memory_snapshot_store,
    create_sqlite_snapshot_store,
    envelope,
    utc_timestamp,
)
from devcell.runs.sqlite_store import SqliteSnapshotStore  # noqa: E402

MIN_RUNS = 5
RUN_IDS = [f"op_bench{i:04d}" for i in range(10)]


def snapshot(run_id: str, n: int) -> RunSnapshot:
    """A realistic suspension: a 6-step checkpoint plan, 2 steps done, waiting for approval."""
    steps = ["quiesce", "copy-workspace", "record-snapshot", "delete-runtime", "delete-volume",
             "resume"]
    return RunSnapshot(
        run_id=run_id,
        plan_id=f"plan_{n:06d}",
        plan=[{"stepId": s, "action": s, "cell": "api", "backend": "container",
               "timeoutSeconds": 300} for s in steps],
        completed_steps=(
            CompletedStep(step_id="quiesce", outputs={"frozen": True, "services": 3,
                                                      "durationMs": 41.5}),
            CompletedStep(step_id="copy-workspace", outputs={"bytes": 734003200 + n,
                                                             "files": 18233, "digest": "ab" * 32}),
        ),
        suspended_step_id="record-snapshot",
        resume_schema={"type": "object", "required": ["approve"],
                       "properties": {"approve": {"const": True}, "reason": {"type": "string"}}},
        suspended_at=utc_timestamp(),
    )


ADAPTERS: list[tuple[str, str, Callable[[Path], SnapshotStore]]] = [
    ("file", "fsync file + dir", lambda d: create_file_snapshot_store(root=d)),
    ("sqlite", "WAL, synchronous=FULL", lambda d: create_sqlite_snapshot_store(path=d / "runs.db")),
    ("memory", "none (ceiling)", lambda d: create_in_memory_snapshot_store()),
    ("sqlite (for comparison)", "WAL, synchronous=NORMAL",
     lambda d: SqliteSnapshotStore(d / "runs.db", synchronous="NORMAL")),
]


def one_run(open_store: Callable[[Path], SnapshotStore], base: Path, ops: int
            ) -> tuple[float, float]:
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    store = open_store(workdir)
    try:
        for i, run_id in enumerate(RUN_IDS):
            store.save(snapshot(run_id, i))
        values = [snapshot(RUN_IDS[i % len(RUN_IDS)], i) for i in range(ops)]
        started = time.perf_counter()
        for value in values:
            store.save(value)
        saved = time.perf_counter()
        for i in range(ops):
            if store.load(RUN_IDS[i % len(RUN_IDS)]) is None:
                raise SystemExit("a saved snapshot did not load")
        loaded = time.perf_counter()
    finally:
        store.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return ops / (saved - started), ops / (loaded - saved)


def filesystem_of(path: Path) -> str:
    """The mount point and file system type holding `path` (Linux), for the report."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) >= 3 and str(path).startswith(fields[1]) and \
                        len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return f"{kind} (mounted at {best or '?'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help=f"runs per store (>= {MIN_RUNS})")
    parser.add_argument("--ops", type=int, default=200, help="timed saves and loads per run")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to create the stores (default: the system temp directory)")
    args = parser.parse_args()
    if not MIN_RUNS <= args.runs <= 100 or not 10 <= args.ops <= 100_000:
        sys.exit(f"--runs must be {MIN_RUNS}..100 and --ops 10..100000")
    logger.remove()  # no sink at all: the library is silent anyway (devcell.log), keep it so
    base = Path(tempfile.mkdtemp(prefix="devcell-bench-runs-", dir=args.dir))
    size = len(envelope.encode(snapshot(RUN_IDS[0], 0), where="bench"))
    print(f"snapshot: {size} bytes encoded; {args.ops} saves then {args.ops} loads per run, "
          f"median of {args.runs} runs")
    print(f"directory: {base} on {filesystem_of(base.resolve())}; cpus: {os.cpu_count()}; "
          f"python {sys.version.split()[0]}")
    print()
    header = f"{'store':<24} {'durability':<24} {'saves/s':>9} {'loads/s':>9} " \
             f"{'ms/save':>8} {'ms/load':>8}"
    print(header)
    print("-" * len(header))
    try:
        for name, durability, open_store in ADAPTERS:
            results = [one_run(open_store, base, args.ops) for _ in range(args.runs)]
            saves = statistics.median(r[0] for r in results)
            loads = statistics.median(r[1] for r in results)
            print(f"{name:<24} {durability:<24} {saves:>9.0f} {loads:>9.0f} "
                  f"{1000 / saves:>8.3f} {1000 / loads:>8.3f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
