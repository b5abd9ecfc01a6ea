#!/usr/bin/env python3
"""1,000 new Cells converge on the fake backend from one `devcell apply -f DIR`, a fresh state
dir per run, vs. a process that only parses the same files with yaml.CSafeLoader.

Every run is verified: all cells Running, one Succeeded operation per cell whose every
planned step is recorded as Succeeded. Target: median <= 2 s.
Run by hand: .venv/bin/python bench/converge_1000.py [--runs 5] [--profile]
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

import _common as c

TARGET_S = 2.0


def verify(state: Path, cells: int) -> list[str]:
    """Problems with a converged state dir (empty list when everything is as it must be)."""
    conn = c.connect_ro(state / "state.db")
    try:
        q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        problems = []
        live = q("SELECT count(*) FROM cells WHERE deleted_at IS NULL")
        running = q("SELECT count(*) FROM cells WHERE deleted_at IS NULL AND phase = 'Running' "
                    "AND observed_generation = generation")
        if live != cells or running != cells:
            problems.append(f"{running}/{live} cells Running and observed, expected {cells}")
        ops = conn.execute("SELECT id, status, plan FROM operations").fetchall()
        per_cell = q("SELECT count(DISTINCT object_id) FROM operations")
        if len(ops) != cells or per_cell != cells:
            problems.append(f"{len(ops)} operations over {per_cell} cells, expected {cells}")
        bad_ops = sum(1 for _, status, _ in ops if status != "Succeeded")
        if bad_ops:
            problems.append(f"{bad_ops} operations not Succeeded")
        planned = sum(len(json.loads(plan or "[]")) for _, _, plan in ops)
        steps = q("SELECT count(*) FROM operation_steps")
        ok_steps = q("SELECT count(*) FROM operation_steps WHERE status = 'Succeeded' "
                     "AND started_at IS NOT NULL AND finished_at IS NOT NULL")
        if not (planned == steps == ok_steps) or steps == 0:
            problems.append(f"{planned} planned steps, {steps} recorded, {ok_steps} Succeeded")
    finally:
        conn.close()
    calls = c.count(state / "backends" / "fake.db",
                    "SELECT count(*) FROM calls WHERE outcome = 'ok'")
    if calls != steps:
        problems.append(f"{calls} backend calls for {steps} steps")
    return problems


def summary(state: Path) -> str:
    db = state / "state.db"
    return (f"{c.count(db, 'SELECT count(*) FROM cells')} cells, "
            f"{c.count(db, 'SELECT count(*) FROM operations')} operations, "
            f"{c.count(db, 'SELECT count(*) FROM operation_steps')} steps, "
            f"{c.count(state / 'backends' / 'fake.db', 'SELECT count(*) FROM calls')} backend "
            f"calls, {c.count(db, 'SELECT count(*) FROM events')} events")


def main() -> int:
    args = c.parse_cells_args(__doc__.split("\n\n")[0], runs=5)

    with c.workdir(args.keep) as work:
        manifests = work / "manifests"
        c.write_cells(manifests, args.cells)
        builds = c.builds(args)
        problems: dict[str, list[str]] = {b.name: [] for b in builds}
        verified = dict.fromkeys(problems, 0)
        last_summary = dict.fromkeys(problems, "")
        counter = iter(range(10_000))

        def fresh(build: c.Build) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
            """A new state dir for every run of `build` (never shared: schemas may differ),
            verified after the run."""
            def prepare() -> tuple[dict[str, str], Callable[[], None]]:
                state = work / f"state-{next(counter)}"

                def check_and_remove() -> None:
                    found = verify(state, args.cells)
                    problems[build.name].extend(found)
                    verified[build.name] += not found
                    last_summary[build.name] = summary(state)
                    shutil.rmtree(state, ignore_errors=True)
                return c.env_for(state), check_and_remove
            return prepare

        def label(b: c.Build) -> str:
            return f"devcell{b.tag} apply -f DIR ({args.cells} new cells, converge)"

        label_py = "python -c: parse same files (CSafeLoader)"
        samples = c.time_interleaved([
            *(c.Subject(label(b), [b.devcell, "apply", "-f", str(manifests)], fresh(b))
              for b in builds),
            c.Subject(label_py, [args.python, "-c", c.PARSE_ONLY, str(manifests)],
                      c.fixed(c.env_for(work / "unused"))),
        ], args.runs, args.warmup, alternate=len(builds) > 1)
        targets = []
        for b in builds:
            med = statistics.median(samples[label(b)])
            targets.append(f"target{b.tag}: median <= {TARGET_S:.1f} s -> {med:.2f} s "
                           f"{c.verdict(med <= TARGET_S)} ({med / TARGET_S:.2f} of the budget, "
                           f"{med / args.cells * 1000:.2f} ms per cell)")
        c.print_timings(f"converge {args.cells} new cells, {args.runs} runs each (interleaved, "
                        f"{args.warmup} warm-up; fresh state dir per run)", samples,
                        baseline=label_py, target="\n".join(targets))
        c.print_build_ratios(samples, builds, label)
        runs_total = args.runs + args.warmup
        print()
        for b in builds:
            print(f"verification of every run{b.tag}: {verified[b.name]}/{runs_total} runs "
                  f"{c.verdict(verified[b.name] == runs_total)}  "
                  f"(one run: {last_summary[b.name]})")
            for problem in dict.fromkeys(problems[b.name]):
                print(f"  problem: {problem}")

        if args.profile:
            c.profile(args.profile, args.python, ["apply", "-f", str(manifests)],
                      lambda: c.env_for(work / f"state-profile-{next(counter)}"), work)
        return 0 if all(n == runs_total for n in verified.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
