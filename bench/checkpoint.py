#!/usr/bin/env python3
"""Checkpoints, forks and sleep of a 1 GiB workspace of 10,000 files, against `cp -a` of the
same tree and (with --compare-devcell) another build of DevCell, in the same run.

Figures (whole `devcell` processes, medians; the steps' own durations from the operations
table where a target names them):
- first checkpoint (`snapshot create`, nothing to share) vs `cp -a` of the workspace;
- second checkpoint after 1% of the files changed, vs the first;
- checkpoint of an unchanged workspace (freeze + share + unfreeze: the steps quiesce,
  checkpoint and resume);
- fork of a snapshot (`cell fork`: restore + start) at 100 MiB, 1 GiB and 4 GiB (4 GiB only
  with room on disk), and the create-volume step alone (the cost before the container starts);
- 10 forks of one 1 GiB snapshot each changing 1% of the files: bytes on disk (`du -sx`, which
  counts a block shared by hard links once and does not enter the forks' overlay mounts);
- `cell sleep` after a 1% change, and `cell start` after sleep.

Each build runs its own state directory and cell (container, network none), filled once on
the host. Every timed run starts after a sync (untimed), so no run's syncfs writes back what
the run before it (the other build's copy) left dirty. Snapshots, forks and cells made for a
run are verified and deleted, untimed.
Needs the engine and the base image (scripts/docker-setup).
Run by hand: .venv/bin/python bench/checkpoint.py [--runs 5] [--only-checkpoints]
    [--compare-devcell /work/main/.venv/bin/devcell --compare-label main]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as c

IMAGE = "devcell/busybox:latest"
FIRST_TARGET = 1.1  # first checkpoint / cp -a
SECOND_TARGET = 0.10  # second checkpoint (1% changed) / first
UNCHANGED_MS = 100.0  # quiesce + checkpoint + resume steps, unchanged workspace
FORK_MS = 150.0  # before the container starts
FORKS_GIB = 1.2  # 10 forks, 1% changed each, with their snapshot
SLEEP_TARGET = 0.20  # sleep after a 1% change / today's sleep
Prepare = Callable[[], tuple[dict[str, str], Callable[[], None]]]


def fill(workspace: Path, files: int, total: int) -> None:
    size = total // files
    block = os.urandom(1 << 20)
    for i in range(files):
        directory = workspace / f"d{i // (files // 100 or 1):03d}"
        directory.mkdir(exist_ok=True)
        offset = (i * 7919) % ((1 << 20) - size) if size < (1 << 20) else 0
        (directory / f"f{i:05d}.bin").write_bytes(block[offset:offset + size])


def change_one_percent(workspace: Path, files: int, salt: int) -> None:
    """Rewrite every 100th file (1% of them) in place with new bytes of the same size."""
    for i in range(0, files, 100):
        directory = workspace / f"d{i // (files // 100 or 1):03d}"
        path = directory / f"f{i:05d}.bin"
        size = path.stat().st_size
        with open(path, "r+b") as out:
            out.write((salt.to_bytes(8, "big") + os.urandom(64)) * (size // 72 + 1))
            out.truncate(size)


def du_bytes(*paths: Path) -> int:
    """Bytes on disk under `paths`, one `du` so a block shared by hard links counts once,
    not entering other filesystems (a fork's overlay mount)."""
    out = subprocess.run(["du", "-sxcB1", *map(str, paths)], capture_output=True, text=True,
                         check=True).stdout.splitlines()[-1]
    return int(out.split()[0])


@dataclass
class World:
    """One build's state directory with one filled cell."""

    build: c.Build
    state: Path
    env: dict[str, str]
    cell: str
    workspace: Path = field(default=Path())
    problems: list[str] = field(default_factory=list)

    def dc(self, *argv: str) -> c.Result:
        return c.run_ok([self.build.devcell, *argv], self.env)

    def json(self, *argv: str) -> dict[str, Any]:
        out = c.run_ok([self.build.devcell, *argv, "-o", "json"], self.env, capture=True).stdout
        return dict(json.loads(out))

    def steps_ms(self, kind: str, names: tuple[str, ...]) -> float:
        """Summed durations of these steps in the latest operation on a `kind`."""
        db = c.connect_ro(self.state / "state.db")
        try:
            rows = db.execute(
                "SELECT s.name, s.duration_ms FROM operation_steps s WHERE s.op_id = "
                "(SELECT id FROM operations WHERE object_kind = ? ORDER BY created_at DESC, "
                "rowid DESC LIMIT 1)", (kind,)).fetchall()
        finally:
            db.close()
        return float(sum(ms or 0 for name, ms in rows if name in names))

    def volume_of(self, cell: str) -> Path:
        """The workspace of a cell's volume, found by the cell id its marker names."""
        ref = self.json("get", "cells", cell)["status"]["runtime"]["ref"]
        cell_id = ref.rpartition("/")[2]
        (found,) = [m.parent / "workspace" for m in self.state.glob("volumes/*/volume.json")
                    if json.loads(m.read_text()).get("cell_id") == cell_id]
        return found


def make_world(build: c.Build, work: Path, cell: str, files: int, mib: int) -> World:
    state = work / f"state-{build.name or 'only'}-{cell}"
    world = World(build, state, c.env_for(state), cell)
    manifest = work / f"{cell}-{build.name or 'only'}.yaml"
    manifest.write_text(c.idle_container_cell_yaml(cell, image=IMAGE))
    world.dc("apply", "-f", str(manifest))
    (world.workspace,) = state.glob("volumes/vol_*/workspace")
    fill(world.workspace, files, mib * 2**20)
    return world


def drop_world(world: World) -> None:
    for cell in world.json("get", "cells").get("items", []):
        c.run([world.build.devcell, "delete", "cell", cell["metadata"]["name"], "--approve"],
              world.env)
    for snap in world.json("get", "snapshots").get("items", []):
        c.run([world.build.devcell, "delete", "snapshot", snap["metadata"]["name"]], world.env)
    shutil.rmtree(world.state, ignore_errors=True)


def check_snapshot(world: World, name: str, files: int) -> None:
    status = world.json("get", "snapshots", name)["status"]
    taken = status.get("checkpoint", {})
    if (status.get("phase") != "Ready" or taken.get("files") != files
            or taken.get("consistency") != "filesystem"):
        world.problems.append(f"{world.build.name} snapshot {name}: {status}")


def checkpoints(worlds: list[World], args: Any, work: Path,
                samples: dict[str, list[float]], steps: dict[str, list[float]]) -> None:
    copies = work / "copies"

    def first(w: World) -> Prepare:
        def done() -> None:
            steps.setdefault(f"first{w.build.tag}", []).append(
                w.steps_ms("Snapshot", ("checkpoint",)))
            check_snapshot(w, "snap", args.files)
            w.dc("delete", "snapshot", "snap")
        return lambda: (w.env, done)

    def cp_fresh() -> tuple[dict[str, str], Callable[[], None]]:
        shutil.rmtree(copies, ignore_errors=True)
        return worlds[0].env, lambda: shutil.rmtree(copies, ignore_errors=True)

    subjects = [c.Subject(f"first checkpoint{w.build.tag}",
                          [w.build.devcell, "snapshot", "create", w.cell, "--name", "snap"],
                          first(w)) for w in worlds]
    subjects.append(c.Subject("cp -a WORKSPACE COPY",
                              ["cp", "-a", str(worlds[0].workspace), str(copies)], cp_fresh))
    # a checkpoint is durable when it is reported (one syncfs before its rename): the same
    # copy made durable the same way, to show what the flush itself costs
    subjects.append(c.Subject("cp -a WORKSPACE COPY && sync -f COPY",
                              ["sh", "-c", 'cp -a "$0" "$1" && sync -f "$1"',
                               str(worlds[0].workspace), str(copies)], cp_fresh))
    samples.update(c.time_interleaved(subjects, args.runs, args.warmup,
                                      alternate=len(worlds) > 1, settle=True))
    for w in worlds:  # the checkpoint later ones share with
        w.dc("snapshot", "create", w.cell, "--name", "base")
    salt = iter(range(10**6))

    def later(w: World, what: str, change: bool) -> Prepare:
        def prepare() -> tuple[dict[str, str], Callable[[], None]]:
            if change:
                change_one_percent(w.workspace, args.files, next(salt))

            def done() -> None:
                steps.setdefault(f"{what}{w.build.tag}", []).append(
                    w.steps_ms("Snapshot", ("quiesce", "checkpoint", "resume")))
                check_snapshot(w, "again", args.files)
                w.dc("delete", "snapshot", "again")
            return w.env, done
        return prepare

    for what, change in (("second checkpoint, 1% changed", True),
                         ("checkpoint, nothing changed", False)):
        if not change:  # the newest checkpoint is then the workspace as it is
            for w in worlds:
                w.dc("snapshot", "create", w.cell, "--name", "latest")
        subjects = [c.Subject(f"{what}{w.build.tag}", [w.build.devcell, "snapshot", "create",
                                                         w.cell, "--name", "again"],
                              later(w, what, change)) for w in worlds]
        samples.update(c.time_interleaved(subjects, args.runs, args.warmup,
                                          alternate=len(worlds) > 1, settle=True))


def forks(worlds: list[World], args: Any, samples: dict[str, list[float]],
          steps: dict[str, list[float]], size: str) -> None:
    def fork(w: World) -> Prepare:
        def done() -> None:
            steps.setdefault(f"fork {size}{w.build.tag}", []).append(
                w.steps_ms("Cell", ("create-volume",)))
            cell = w.json("get", "cells", "f")
            if cell["status"].get("phase") != "Running":
                w.problems.append(f"fork: {cell['status']}")
            w.dc("delete", "cell", "f", "--approve")
        return lambda: (w.env, done)

    samples.update(c.time_interleaved(
        [c.Subject(f"fork {size}{w.build.tag}", [w.build.devcell, "cell", "fork", w.cell,
                                                  "--snapshot", "base", "--name", "f"], fork(w))
         for w in worlds], args.runs, args.warmup, alternate=len(worlds) > 1, settle=True))


def ten_forks(w: World, args: Any) -> tuple[int, int]:
    """Bytes on disk of the snapshot `base` and 10 forks of it, 1% changed in each (du), and
    of everything (with the parent's workspace)."""
    for i in range(10):
        w.dc("cell", "fork", w.cell, "--snapshot", "base", "--name", f"ten{i}")
        change_one_percent(w.volume_of(f"ten{i}"), args.files, 1000 + i)
    parent = w.workspace.parent
    forks_and_snapshot = [p for p in (w.state / "volumes").iterdir() if p != parent]
    ours = du_bytes(w.state / "images", *forks_and_snapshot)
    total = du_bytes(w.state)
    for i in range(10):
        w.dc("delete", "cell", f"ten{i}", "--approve")
    return ours, total


def sleeps(worlds: list[World], args: Any, samples: dict[str, list[float]]) -> None:
    salt = iter(range(2 * 10**6, 3 * 10**6))

    def changed(w: World) -> Prepare:
        def prepare() -> tuple[dict[str, str], Callable[[], None]]:
            change_one_percent(w.workspace, args.files, next(salt))
            return w.env, lambda: None
        return prepare

    subjects: list[c.Subject] = []
    for w in worlds:
        subjects += [c.Subject(f"sleep, 1% changed{w.build.tag}",
                               [w.build.devcell, "cell", "sleep", w.cell], changed(w)),
                     c.Subject(f"start after sleep{w.build.tag}",
                               [w.build.devcell, "cell", "start", w.cell], c.fixed(w.env))]
    samples.update(c.time_interleaved(subjects, args.runs, args.warmup, settle=True))


def only_disk(worlds: list[World], args: Any) -> int:
    for w in worlds:
        w.dc("snapshot", "create", w.cell, "--name", "base")
        ours, total = ten_forks(w, args)
        print(f"10 forks of one {args.mib} MiB snapshot, 1% changed each{w.build.tag}: "
              f"{ours / 2**30:.2f} GiB with the snapshot ({total / 2**30:.2f} GiB with the "
              f"parent's workspace)")
    for w in worlds:
        drop_world(w)
    return 0


def only_sleep(worlds: list[World], args: Any) -> int:
    """`cell sleep` after a 1% change and `cell start` after it, the builds interleaved."""
    samples: dict[str, list[float]] = {}
    sleeps(worlds, args, samples)
    c.print_timings(f"{args.mib} MiB / {args.files} files, {args.runs} runs each "
                    f"({args.warmup} warm-up)", samples, baseline=None)
    if len(worlds) > 1:
        t0, t1 = worlds[0].build.tag, worlds[1].build.tag
        for what in ("sleep, 1% changed", "start after sleep"):
            r = statistics.median(samples[what + t0]) / statistics.median(samples[what + t1])
            print(f"{what}: {worlds[0].build.name} / {worlds[1].build.name} = {r:.3f}")
    for w in worlds:
        drop_world(w)
    return 0


def ratio_line(samples: dict[str, list[float]], a: str, b: str, target: float) -> str:
    r = statistics.median(samples[a]) / statistics.median(samples[b])
    return f"{a} / {b} = {r:.3f} (target <= {target}: {c.verdict(r <= target)})"


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    c.add_workspace_options(p, mib=1024)
    p.add_argument("--fork-sizes", default="100,1024,4096",
                   help="workspace sizes (MiB) forks are timed at (default 100,1024,4096)")
    p.add_argument("--only-disk", action="store_true",
                   help="only the bytes on disk of 10 forks (no timings)")
    p.add_argument("--only-checkpoints", action="store_true",
                   help="only the checkpoint figures (first, second after a 1%% change, "
                        "unchanged): no forks, no disk figure, no sleep")
    p.add_argument("--only-sleep", action="store_true",
                   help="only `cell sleep` after a 1%% change and `cell start` after sleep")
    args = p.parse_args()
    c.check_args(args)
    builds = c.builds(args)
    copies = 3 if args.only_checkpoints else 12  # workspace, copy, checkpoints; + 10 forks
    free = c.require_free_disk(args.mib, copies * len(builds) + 2,
                               "10 forks may be full copies")
    print(f"free disk: {free / 2**30:.1f} GiB")
    sizes = [int(s) for s in args.fork_sizes.split(",") if s]
    room = [s for s in sizes if free > 4 * len(builds) * s * 2**20 + 16 * 2**30]
    if room != sizes:
        print(f"fork sizes {sorted(set(sizes) - set(room))} MiB left out: not enough free disk")

    with c.workdir(args.keep) as work:
        worlds = [make_world(b, work, "big", args.files, args.mib) for b in builds]
        print(f"workspace: {args.files} files, {args.mib} MiB per build")
        samples: dict[str, list[float]] = {}
        steps: dict[str, list[float]] = {}
        if args.only_disk:
            return only_disk(worlds, args)
        if args.only_sleep:
            return only_sleep(worlds, args)
        checkpoints(worlds, args, work, samples, steps)
        if args.only_checkpoints:
            room = []
        for size in room:
            if size == args.mib:
                forks(worlds, args, samples, steps, f"{size} MiB")
                continue
            sized = [make_world(b, work, f"s{size}", args.files, size) for b in builds]
            for w in sized:
                w.dc("snapshot", "create", w.cell, "--name", "base")
            forks(sized, args, samples, steps, f"{size} MiB")
            for w in sized:
                worlds[0].problems += w.problems
                drop_world(w)
        disk = {} if args.only_checkpoints else {w.build.name: ten_forks(w, args)
                                                 for w in worlds}
        if not args.only_checkpoints:
            sleeps(worlds, args, samples)

        tag = [w.build.tag for w in worlds]
        c.print_timings(f"{args.mib} MiB / {args.files} files, {args.runs} runs each "
                        f"({args.warmup} warm-up); ratio against cp -a", samples,
                        baseline="cp -a WORKSPACE COPY")
        print("\nsteps from the operations table (ms, median):")
        for label, values in steps.items():
            print(f"  {label:<48} {statistics.median(values):9.1f}")
        print("\ntargets (this build" + (f" = {builds[0].name}" if len(builds) > 1 else "")
              + "):")
        t0 = tag[0]
        print(ratio_line(samples, f"first checkpoint{t0}", "cp -a WORKSPACE COPY", FIRST_TARGET))
        print(ratio_line(samples, f"first checkpoint{t0}", "cp -a WORKSPACE COPY && sync -f COPY",
                         FIRST_TARGET))
        print(ratio_line(samples, f"second checkpoint, 1% changed{t0}", f"first checkpoint{t0}",
                         SECOND_TARGET))
        second = statistics.median(steps[f"second checkpoint, 1% changed{t0}"])
        first = statistics.median(steps[f"first{t0}"])
        print(f"second checkpoint, 1% changed: quiesce + checkpoint + resume steps {second:.1f} "
              f"ms = {second / first:.3f} of the first's checkpoint step ({first:.1f} ms)")
        unchanged = statistics.median(steps[f"checkpoint, nothing changed{t0}"])
        print(f"unchanged workspace: quiesce + checkpoint + resume steps {unchanged:.1f} ms "
              f"(target <= {UNCHANGED_MS:.0f}: {c.verdict(unchanged <= UNCHANGED_MS)})")
        for label in [f"{what}{t}" for what in ("second checkpoint, 1% changed",
                                                  "checkpoint, nothing changed")
                      for t in tag[1:]]:
            print(f"  {label}: steps {statistics.median(steps[label]):.1f} ms")
        for size in room:
            ms = statistics.median(steps[f"fork {size} MiB{t0}"])
            print(f"fork {size} MiB: create-volume step {ms:.1f} ms "
                  f"(target <= {FORK_MS:.0f}: {c.verdict(ms <= FORK_MS)})")
        for w in worlds if disk else []:
            ours, total = disk[w.build.name]
            print(f"10 forks of one {args.mib} MiB snapshot, 1% changed each{w.build.tag}: "
                  f"{ours / 2**30:.2f} GiB with the snapshot ({total / 2**30:.2f} GiB with the "
                  f"parent's workspace)" + (f" (target <= {FORKS_GIB}: "
                                           f"{c.verdict(ours / 2**30 <= FORKS_GIB)})"
                                           if w is worlds[0] else ""))
        if len(worlds) > 1:
            t1 = tag[1]
            if not args.only_checkpoints:
                print(ratio_line(samples, f"sleep, 1% changed{t0}", f"sleep, 1% changed{t1}",
                                 SLEEP_TARGET))
                print(ratio_line(samples, f"start after sleep{t0}", f"start after sleep{t1}",
                                 1.05))
            print(f"\n{builds[0].name} / {builds[1].name} (medians):")
            for label in samples:
                if label.endswith(t0):
                    other = label[:-len(t0)] + t1
                    if other in samples:
                        r = statistics.median(samples[label]) / statistics.median(samples[other])
                        print(f"  {label[:-len(t0)]:<40} {r:7.3f}")
        problems = [p for w in worlds for p in w.problems]
        print(f"\nverification: {'PASS' if not problems else 'MISS'}")
        for problem in problems:
            print(f"  problem: {problem}")
        for w in worlds:
            drop_world(w)
        return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
