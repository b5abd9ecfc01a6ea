"""A snapshot and a fork of a cell on the swarm (its workspace copied by jobs on its node),
against the same copy made by hand on that node's engine (issue 25; docs/cluster.md,
"Workspace operations on the node").

Starts the test swarm of private engines (tests/swarm.py: never the main engine), applies one
cell whose boot writes FILES small files and one file of MIB MiB of random bytes into its
workspace, then for each run:

- devcell: `devcell snapshot create` (three jobs on the cell's node: freeze, copy, thaw) and
  `devcell cell fork` of it (a job filling the fork's workspace there, then its service until
  its task runs), each timed until the command returns;
- by hand: `docker run --rm` of the node tools image on the node's own engine with the same
  two volumes, running the same `cp -a`: what the copy itself costs without the swarm's job,
  the freeze, the records and the reconcile around it.

Each run's fork and snapshot are deleted after it (untimed). Prints each figure and the
medians.

    .venv/bin/python bench/cluster_snapshot.py --files 10000 --mib 256 --runs 3   # ~2 min
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

from bench._cluster import TOOLS, cli, manifest  # noqa: E402
from tests import swarm as test_swarm  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    swarm = test_swarm.start(3)
    try:
        with tempfile.TemporaryDirectory() as where:
            state = Path(where) / "state"
            state.mkdir(mode=0o700)
            config = state / "config.yaml"
            config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\ncluster:\n"
                              f"  engine: {swarm.manager.host}\n")
            os.chmod(config, 0o600)
            path = Path(where) / "src.yaml"
            path.write_text(manifest("src", args.files, args.mib))
            cli(state, "apply", "-f", str(path))
            node = next(n for n in swarm.nodes if n.docker(
                "ps", "-q", "--filter", "label=dev.devcell.cell=src").stdout.strip())
            container = node.docker("ps", "-q", "--filter", "label=dev.devcell.cell=src"
                                    ).stdout.decode().strip()
            deadline = time.monotonic() + 600
            while node.docker("exec", container, "test", "-e", "/workspace/done",
                              check=False).returncode != 0:
                if time.monotonic() > deadline:
                    raise SystemExit("the workspace was not written in 10 min")
                time.sleep(0.5)
            volume = node.docker("volume", "ls", "-q", "--filter", "label=dev.devcell.cell=src"
                                 ).stdout.decode().split()[0]
            snaps, forks, hand = [], [], []
            for i in range(args.runs):
                began = time.monotonic()
                cli(state, "snapshot", "create", "src", "--name", f"s{i}")
                snaps.append(time.monotonic() - began)
                began = time.monotonic()
                cli(state, "cell", "fork", "src", "--snapshot", f"s{i}", "--name", f"f{i}")
                forks.append(time.monotonic() - began)
                began = time.monotonic()
                node.docker("run", "--rm", "--network", "none", "-v", f"{volume}:/w:ro",
                            "-v", f"bench-hand-{i}:/c", "-e", "LD_LIBRARY_PATH=/usr/lib/devcell",
                            TOOLS, "sh", "-c", "/usr/lib/devcell/cp -a --no-target-directory "
                            "/w /c/tree && sync -f /c/tree", timeout=1800)
                hand.append(time.monotonic() - began)
                print(f"run {i}: snapshot {snaps[-1]:.2f} s, fork {forks[-1]:.2f} s, "
                      f"cp -a by hand {hand[-1]:.2f} s", flush=True)
                cli(state, "delete", "cell", f"f{i}", "--approve")
                cli(state, "delete", "snapshot", f"s{i}")
                node.docker("volume", "rm", f"bench-hand-{i}")
            print(f"{args.files} files + {args.mib} MiB, medians of {args.runs}: snapshot "
                  f"{statistics.median(snaps):.2f} s, fork {statistics.median(forks):.2f} s, "
                  f"cp -a by hand {statistics.median(hand):.2f} s; load "
                  f"{os.getloadavg()[0]:.1f}")
    finally:
        swarm.remove_services()
        test_swarm.stop(swarm)


if __name__ == "__main__":
    main()
