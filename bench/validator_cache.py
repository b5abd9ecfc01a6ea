#!/usr/bin/env python3
"""Commands that validate a new or changed manifest, with the compiled validator kept in the
state directory (<state>/validators) and without it: `devcell import devcontainer PATH` and
`devcell apply -f cell.yaml` of a Cell whose label changes before every run (fake backend).

Whole processes, timed in turns, medians of wall time and of CPU (user + system: less
disturbed by a loaded machine than wall time). "kept" runs find the entry the warm-up wrote; "no
cache" runs have <state>/validators removed first (untimed), so they compile the validator as
every command did before the cache (and write the entry). With --compare-devcell, the other
build's two commands join the same round-robin (each in its own state directory).

    .venv/bin/python bench/validator_cache.py --runs 11
    .venv/bin/python bench/validator_cache.py --runs 11 --compare-devcell OTHER/.venv/bin/devcell
"""

from __future__ import annotations

import itertools
import resource
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

import _common as c

DEVCONTAINER = '{"image": "devcell/busybox:latest", "containerEnv": {"LEVEL": "debug"}}\n'


def _cell(name: str, label: int) -> str:
    return c.cell_yaml(name, 3).replace("bench: \"true\"", f"bench: \"run-{label}\"")


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=11)
    args = p.parse_args()
    c.check_args(args)
    with c.workdir(args.keep) as work:
        project = work / "project"
        (project / ".devcontainer").mkdir(parents=True)
        (project / ".devcontainer" / "devcontainer.json").write_text(DEVCONTAINER)
        c.warm_bytecode(args.devcell, work)
        counter = itertools.count()
        subjects: list[c.Subject] = []
        cpu: dict[str, list[float]] = {}
        cases = [(b, cached) for b in c.builds(args) for cached in (True, False)
                 if cached or not b.name or b.name == c.AFTER]
        for b, cached in cases:
            slot = f"{b.name or 'only'}-{'kept' if cached else 'none'}"
            state = work / f"state-{slot}"
            env = c.env_for(state)
            manifest = work / f"cell-{slot}.yaml"
            manifest.write_text(_cell(f"cell-{slot}", next(counter)))
            c.run_ok([b.devcell, "apply", "-f", str(manifest)], env)  # the state and its key
            what = "kept" if cached else "no cache"
            if b.name and b.name != c.AFTER:
                what = b.name
            label = f"import devcontainer ({what})"
            subjects.append(c.Subject(label,
                                      [b.devcell, "import", "devcontainer", str(project)],
                                      _prepare(state, env, cached, cpu.setdefault(label, []))))
            label = f"apply -f changed cell ({what})"
            subjects.append(c.Subject(
                label, [b.devcell, "apply", "-f", str(manifest)],
                _prepare(state, env, cached, cpu.setdefault(label, []),
                         lambda m=manifest, s=slot: m.write_text(
                             _cell(f"cell-{s}", next(counter))))))
        samples = c.time_interleaved(subjects, args.runs, args.warmup, alternate=True)
        c.print_timings(f"commands that validate a new or changed Cell, {args.runs} runs each "
                        f"(interleaved, {args.warmup} warm-up)", samples, baseline=None)
        c.print_timings("CPU (user + system) of the same runs", {
            k: v[args.warmup:] for k, v in cpu.items()}, baseline=None)
        for verb in ("import devcontainer", "apply -f changed cell"):
            for figures, what in ((samples, "wall"), (cpu, "CPU")):
                kept = statistics.median(figures[f"{verb} (kept)"][-args.runs:])
                for other in [k for k in figures if k.startswith(verb) and
                              k != f"{verb} (kept)"]:
                    base = statistics.median(figures[other][-args.runs:])
                    print(f"{verb}: kept / {other[len(verb) + 2:-1]} ({what}, median): "
                          f"{kept / base:.2f} ({(base - kept) * 1000:.0f} ms less)")
        if args.profile:
            state = work / "state-only-kept" if not args.compare_devcell else \
                work / "state-after-kept"
            c.profile(args.profile, args.python, ["import", "devcontainer", str(project)],
                      lambda: c.env_for(state), work)
        return 0


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _prepare(state: Path, env: dict[str, str], cached: bool, cpu: list[float],
             change: Callable[[], object] | None = None
             ) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
    """Change the manifest, drop the cache ("no cache"), and note the command's CPU (the
    children's rusage across its run: the one child started in between)."""
    def prepare() -> tuple[dict[str, str], Callable[[], None]]:
        if change is not None:
            change()
        if not cached:
            shutil.rmtree(state / "validators", ignore_errors=True)
        start = _children_cpu()
        return env, lambda: cpu.append(_children_cpu() - start)
    return prepare


if __name__ == "__main__":
    raise SystemExit(main())
