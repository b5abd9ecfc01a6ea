#!/usr/bin/env python3
"""Checkpoint of a 1 GiB workspace of 10,000 files (`devcell snapshot create`) vs. `cp -a` of
the same tree; also fork (`devcell cell fork`), sleep and start (`devcell cell sleep/start`).

One container cell (network none) runs throughout; its workspace is filled once, on the host,
with 10,000 files in 100 directories, 1 GiB in all. Every devcell figure is a whole process
(start-up, the recorded operation, the engine calls, the copy, exit). Each snapshot and fork is
verified (Ready / Running, consistency filesystem, 10,000 files) and deleted, untimed.

Needs the engine and the base image (scripts/docker-setup); ~3 GiB free disk.
Run by hand: .venv/bin/python bench/checkpoint.py [--runs 5]
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as c

IMAGE = "devcell/busybox:latest"
TARGET = 1.1


def fill(workspace: Path, files: int, total: int) -> None:
    size = total // files
    block = os.urandom(1 << 20)
    for i in range(files):
        directory = workspace / f"d{i // (files // 100 or 1):03d}"
        directory.mkdir(exist_ok=True)
        offset = (i * 7919) % ((1 << 20) - size) if size < (1 << 20) else 0
        (directory / f"f{i:05d}.bin").write_bytes(block[offset:offset + size])


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--mib", type=int, default=1024, help="workspace size in MiB (default 1024)")
    args = p.parse_args()
    c.check_args(args)
    if shutil.disk_usage(Path.cwd()).free < 4 * args.mib * 2**20:
        sys.exit("not enough free disk for this benchmark")

    with c.workdir(args.keep) as work:
        state = work / "state"
        env = c.env_for(state)
        manifest = work / "big.yaml"
        manifest.write_text(f"""\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: big}}
spec:
  backend: container
  image: {IMAGE}
  network: {{mode: none}}
  services:
    - name: idle
      command: [sleep, "1000000"]
""")
        c.run_ok([args.devcell, "apply", "-f", str(manifest)], env)
        (workspace,) = state.glob("volumes/vol_*/workspace")
        fill(workspace, args.files, args.mib * 2**20)
        print(f"workspace: {args.files} files, {args.mib} MiB in {workspace}")
        problems: list[str] = []

        def devcell_json(*argv: str) -> dict[str, Any]:
            out = c.run_ok([args.devcell, *argv, "-o", "json"], env, capture=True).stdout
            return dict(json.loads(out))

        def snapshot_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            """The snapshot is always named `snap`; verified and deleted after each run."""
            def done() -> None:
                status = devcell_json("get", "snapshots", "snap")["status"]
                taken = status.get("checkpoint", {})
                if (status.get("phase") != "Ready" or taken.get("files") != args.files
                        or taken.get("consistency") != "filesystem"):
                    problems.append(f"snapshot: {status}")
                c.run_ok([args.devcell, "delete", "snapshot", "snap"], env)
            return env, done

        copies = work / "copies"

        def cp_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            shutil.rmtree(copies, ignore_errors=True)
            return env, lambda: shutil.rmtree(copies, ignore_errors=True)

        label_snap = "devcell snapshot create (quiesce, copy, resume)"
        label_cp = "cp -a WORKSPACE COPY"
        samples = c.time_interleaved([
            c.Subject(label_snap, [args.devcell, "snapshot", "create", "big", "--name", "snap"],
                      snapshot_fresh),
            c.Subject(label_cp, ["cp", "-a", str(workspace), str(copies)], cp_fresh),
        ], args.runs, args.warmup)

        # fork: from one kept snapshot; each fork cell deleted afterwards (untimed)
        c.run_ok([args.devcell, "snapshot", "create", "big", "--name", "base"], env)
        fork = [args.devcell, "cell", "fork", "big", "--snapshot", "base", "--name", "f"]

        def fork_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            def done() -> None:
                cell = devcell_json("get", "cells", "f")
                if cell["status"].get("phase") != "Running":
                    problems.append(f"fork: {cell['status']}")
                c.run_ok([args.devcell, "delete", "cell", "f", "--approve"], env)
            return env, done

        samples.update(c.time_interleaved([c.Subject("devcell cell fork (restore + start)",
                                                     fork, fork_fresh)],
                                          args.runs, args.warmup))
        samples.update(c.time_interleaved([
            c.Subject("devcell cell sleep (checkpoint, remove)",
                      [args.devcell, "cell", "sleep", "big"], c.fixed(env)),
            c.Subject("devcell cell start (cold boot)",
                      [args.devcell, "cell", "start", "big"], c.fixed(env)),
        ], args.runs, args.warmup))
        c.print_timings(f"1 GiB / {args.files} files, {args.runs} runs each "
                        f"({args.warmup} warm-up)", samples, baseline=label_cp)
        ratio = statistics.median(samples[label_snap]) / statistics.median(samples[label_cp])
        print(f"snapshot / cp -a = {ratio:.2f} (target <= {TARGET}: {c.verdict(ratio <= TARGET)})")
        copy_ms = c.connect_ro(state / "state.db").execute(
            "SELECT duration_ms FROM operation_steps s JOIN operations o ON o.id = s.op_id "
            "WHERE s.name = 'checkpoint' AND o.object_kind = 'Snapshot'").fetchall()
        if copy_ms:
            print(f"of which the checkpoint step (freeze + copy): median "
                  f"{statistics.median(r[0] for r in copy_ms):.0f} ms over {len(copy_ms)} runs")
        print(f"\nverification: {'PASS' if not problems else 'MISS'}")
        for problem in problems:
            print(f"  problem: {problem}")
        remove = c.run([args.devcell, "delete", "cell", "big", "--approve"], env)
        if remove.returncode != 0:
            print("could not delete the cell big; remove its container by hand")
        return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
