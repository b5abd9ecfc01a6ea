"""How long a swarm service's one task takes to run on a worker, against `docker run -d` of
the same container on that worker's engine (docs/cluster.md, "Facts").

Starts the test swarm of private engines (tests/swarm.py: 3 dockerds on 127.0.<slot>.x, never
the main engine), then for each run: `docker run -d` on the worker until the container is
running, and `docker service create -d --constraint node.id==WORKER` on the manager until the
engine reports the task Running (polled every 20 ms through `docker service ps`), each followed
by its removal. Also times the swarm's own start and stop. With --node-down: how long the
manager takes to call a worker down after its dockerd stops (SIGTERM, then SIGKILL), and to
call it ready again once the engine is started again on its data-root.

    .venv/bin/python bench/cluster_start.py --runs 10     # ~1 min
    .venv/bin/python bench/cluster_start.py --runs 0 --node-down   # ~1 min
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import swarm as test_swarm  # noqa: E402

IMAGE = "devcell/busybox:latest"


def until(check, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--node-down", action="store_true",
                        help="also time a worker's engine stopping and coming back")
    args = parser.parse_args()
    swarm = test_swarm.start(3)
    try:
        manager, worker = swarm.manager, swarm.workers[-1]
        runs, services = [], []
        for i in range(args.runs):
            began = time.monotonic()
            cid = worker.docker("run", "-d", "--network", "none", IMAGE, "sleep", "300"
                                ).stdout.decode().strip()
            until(lambda cid=cid: worker.docker("inspect", "-f", "{{.State.Running}}", cid
                                        ).stdout.strip() == b"true")
            runs.append(time.monotonic() - began)
            worker.docker("rm", "-f", cid)
            name = f"bench-{i}"
            began = time.monotonic()
            manager.docker("service", "create", "-d", "-q", "--name", name, "--constraint",
                           f"node.id=={worker.node_id}", "--stop-grace-period", "0s",
                           IMAGE, "sleep", "300")
            until(lambda name=name: manager.docker("service", "ps", name, "--format", "{{.CurrentState}}"
                                         ).stdout.startswith(b"Running"))
            services.append(time.monotonic() - began)
            manager.docker("service", "rm", name)
        if runs:
            print(f"docker run -d (worker's engine):   median {statistics.median(runs):.2f} s "
                  f"(min {min(runs):.2f}, max {max(runs):.2f}, {len(runs)} runs)")
            print(f"service create, 1 task on worker:  median {statistics.median(services):.2f} "
                  f"s (min {min(services):.2f}, max {max(services):.2f}, {len(services)} runs)")
        if args.node_down:
            node_down(swarm)
    finally:
        test_swarm.stop(swarm)
    print("test swarm: " + ", ".join(f"{k} {v:.2f} s" for k, v in swarm.timings.items()))


def node_down(swarm: test_swarm.Swarm) -> None:
    manager, worker = swarm.manager, swarm.workers[-1]

    def state() -> str:
        return manager.docker("node", "inspect", "--format",
                              "{{.Status.State}} ({{.Status.Message}})", worker.node_id
                              ).stdout.decode().strip()

    for kill in (False, True):
        swarm.stop_engine(worker, kill=kill)
        began = time.monotonic()
        until(lambda: not state().startswith("ready"), timeout=120)
        print(f"worker's dockerd {'SIGKILLed' if kill else 'stopped (SIGTERM)'}: the manager "
              f"says {state()} after {time.monotonic() - began:.1f} s")
        began = time.monotonic()
        swarm.start_engine(worker)
        until(lambda: state().startswith("ready"), timeout=120)
        print(f"  started again: ready after {time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    main()
