"""Placing N cells across the 3 nodes of a swarm with `devcell apply`, against the same
services made by hand with `docker service create` (issue 25's bench; docs/cluster.md).

Starts the test swarm of private engines (tests/swarm.py: never the main engine). Each run:

- devcell: a fresh state directory whose cluster.engine is the manager's; one `devcell apply
  -f` of N cells (busybox, a service that sleeps, 16Mi memory reserved and limited, network
  none), timed until it returns with every cell Running (each start waits for its task to run
  and pins it to its node);
- by hand: N `docker service create -d` on the manager of the same shape (reservation, limit,
  restart condition any, a volume mount), one after the other as a shell loop would, timed
  until the engine reports every task Running (polled every 100 ms).

Each run's services are removed after it (untimed). Prints the median of the runs and the
ratio devcell / by hand.

    .venv/bin/python bench/cluster_place.py --cells 50 --runs 3     # ~3 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import swarm as test_swarm  # noqa: E402

IMAGE = "devcell/busybox:latest"


def manifest(name: str) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\n"
            f"spec:\n  backend: container\n  image: {IMAGE}\n  resources: {{memory: 16Mi}}\n"
            "  services:\n    - name: main\n      command: [sleep, '100000']\n")


def by_devcell(swarm: test_swarm.Swarm, cells: int, where: Path) -> float:
    from devcell.cli.main import main

    state = where / "state"
    state.mkdir(mode=0o700)
    config = state / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                      f"  engine: {swarm.manager.host}\n")
    os.chmod(config, 0o600)
    path = where / "cells.yaml"
    path.write_text("---\n".join(manifest(f"b{i:03d}") for i in range(cells)))
    began = time.monotonic()
    code = main(["--state-dir", str(state), "apply", "-f", str(path)])
    took = time.monotonic() - began
    if code != 0:
        raise SystemExit(f"devcell apply failed ({code})")
    return took


def by_hand(swarm: test_swarm.Swarm, cells: int, run: int) -> float:
    manager = swarm.manager
    began = time.monotonic()
    for i in range(cells):
        manager.docker("service", "create", "-d", "-q", "--name", f"hand-{run}-{i}",
                       "--label", "bench=place", "--reserve-memory", "16M",
                       "--limit-memory", "16M", "--restart-condition", "any",
                       "--mount", f"type=volume,src=hand-{run}-{i},dst=/workspace",
                       IMAGE, "sleep", "100000")
    while True:
        listed = manager.docker("service", "ls", "--filter", "label=bench=place", "--format",
                                "{{json .}}").stdout.decode().splitlines()
        replicas = [json.loads(line)["Replicas"] for line in listed]
        if len(replicas) == cells and all(r == "1/1" for r in replicas):
            return time.monotonic() - began
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    swarm = test_swarm.start(3)
    devcell_s, hand_s = [], []
    try:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as where:
                devcell_s.append(by_devcell(swarm, args.cells, Path(where)))
                swarm.remove_services()
            hand_s.append(by_hand(swarm, args.cells, run))
            swarm.remove_services()
            print(f"run {run + 1}: devcell {devcell_s[-1]:.1f} s, by hand {hand_s[-1]:.1f} s",
                  flush=True)
    finally:
        test_swarm.stop(swarm)
    d, h = statistics.median(devcell_s), statistics.median(hand_s)
    print(f"{args.cells} cells on 3 nodes, median of {args.runs} runs: devcell apply {d:.1f} s, "
          f"docker service create by hand {h:.1f} s; ratio {d / h:.2f}")


if __name__ == "__main__":
    main()
