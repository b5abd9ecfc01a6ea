"""A fork of a snapshot made on another node than its snapshot's, through a registry (its
checkpoint pushed by a job on its node, pulled by a job on the node the swarm picks), against
the same bytes moved by hand as an image: `docker import` of the tree on the source node's
engine, `docker push`, `docker pull` on the target's, and its files put into a volume there
(issue 25; docs/cluster.md, "Moving a workspace between nodes").

Starts the test swarm of private engines (tests/swarm.py) and Debian's docker-registry on
127.0.0.1 (tests/registry.py), applies one cell whose boot writes FILES small files and one
file of MIB MiB of random bytes, then for each run:

- devcell: a snapshot (untimed), then `devcell apply` of a cell made from it whose placement
  (`nodeLabels: {zone: far}`, set on another node only) its node does not meet: push, pull,
  the fork's start, timed until the command returns; also `cell fork` of the same snapshot on
  its own node (a `cp -a` there), for scale;
- by hand: on the source node's engine `docker run` of the node tools image tarring the
  workspace into `docker import`, `docker push` to the registry; on the target's `docker
  pull`, `docker create` and `docker export` of it into a `docker run` extracting into a new
  volume.

Prints each figure, the medians and the ratio.

    .venv/bin/python bench/cluster_move.py --files 1000 --mib 100 --runs 3   # ~2 min
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import carry, cli, manifest  # noqa: E402
from tests import registry as test_registry  # noqa: E402
from tests import swarm as test_swarm  # noqa: E402


def by_hand(source: test_swarm.Node, target: test_swarm.Node, volume: str, ref: str,
            i: int) -> float:
    began = time.monotonic()
    made = carry(source, target, volume, f"bench-move-{i}", ref)
    seconds = time.monotonic() - began
    target.docker("rm", made)
    target.docker("volume", "rm", f"bench-move-{i}")
    target.docker("rmi", ref)
    source.docker("rmi", ref)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    swarm = test_swarm.start(3)
    try:
        with tempfile.TemporaryDirectory() as where:
            registry = test_registry.start(Path(where) / "registry")
            try:
                run(swarm, registry, Path(where), args)
            finally:
                registry.stop()
    finally:
        swarm.remove_services()
        test_swarm.stop(swarm)


def run(swarm: test_swarm.Swarm, registry: test_registry.Registry, where: Path,
        args: argparse.Namespace) -> None:
    state = where / "state"
    state.mkdir(mode=0o700)
    config = state / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                      f"  engine: {swarm.manager.host}\n"
                      f"  registry: {registry.address}/bench/moves\n")
    os.chmod(config, 0o600)
    path = where / "src.yaml"
    path.write_text(manifest("src", args.files, args.mib))
    cli(state, "apply", "-f", str(path))
    source = next(n for n in swarm.nodes if n.docker(
        "ps", "-q", "--filter", "label=dev.devcell.cell=src").stdout.strip())
    target = next(n for n in swarm.nodes if n is not source)
    swarm.manager.docker("node", "update", "--label-add", "zone=far", target.node_id)
    container = source.docker("ps", "-q", "--filter", "label=dev.devcell.cell=src"
                              ).stdout.decode().strip()
    deadline = time.monotonic() + 600
    while source.docker("exec", container, "test", "-e", "/workspace/done",
                        check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise SystemExit("the workspace was not written in 10 min")
        time.sleep(0.5)
    volume = source.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.cell=src"
                           ).stdout.decode().split()[0]
    moved, same, hand = [], [], []
    for i in range(args.runs):
        cli(state, "snapshot", "create", "src", "--name", f"s{i}")
        fork = where / f"m{i}.yaml"
        fork.write_text(manifest(f"m{i}", args.files, args.mib, extra=(
            f"  workspace:\n    from: {{snapshot: s{i}}}\n"
            "  placement:\n    nodeLabels: {zone: far}\n")))
        began = time.monotonic()
        cli(state, "apply", "-f", str(fork))
        moved.append(time.monotonic() - began)
        began = time.monotonic()
        cli(state, "cell", "fork", "src", "--snapshot", f"s{i}", "--name", f"f{i}")
        same.append(time.monotonic() - began)
        hand.append(by_hand(source, target, volume, f"{registry.address}/bench/hand:{i}", i))
        print(f"run {i}: fork through the registry {moved[-1]:.2f} s, fork on the same node "
              f"{same[-1]:.2f} s, by hand (import, push, pull, export) {hand[-1]:.2f} s",
              flush=True)
        for cell in (f"m{i}", f"f{i}"):
            cli(state, "delete", "cell", cell, "--approve")
        cli(state, "delete", "snapshot", f"s{i}")
    m, s, h = (statistics.median(x) for x in (moved, same, hand))
    print(f"{args.files} files + {args.mib} MiB, medians of {args.runs}: through the registry "
          f"{m:.2f} s, same node {s:.2f} s, by hand {h:.2f} s; ratio devcell/by hand "
          f"{m / h:.2f}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
