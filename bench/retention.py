#!/usr/bin/env python3
"""What retention adds where it runs on every command: the due-work check of an inline
converge, over a state of 10,000 recorded snapshots (1,000 with a ttl not yet due).

1. In one process: `retention.due_keys` (the check every inline converge makes, and the no-op
   apply now makes too) vs `objects.unconverged_keys` (the scan the daemon's desired-state
   watcher already makes on every change), round-robin, medians and their ratio.
2. Whole processes: `devcell apply -f cell.yaml`, a no-op re-apply of one converged cell over
   that state, by this build vs `--compare-devcell` (e.g. main's, without retention), same
   run, alternating.

Run by hand: .venv/bin/python bench/retention.py [--snapshots 10000] [--runs 15]
    [--compare-devcell /work/main/.venv/bin/devcell]
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import _common as c


def record(state: Path, snapshots: int, with_ttl: int) -> None:
    """Record one cell and `snapshots` snapshots of it (not converged: records are what the
    check reads), in this process through the library."""
    from devcell import API_VERSION, admission
    from devcell.manifests.model import Manifest
    from devcell.store.db import open_database

    db = open_database(state)
    try:
        docs = [Manifest(kind="Snapshot", name=f"s{i:05d}", line=1, file="bench",
                         source="bench", labels={}, annotations={},
                         spec={"cell": "api", **({"ttl": "30d"} if i < with_ttl else {})})
                for i in range(snapshots)]
        for start in range(0, len(docs), 1000):
            admission.apply_objects(db, docs[start:start + 1000])
    finally:
        db.close()
    del API_VERSION


def in_process(state: Path, runs: int) -> dict[str, list[float]]:
    from devcell.controllers import retention
    from devcell.store import objects
    from devcell.store.db import open_database

    db = open_database(state)
    samples: dict[str, list[float]] = {"retention.due_keys": [], "objects.unconverged_keys": []}
    try:
        now = datetime.now(UTC)
        for round_no in range(runs + 1):
            for label, call in (("retention.due_keys", lambda: retention.due_keys(db.conn, now)),
                                ("objects.unconverged_keys",
                                 lambda: objects.unconverged_keys(db.conn))):
                t0 = time.perf_counter()
                call()
                if round_no:
                    samples[label].append(time.perf_counter() - t0)
        assert retention.due_keys(db.conn, now) == [], "nothing is due in this state"
    finally:
        db.close()
    return samples


def main() -> int:
    p = c.base_parser(__doc__ or "", runs=15)
    p.add_argument("--snapshots", type=int, default=10_000)
    args = p.parse_args()
    c.check_args(args)
    c.check_compare(args)
    with c.workdir(args.keep) as work:
        state = work / "state"
        env = c.env_for(state)
        cell = work / "cell.yaml"
        cell.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
                        "spec: {backend: fake}\n")
        first = c.run_ok([args.devcell, "apply", "-f", str(cell)], env)
        print(f"cell applied in {first.seconds * 1000:.0f} ms")
        t0 = time.perf_counter()
        record(state, args.snapshots, args.snapshots // 10)
        print(f"{args.snapshots} snapshots recorded in {time.perf_counter() - t0:.1f} s "
              f"({args.snapshots // 10} with a ttl of 30d)")

        samples = in_process(state, args.runs)
        c.print_timings(f"in process, {args.snapshots} snapshots", samples,
                        baseline="objects.unconverged_keys")

        subjects = [c.Subject(f"devcell apply (no-op){b.tag}", [b.devcell, "apply", "-f",
                                                                 str(cell)], c.fixed(env))
                    for b in c.builds(args)]
        c.warm_bytecode(args.devcell, work)
        timed = c.time_interleaved(subjects, args.runs, args.warmup, alternate=True)
        c.print_timings(f"whole process, no-op re-apply of one cell over {args.snapshots} "
                        "snapshots", timed, baseline=subjects[-1].label)
        extra = statistics.median(samples["retention.due_keys"]) * 1000
        print(f"\nretention's check: {extra:.1f} ms median per inline converge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
