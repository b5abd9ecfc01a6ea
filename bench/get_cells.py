#!/usr/bin/env python3
"""`devcell get cells` over 10,000 recorded cells vs. `python -c pass` (same interpreter).

The 10,000 cells are applied in one `devcell apply -f DIR` first, which is timed too (bulk
apply, whole process). Target: `get cells` median <= 100 ms. Also timed: `get cells -l
team=team-3` (an equality selector, which every build understands), `-l 'team in
(team-1,team-2),!gpu'` (set-based; a build before issue 13 misread it, so it is only timed for
the build under test) and a TAB press of shell completion over the same state (`devcell
__complete`, build under test only). With --compare-devcell the other build is timed in the
same round-robin.
Run by hand: .venv/bin/python bench/get_cells.py [--runs 15] [--profile]
    [--compare-devcell /work/main/.venv/bin/devcell --compare-label main]
"""

from __future__ import annotations

import shutil
import statistics
import sys

import _common as c

TARGET_S = 0.100


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=15)
    p.add_argument("--cells", type=int, default=10000, help="cells to record (default 10000)")
    p.add_argument("--no-completion", dest="completion", action="store_false",
                   help="do not time `devcell __complete` (a build without shell completion)")
    p.add_argument("--bulk-runs", type=int, default=1,
                   help="times to run the bulk apply, each into a fresh state dir (default 1)")
    args = p.parse_args()
    c.check_args(args)
    if not 1 <= args.cells <= 50000:
        sys.exit("--cells must be between 1 and 50000")
    if not 1 <= args.bulk_runs <= 10:
        sys.exit("--bulk-runs must be between 1 and 10")

    with c.workdir(args.keep) as work:
        manifests, state = work / "manifests", work / "state"
        c.write_cells(manifests, args.cells)
        c.warm_bytecode(args.devcell, work)
        env = c.env_for(state)
        apply = [args.devcell, "apply", "-f", str(manifests)]

        # -- bulk apply: the last run's state is the one `get` reads ------------------------
        bulk: list[float] = []
        for i in range(args.bulk_runs):
            if i:
                shutil.rmtree(state)
            bulk.append(c.run_ok(apply, env, timeout=1800).seconds)
        db = state / "state.db"
        running = c.count(db, "SELECT count(*) FROM cells "
                          "WHERE deleted_at IS NULL AND phase = 'Running'")
        ops = c.count(db, "SELECT count(*) FROM operations WHERE status = 'Succeeded'")
        print(f"bulk apply of {args.cells} cells (one process, fresh state, converges on the "
              f"fake backend): " + ", ".join(f"{s:.2f} s" for s in bulk)
              + f"  [{running} Running, {ops} operations Succeeded]")
        if running != args.cells:
            sys.exit(f"expected {args.cells} Running cells, got {running}")

        get = [args.devcell, "get", "cells"]
        r = c.run_ok(get, env, capture=True)
        rows = len(r.stdout.splitlines()) - 1
        if rows != args.cells:
            sys.exit(f"`get cells` printed {rows} rows, expected {args.cells}")

        empty_env = c.env_for(work / "empty-state")
        builds = c.builds(args)
        # Each build reads a state its own bulk apply made: a newer build migrates an older
        # state's schema on first use, which an older build then refuses to read.
        envs = {builds[0].devcell: env}
        for other in builds[1:]:
            own = c.env_for(work / f"state-{other.name}")
            c.run_ok([other.devcell, "apply", "-f", str(manifests)], own, timeout=1800)
            envs[other.devcell] = own
        label_pass = "python -c pass (floor)"
        label_tab = f"devcell __complete bash -- get cells cell-0000 (TAB){builds[0].tag}"
        subjects = []
        for build in builds:
            own = envs[build.devcell]
            subjects += [
                c.Subject(f"devcell get cells ({args.cells} rows){build.tag}",
                          [build.devcell, "get", "cells"], c.fixed(own)),
                c.Subject(f"get cells -l team=team-3{build.tag}",
                          [build.devcell, "get", "cells", "-l", "team=team-3"], c.fixed(own)),
                c.Subject(f"devcell get cells (no state: CLI start-up){build.tag}",
                          [build.devcell, "get", "cells"], c.fixed(empty_env)),
            ]
        subjects.append(c.Subject("get cells -l 'team in (team-1,team-2),!gpu'",
                                  [args.devcell, "get", "cells", "-l",
                                   "team in (team-1,team-2),!gpu"], c.fixed(env)))
        if args.completion:
            # A TAB press, on the build under test only (a build before completion has none).
            subjects.append(c.Subject(label_tab, [builds[0].devcell, "__complete", "bash", "--",
                                                  "get", "cells", "cell-0000"], c.fixed(env)))
        subjects.append(c.Subject(label_pass, [args.python, "-c", "pass"], c.fixed(env)))
        samples = c.time_interleaved(subjects, args.runs, args.warmup,
                                     alternate=bool(args.compare_devcell))
        label_get = subjects[0].label
        med = statistics.median(samples[label_get])
        c.print_timings(f"get cells, {args.runs} runs each (interleaved, {args.warmup} warm-up; "
                        "stdout to /dev/null)", samples, baseline=label_pass,
                        target=f"target: get cells median <= {TARGET_S * 1000:.0f} ms -> "
                               f"{med * 1000:.1f} ms {c.verdict(med <= TARGET_S)}")
        for what in (f"devcell get cells ({args.cells} rows)", "get cells -l team=team-3",
                     "devcell get cells (no state: CLI start-up)"):
            c.print_build_ratios(samples, c.builds(args), lambda b, w=what: f"{w}{b.tag}")
        if (work / "empty-state").exists():
            print("note: `get` on an empty state dir created it")

        if args.profile:
            c.profile(args.profile, args.python, ["get", "cells"], lambda: env, work)
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
