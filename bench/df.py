#!/usr/bin/env python3
"""`devcell df` over a 1 GiB workspace of 10,000 files with 3 checkpoints, against `du -s` of
the same state directory, in the same run.

The state: one container cell (network none) whose workspace is filled on the host, then
`snapshot create` three times with 1% of the files rewritten before the second and third
(the checkpoints share the other 99% by hard links) and once more after (the workspace is
dirty). Timed, interleaved, whole processes, medians: `devcell df`, `devcell df -v`,
`devcell get cells -o wide` (one cell: its workspace walked and compared) and `du -s STATE`
(the floor: one walk of every inode, no comparison). Checked once, untimed: df's Checkpoints
size equals `du -scB1` of the three checkpoints. Needs the engine and the base image.
Run by hand: .venv/bin/python bench/df.py [--runs 9] [--files 10000] [--mib 1024]
"""

from __future__ import annotations

import json
import statistics
import sys

import _common as c
import checkpoint as ck


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=9)
    c.add_workspace_options(p, mib=1024)
    args = p.parse_args()
    c.check_args(args)
    c.require_free_disk(args.mib, 3)
    build = c.builds(args)[0]
    with c.workdir(args.keep) as work:
        world = ck.make_world(build, work, "big", args.files, args.mib)
        try:
            for salt, snap in enumerate(("s1", "s2", "s3")):
                if salt:
                    ck.change_one_percent(world.workspace, args.files, salt)
                world.dc("snapshot", "create", "big", "--name", snap)
            ck.change_one_percent(world.workspace, args.files, 9)
            checkpoints = sorted((world.state / "images" / "checkpoints").iterdir())
            doc = json.loads(c.run_ok([build.devcell, "df", "-o", "json"], world.env,
                                      capture=True).stdout)
            measured = {r["type"]: r for r in doc["types"]}["Checkpoints"]["sizeBytes"]
            expected = ck.du_bytes(*checkpoints)
            print(f"workspace: {args.files} files, {args.mib} MiB; 3 checkpoints: df says "
                  f"{measured} B, du -scB1 says {expected} B "
                  f"({'same' if measured == expected else 'DIFFERENT'})")
            subjects = [
                c.Subject("devcell df", [build.devcell, "df"], c.fixed(world.env)),
                c.Subject("devcell df -v", [build.devcell, "df", "-v"], c.fixed(world.env)),
                c.Subject("devcell get cells -o wide", [build.devcell, "get", "cells", "-o",
                                                        "wide"], c.fixed(world.env)),
                c.Subject("du -s STATE (floor)", ["du", "-s", str(world.state)],
                          c.fixed(world.env)),
            ]
            samples = c.time_interleaved(subjects, args.runs, args.warmup)
            c.print_timings(f"df, {args.runs} runs each (interleaved, {args.warmup} warm-up)",
                            samples, baseline="du -s STATE (floor)")
            ratio = statistics.median(samples["devcell df"]) / statistics.median(
                samples["du -s STATE (floor)"])
            print(f"devcell df / du -s: {ratio:.2f}x (no target; reported)")
            return 0 if measured == expected else 1
        finally:
            ck.drop_world(world)


if __name__ == "__main__":
    sys.exit(main())
