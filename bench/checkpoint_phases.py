#!/usr/bin/env python3
"""Where a checkpoint's time goes, in one process, without the engine: the workspace store
alone (walk, digest, plan, links and copies, records, syncfs, rename) on a workspace of
10,000 files, for an unchanged workspace and after 1% of the files changed.

Peers, timed in the same run on the same tree, interleaved: `cp -al` of the previous
checkpoint's tree (what linking every file costs the kernel: the floor of a checkpoint that
links everything) and `find -printf` of the workspace (a walk with an lstat of every entry
in C: the floor of any change detection that looks at every file).
Run by hand: .venv/bin/python bench/checkpoint_phases.py [--runs 7] [--files 10000] [--mib 1024]
"""

from __future__ import annotations

import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devcell.backends.container import workspaces
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import treecopy

sys.path.insert(0, str(Path(__file__).parent))
from checkpoint import change_one_percent, fill  # noqa: E402

PHASES = (("scan", treecopy), ("record_bytes", treecopy), ("digest_of", treecopy),
          ("plan_layer", treecopy), ("_plan", treecopy), ("_copy", treecopy),
          ("sync_filesystem", treecopy), ("_write_sources", workspaces),
          ("_read_sources", workspaces))


def instrument(spent: dict[str, float]) -> None:
    """Wrap each phase's function to add its wall time (ms) to `spent`."""
    for name, module in PHASES:
        inner = getattr(module, name)

        def timed(*args: Any, _inner: Callable[..., Any] = inner, _name: str = name,
                  **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                spent[_name] = spent.get(_name, 0.0) + (time.perf_counter() - started) * 1000
        setattr(module, name, timed)


def main() -> int:
    import argparse
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--mib", type=int, default=1024)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="devcell-phases-", dir=os.environ.get("TMPDIR")))
    try:
        store = WorkspaceStore(Layout(work / "state"))
        store.create_volume(cell_id="cell_1", cell_name="bench", volume_id="vol_1",
                            from_checkpoint=None)
        workspace = store.layout.workspace("vol_1")
        fill(workspace, args.files, args.mib * 2**20)
        time.sleep(0.05)  # older than the first checkpoint's clock tick
        store.checkpoint(checkpoint_id="ckp_base", cell_id="cell_1", volume_id="vol_1")
        spent: dict[str, float] = {}
        instrument(spent)
        totals: dict[str, list[float]] = {}
        phases: dict[str, list[dict[str, float]]] = {}
        salt = iter(range(10**6))

        def take(label: str, change: bool) -> None:
            if change:
                change_one_percent(workspace, args.files, next(salt))
                time.sleep(0.02)  # the change is older than the checkpoint's clock tick
            name = f"ckp_{secrets.token_hex(4)}"
            spent.clear()
            started = time.perf_counter()
            store.checkpoint(checkpoint_id=name, cell_id="cell_1", volume_id="vol_1")
            totals.setdefault(label, []).append((time.perf_counter() - started) * 1000)
            phases.setdefault(label, []).append(dict(spent))
            shared = (store.find_checkpoint(name) or {}).get(workspaces.SAME_AS)
            if (label == "unchanged") != bool(shared):
                sys.exit(f"{label}: the checkpoint {'did not name' if not shared else 'named'}"
                         " the previous tree")
            store.delete_checkpoint(name)

        links = work / "links"

        def peer(label: str, argv: list[str]) -> None:
            shutil.rmtree(links, ignore_errors=True)
            started = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            totals.setdefault(label, []).append((time.perf_counter() - started) * 1000)

        base_tree = str(store.tree_of("ckp_base"))
        for _ in range(args.runs):
            take("1% changed", True)
            store.checkpoint(checkpoint_id="ckp_latest", cell_id="cell_1", volume_id="vol_1")
            take("unchanged", False)
            store.delete_checkpoint("ckp_latest")
            peer("cp -al CHECKPOINT (link every file)", ["cp", "-al", base_tree, str(links)])
            peer("find -printf WORKSPACE (walk + lstat)",
                 ["find", str(workspace), "-printf", "%i %s %T@ %C@ %m %n\n"])
        print(f"{args.files} files, {args.mib} MiB, {args.runs} runs; load average "
              f"{os.getloadavg()[0]:.2f}; medians in ms")
        for label, values in totals.items():
            print(f"  {label:<42} {statistics.median(values):8.1f}")
            for phase in sorted({k for run in phases.get(label, []) for k in run}):
                ms = statistics.median(run.get(phase, 0.0) for run in phases[label])
                print(f"      {phase:<38} {ms:8.1f}")
        return 0
    finally:
        for volume, _ in WorkspaceStore(Layout(work / "state")).all_volumes():
            WorkspaceStore(Layout(work / "state")).delete_volume(volume)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
