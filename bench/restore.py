#!/usr/bin/env python3
"""`devcell snapshot restore` of a 1 GiB snapshot of 10,000 files, against `cp -a` of the same
checkpoint tree, in the same run (round-robin, medians).

Figures (whole `devcell` processes; the restore-workspace step alone from the operations
table):
- `snapshot restore s1 --approve --no-safety-snapshot` of a running container cell: stop,
  restore-workspace (a parallel copy of the checkpoint, then one atomic exchange), start;
- the same with the safety snapshot (the default): the safety checkpoint of a workspace just
  restored shares nothing with an earlier checkpoint (its files are new inodes), so it is a
  full copy too;
- `snapshot restore s1 --cell fork` of an overlay fork of s1 back to s1 after it changed 1%
  of the files: its upper layer is replaced by an empty one, whatever the size;
- the peer: `cp -a` of the checkpoint's tree to a new directory.

Every restore is checked (the workspace's change signature equals the checkpoint's) and the
safety snapshots are deleted between runs, untimed. Needs the engine and the base image.
Run by hand: .venv/bin/python bench/restore.py [--runs 5] [--files 10000] [--mib 1024]
"""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import _common as c
import checkpoint as ck

from devcell.backends.host import treecopy

CHECKED: list[str] = []


def _verify(w: ck.World, workspace: Path, checkpoint: Path, what: str) -> Callable[[], None]:
    def check() -> None:
        if treecopy.signature(workspace) != treecopy.signature(checkpoint):
            w.problems.append(f"{what}: the restored workspace differs from the snapshot")
        CHECKED.append(what)
        for snap in w.json("get", "snapshots").get("items", []):
            if snap["metadata"]["name"].startswith(f"{w.cell}-pre-restore-") or \
                    snap["metadata"]["name"].startswith("fk-pre-restore-"):
                w.dc("delete", "snapshot", snap["metadata"]["name"])
    return check


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    c.add_workspace_options(p, mib=1024, what="snapshot")
    args = p.parse_args()
    c.check_args(args)
    c.require_free_disk(args.mib, 6, "about 6 x the snapshot size")
    build = c.builds(args)[0]
    with c.workdir(args.keep) as work:
        w = ck.make_world(build, work, "big", args.files, args.mib)
        w.dc("snapshot", "create", "big", "--name", "s1")
        (ckpt,) = [d / "workspace" for d in (w.state / "images" / "checkpoints").iterdir()
                   if not d.name.startswith(".")]
        w.dc("cell", "fork", "big", "--snapshot", "s1", "--name", "fk")
        fork = w.volume_of("fk")
        copy = work / "cp-a-copy"
        salt = iter(range(1, 10_000))

        def restore(extra: tuple[str, ...], workspace: Path, what: str) -> c.Subject:
            def prepare() -> tuple[dict[str, str], Callable[[], None]]:
                ck.change_one_percent(workspace, args.files, next(salt))
                return w.env, _verify(w, workspace, ckpt, what)
            return c.Subject(what, [build.devcell, "snapshot", "restore", "s1", "--approve",
                                    *extra], prepare)

        def peer() -> tuple[dict[str, str], Callable[[], None]]:
            return w.env, lambda: shutil.rmtree(copy)

        subjects = [
            c.Subject("cp -a CHECKPOINT COPY", ["cp", "-a", str(ckpt), str(copy)], peer),
            restore(("--no-safety-snapshot",), w.workspace, "restore, no safety snapshot"),
            restore((), w.workspace, "restore with safety snapshot"),
            restore(("--cell", "fk", "--no-safety-snapshot"), fork,
                    "restore of a fork to its own snapshot"),
        ]
        steps: dict[str, list[float]] = {}
        samples: dict[str, list[float]] = {s.label: [] for s in subjects}
        for round_no in range(args.warmup + args.runs):
            for s in subjects:
                env, cleanup = s.prepare()
                try:
                    r = c.run_ok(s.argv, env)
                    if s.label != subjects[0].label and round_no >= args.warmup:
                        ms = w.steps_ms("Cell", ("restore-workspace",))
                        steps.setdefault(f"{s.label}: restore-workspace step", []).append(ms)
                finally:
                    cleanup()
                if round_no >= args.warmup:
                    samples[s.label].append(r.seconds)
        c.print_timings(f"{args.mib} MiB / {args.files} files, {args.runs} runs each "
                        f"({args.warmup} warm-up); ratio against cp -a", samples,
                        baseline=subjects[0].label)
        print("\nsteps from the operations table (ms, median):")
        for label, values in steps.items():
            print(f"  {label:<64} {statistics.median(values):9.1f}")
        base = statistics.median(samples[subjects[0].label])
        step = statistics.median(steps[f"{subjects[1].label}: restore-workspace step"])
        print(f"\nrestore-workspace step / cp -a: {step / 1000 / base:.2f}")
        print(f"restores checked against the snapshot: {len(CHECKED)}")
        for problem in w.problems:
            print(f"PROBLEM: {problem}")
        ck.drop_world(w)
        return 1 if w.problems else 0


if __name__ == "__main__":
    sys.exit(main())
