"""`devcell node drain NODE` of a node holding CELLS cells of MIB MiB each, against the same
moves made by hand with docker commands (issue 25's bench; docs/cluster.md, "Draining a
node").

Starts the test swarm of private engines (tests/swarm.py: never the main engine) and Debian's
docker-registry on 127.0.0.1 (tests/registry.py) as `cluster.registry`. Each run, in turns
(devcell first on even runs, by hand first on odd ones):

- devcell: CELLS cells applied on one worker (the other nodes paused meanwhile), each boot
  writing FILES small files and one file of MIB MiB of random bytes (untimed, until every
  workspace is written); then `devcell node drain WORKER`, timed until it returns: each cell
  stopped, checkpointed on its node (kept as a move snapshot), pushed, pulled on the node the
  swarm picks, started there, its old workspace emptied; the node drained at the end;
- by hand: CELLS containers of the same shape on the same worker's engine (the same boot, a
  trap so `docker stop` ends it at once, a volume each), then for each, one after the other as
  a shell loop would, timed: `docker stop`; the volume's files tarred into `docker import`,
  `docker push`, on the other nodes in turn `docker pull`, `docker create` + `docker export`
  extracted into a new volume (bench/_cluster.py's `carry`), `docker run -d` of the container
  there; `docker rm` of the old container and `docker volume rm` of its volume.

Both are checked afterwards (untimed): every cell or container runs on another node with its
FILES files and its MIB MiB. Prints each run, the medians, the ratio devcell / by hand, the
load average, and the drain's step durations summed over its cells (where its time goes).

    .venv/bin/python bench/cluster_drain.py --cells 10 --mib 100 --runs 3   # ~10 min
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cluster import IMAGE, carry, cli, manifest  # noqa: E402
from tests import registry as test_registry  # noqa: E402
from tests import swarm as test_swarm  # noqa: E402

Node = test_swarm.Node


def _fill(files: int, mib: int) -> str:
    """The by-hand container's boot: the cells' own, ended at once by `docker stop`."""
    return (f"trap 'exit 0' TERM; cd /workspace; [ -e done ] || {{ mkdir src; cd src; i=0;"
            f" while [ $i -lt {files} ]; do echo $i > f$i; i=$((i + 1)); done;"
            f" head -c {mib}m /dev/urandom > big; cd ..; touch done; }}; sleep 100000 & wait")


def _written(node: Node, container: str) -> bool:
    return node.docker("exec", container, "test", "-e", "/workspace/done",
                       check=False).returncode == 0


def _wait_written(swarm: test_swarm.Swarm, node: Node, containers: list[str]) -> None:
    swarm.wait(lambda: all(_written(node, c) for c in containers), "the workspaces written",
               timeout=900)


def _seen(node: Node, container: str) -> list[str]:
    done = node.docker("exec", container, "sh", "-c",
                       "ls /workspace/src | wc -l; stat -c %s /workspace/src/big", check=False)
    return (done.stdout + done.stderr).decode().split()


def _holds(node: Node, container: str, files: int, mib: int) -> bool:
    return _seen(node, container) == [str(files + 1), str(mib << 20)]


def _find(swarm: test_swarm.Swarm, label: str) -> tuple[Node, str] | None:
    for node in swarm.nodes:
        found = node.docker("ps", "-q", "--filter", label).stdout.decode().split()
        if found:
            return node, found[0]
    return None


def by_devcell(swarm: test_swarm.Swarm, state: Path, source: Node, run: int,
               args: argparse.Namespace, steps: dict[str, list[float]]) -> float:
    names = [f"r{run}c{k}" for k in range(args.cells)]
    for other in swarm.nodes:
        if other is not source:
            swarm.manager.docker("node", "update", "--availability", "pause", other.node_id)
    try:
        path = state.parent / f"r{run}.yaml"
        path.write_text("---\n".join(manifest(n, args.files, args.mib) for n in names))
        cli(state, "apply", "-f", str(path))
    finally:
        test_swarm.reset_nodes(swarm)
    containers = source.docker("ps", "-q", "--filter", "label=dev.devcell.managed"
                               ).stdout.decode().split()
    if len(containers) != args.cells:
        raise SystemExit(f"{len(containers)} cells on the worker, not {args.cells}")
    _wait_written(swarm, source, containers)
    for container in containers:
        if not _holds(source, container, args.files, args.mib):
            raise SystemExit(f"a cell's boot did not write its files: {_seen(source, container)}")
    began = time.monotonic()
    said = cli(state, "node", "drain", source.node_id)
    seconds = time.monotonic() - began
    if said.count(" moved to node ") != args.cells or "drained" not in said:
        raise SystemExit(f"the drain said: {said}")
    for name in names:
        where = _find(swarm, f"label=dev.devcell.cell={name}")
        if where is None or where[0] is source or not _holds(*where, args.files, args.mib):
            raise SystemExit(f"cell {name} is not elsewhere with its files: "
                             f"{where and (where[0].name, _seen(*where))}")
    conn = sqlite3.connect(state / "state.db")
    try:
        for step, ms in conn.execute(
                "SELECT s.name, s.duration_ms FROM operation_steps s JOIN operations o ON "
                "o.id = s.op_id WHERE o.object_name LIKE ? AND o.action = 'restore' AND "
                "s.duration_ms IS NOT NULL",
                (f"r{run}c%",)):
            steps[f"{run}:{step}"].append(float(ms) / 1000)
    finally:
        conn.close()
    # One at a time: ten service removals at once crashed the test swarm's manager (docker
    # 20.10's swarmkit, a nil task in SetServiceTasksRemove: the report of issue 25's bench).
    cli(state, "delete", "cell", *names, "--approve", "--workers", "1")
    test_swarm.reset_nodes(swarm)  # the move snapshots' checkpoints are removed there
    moves = [line.split()[0] for line in cli(state, "get", "snapshots").splitlines()[1:]
             if line.split() and line.split()[0].startswith(f"r{run}c")]
    if moves:
        cli(state, "delete", "snapshot", *moves)
    return seconds


def by_hand(swarm: test_swarm.Swarm, registry: str, source: Node, run: int,
            args: argparse.Namespace) -> float:
    names = [f"bench-drain-r{run}c{k}" for k in range(args.cells)]
    boot = _fill(args.files, args.mib)
    for name in names:
        source.docker("run", "-d", "--name", name, "--network", "none", "--memory", "64m",
                      "-v", f"{name}:/workspace", IMAGE, "sh", "-c", boot)
    _wait_written(swarm, source, names)
    targets = [n for n in swarm.nodes if n is not source]
    began = time.monotonic()
    made: list[tuple[Node, str, str]] = []
    for k, name in enumerate(names):
        target = targets[k % len(targets)]
        ref = f"{registry}/bench/drain-{name}:1"
        source.docker("stop", name)
        made.append((target, carry(source, target, name, f"{name}-moved", ref), ref))
        target.docker("run", "-d", "--name", name, "--network", "none", "--memory", "64m",
                      "-v", f"{name}-moved:/workspace", IMAGE, "sh", "-c", boot)
        source.docker("rm", name)
        source.docker("volume", "rm", name)
    seconds = time.monotonic() - began
    for name, (target, created, ref) in zip(names, made, strict=True):
        if not _holds(target, name, args.files, args.mib):
            raise SystemExit(f"container {name} on {target.name} lacks its files")
        target.docker("rm", "-f", name, created)
        target.docker("volume", "rm", f"{name}-moved")
        target.docker("rmi", ref)
        source.docker("rmi", ref)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=10)
    parser.add_argument("--files", type=int, default=100)
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
        try:
            swarm.remove_services()
        finally:
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
    source = swarm.workers[0]
    drained, hand = [], []
    steps: dict[str, list[float]] = defaultdict(list)
    for i in range(args.runs):
        load = os.getloadavg()[0]
        if i % 2 == 0:
            drained.append(by_devcell(swarm, state, source, i, args, steps))
            hand.append(by_hand(swarm, registry.address, source, i, args))
        else:
            hand.append(by_hand(swarm, registry.address, source, i, args))
            drained.append(by_devcell(swarm, state, source, i, args, steps))
        print(f"run {i}: devcell node drain {drained[-1]:.2f} s, by hand {hand[-1]:.2f} s "
              f"(load {load:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)
    d, h = statistics.median(drained), statistics.median(hand)
    print(f"{args.cells} cells x ({args.files} files + {args.mib} MiB), medians of {args.runs}: "
          f"devcell {d:.2f} s, by hand {h:.2f} s; ratio devcell/by hand {d / h:.2f}")
    totals: dict[str, list[float]] = defaultdict(list)
    for key, seconds in steps.items():
        totals[key.split(":", 1)[1]].append(sum(seconds))
    print("the drain's steps, summed over its cells (median of the runs): " + json.dumps(
        {k: round(statistics.median(v), 2) for k, v in sorted(totals.items())}))


if __name__ == "__main__":
    main()
