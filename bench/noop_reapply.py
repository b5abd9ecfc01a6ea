#!/usr/bin/env python3
"""No-op re-apply: `devcell apply -f DIR` over 1,000 unchanged, converged Cells vs. a process
that only parses the same 1,000 files with yaml.CSafeLoader (same interpreter).

Target: median ratio <= 1.0. Also proves the no-op wrote nothing to SQLite and made no backend
call. Run by hand: .venv/bin/python bench/noop_reapply.py [--runs 10] [--profile]
"""

from __future__ import annotations

import sqlite3
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import _common as c


def state_snapshot(state: Path) -> dict[str, object]:
    db, fake = state / "state.db", state / "backends" / "fake.db"
    files = {**c.db_files(db), **c.db_files(fake)}
    return {
        "files": files,  # stat first: the fingerprint reads below must not be what we measure
        "state_rows": c.db_fingerprint(db),
        "fake_rows": c.db_fingerprint(fake),
        "backend_calls": c.count(fake, "SELECT count(*) FROM calls"),
    }


@dataclass
class Prepared:
    """One build's converged state dir and what its verified no-op run found."""

    build: c.Build
    label: str
    state: Path
    env: dict[str, str]
    apply: list[str]
    before: dict[str, object] = field(default_factory=dict)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)


def prepare(build: c.Build, manifests: Path, state: Path, cells: int) -> Prepared:
    """Apply the cells once (untimed), then re-apply once with a connection held open across
    the run, the check that a no-op commits nothing."""
    env = c.env_for(state)
    apply = [build.devcell, "apply", "-f", str(manifests)]
    first = c.run_ok(apply, env)
    print(f"initial apply of {cells} cells{build.tag} (not part of the comparison): "
          f"{first.seconds * 1000:.0f} ms")
    running = c.count(state / "state.db", "SELECT count(*) FROM cells "
                      "WHERE deleted_at IS NULL AND phase = 'Running'")
    if running != cells:
        sys.exit(f"expected {cells} Running cells after the first apply{build.tag}, "
                 f"got {running}")

    db = state / "state.db"
    before = state_snapshot(state)
    held = sqlite3.connect(str(db), isolation_level=None)
    version_before = held.execute("PRAGMA data_version").fetchone()[0]
    wal_before = c.file_stat(Path(str(db) + "-wal"))
    r = c.run_ok(apply, env, capture=True)
    version_after = held.execute("PRAGMA data_version").fetchone()[0]
    wal_after = c.file_stat(Path(str(db) + "-wal"))
    held.close()
    lines = r.stdout.decode().splitlines()
    unchanged = sum(1 for line in lines if line.endswith(" unchanged"))
    checks = [
        ("stdout: every object 'unchanged'",
         unchanged == cells and len(lines) == cells, f"{unchanged}/{len(lines)} lines"),
        ("PRAGMA data_version unchanged (held connection)", version_before == version_after,
         f"{version_before} -> {version_after}"),
        ("state.db-wal size/mtime unchanged (held connection)", wal_before == wal_after,
         f"{wal_before} -> {wal_after}"),
    ]
    label = f"devcell{build.tag} apply -f DIR ({cells} files, no-op)"
    return Prepared(build, label, state, env, apply, before, checks)


def after_checks(p: Prepared) -> list[tuple[str, bool, str]]:
    """What all the timed runs of one build left behind, against its snapshot before them."""
    before, after = p.before, state_snapshot(p.state)
    return [
        ("state.db rows fingerprint unchanged", before["state_rows"] == after["state_rows"],
         f"{before['state_rows']} -> {after['state_rows']}"),
        ("state.db / fake.db size+mtime and WAL contents unchanged",
         before["files"] == after["files"],
         "same" if before["files"] == after["files"] else
         f"{before['files']} -> {after['files']}"),
        ("fake backend rows fingerprint unchanged", before["fake_rows"] == after["fake_rows"],
         f"{before['fake_rows']} -> {after['fake_rows']}"),
        ("fake backend call log: no new calls",
         before["backend_calls"] == after["backend_calls"],
         f"{before['backend_calls']} -> {after['backend_calls']} rows in calls"),
    ]


def main() -> int:
    args = c.parse_cells_args(__doc__.split("\n\n")[0], runs=10)

    with c.workdir(args.keep) as work:
        manifests = work / "manifests"
        c.write_cells(manifests, args.cells)
        builds = c.builds(args)
        prepared = []
        for b in builds:  # each build its own state dir: their schemas may differ
            c.warm_bytecode(b.devcell, work)
            state = work / (f"state-{b.name}" if b.name else "state")
            prepared.append(prepare(b, manifests, state, args.cells))

        # -- timing: DevCell no-op vs. parse-only peer, interleaved -------------------------
        label_py = "python -c: parse same files (CSafeLoader)"
        samples = c.time_interleaved([
            *(c.Subject(x.label, x.apply, c.fixed(x.env)) for x in prepared),
            c.Subject(label_py, [args.python, "-c", c.PARSE_ONLY, str(manifests)],
                      c.fixed(prepared[0].env)),
        ], args.runs, args.warmup, alternate=len(builds) > 1)

        peer = statistics.median(samples[label_py])
        targets = "\n".join(
            f"target{x.build.tag}: ratio <= 1.00 -> {ratio:.2f} {c.verdict(ratio <= 1.0)}"
            for x in prepared for ratio in [statistics.median(samples[x.label]) / peer])
        c.print_timings(f"no-op re-apply, {args.runs} runs each (interleaved, "
                        f"{args.warmup} warm-up)", samples, baseline=label_py, target=targets)
        c.print_build_ratios(samples, builds,
                             lambda b: next(x.label for x in prepared if x.build == b))

        ok = True
        for x in prepared:
            print(f"\nno-op checks{x.build.tag} (one held-connection run + all timed runs):")
            for name, passed, detail in x.checks + after_checks(x):
                print(f"  {c.verdict(passed)}  {name}: {detail}")
                ok = ok and passed

        if args.profile:
            c.profile(args.profile, args.python, ["apply", "-f", str(manifests)],
                      lambda: prepared[0].env, work)
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
