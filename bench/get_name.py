#!/usr/bin/env python3
"""`devcell get cells NAME` (one cell of --cells recorded) vs. `python -c "import sqlite3,
yaml"` (same interpreter, same site: the least a Python tool that reads a SQLite state and YAML
manifests pays to start), and `python -c pass` (the floor).

Target (issue 26): get cells NAME median <= 1.2 x the peer's. Also timed: `get cells NAME -o
yaml` and `-o json`, and with --compare-devcell another build's `get cells NAME` in the same
round-robin.
Run by hand: .venv/bin/python bench/get_name.py [--runs 21] [--cells 1000]
    [--compare-devcell /work/main/.venv/bin/devcell --compare-label main]
"""

from __future__ import annotations

import statistics
import sys

import _common as c

TARGET_RATIO = 1.2
PEER = "python -c 'import sqlite3, yaml' (peer)"
FLOOR = "python -c pass (floor)"


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=21)
    p.add_argument("--cells", type=int, default=1000, help="cells to record (default 1000)")
    args = p.parse_args()
    c.check_args(args)
    if not 1 <= args.cells <= 20000:
        sys.exit("--cells must be between 1 and 20000")

    with c.workdir(args.keep) as work:
        manifests = work / "manifests"
        c.write_cells(manifests, args.cells)
        c.warm_bytecode(args.devcell, work)
        builds = c.builds(args)
        envs = {}
        for b in builds:  # each build reads a state its own apply made (schemas may differ)
            envs[b.devcell] = c.env_for(work / f"state-{b.name or 'only'}")
            c.run_ok([b.devcell, "apply", "-f", str(manifests)], envs[b.devcell], timeout=1800)
        name = f"cell-{args.cells // 2:05d}"
        env = envs[builds[0].devcell]
        shown = c.run_ok([args.devcell, "get", "cells", name], env, capture=True).stdout
        if len(shown.splitlines()) != 2 or name.encode() not in shown:
            sys.exit(f"`get cells {name}` printed {shown[:300]!r}, expected its one row")

        subjects = []
        for b in builds:
            subjects.append(c.Subject(f"devcell get cells NAME{b.tag}",
                                      [b.devcell, "get", "cells", name], c.fixed(envs[b.devcell])))
        subjects += [
            c.Subject("get cells NAME -o yaml", [args.devcell, "get", "cells", name, "-o",
                                                 "yaml"], c.fixed(env)),
            c.Subject("get cells NAME -o json", [args.devcell, "get", "cells", name, "-o",
                                                 "json"], c.fixed(env)),
            c.Subject(PEER, [args.python, "-c", "import sqlite3, yaml"], c.fixed(env)),
            c.Subject(FLOOR, [args.python, "-c", "pass"], c.fixed(env)),
        ]
        samples = c.time_interleaved(subjects, args.runs, args.warmup,
                                     alternate=bool(args.compare_devcell))
        ratio = statistics.median(samples[subjects[0].label]) / statistics.median(samples[PEER])
        c.print_timings(f"get cells NAME over {args.cells} recorded cells, {args.runs} runs each "
                        f"(interleaved, {args.warmup} warm-up; stdout to /dev/null)", samples,
                        baseline=PEER,
                        target=f"target: get cells NAME <= {TARGET_RATIO} x the peer -> "
                               f"{ratio:.2f} {c.verdict(ratio <= TARGET_RATIO)}")
        c.print_build_ratios(samples, builds, lambda b: f"devcell get cells NAME{b.tag}")
        if args.profile:
            c.profile(args.profile, args.python, ["get", "cells", name], lambda: env, work)
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
