#!/usr/bin/env python3
"""A cell's container killed behind DevCell's back under the daemon: time until it runs again
and the state database records it Running again (a new Succeeded operation for the cell).

Two daemons, one after the other, each on its own state directory with the same cells:
- `events`: the default daemon, following the engine's event stream (a `die` queues the cell);
- `resync`: `--no-runtime-events`, so only the periodic resync (`--resync`, default here 10 s;
  60 s in production) finds the dead container: what DevCell did before.

Each kill is of a different cell (a cell killed twice within 10 minutes is held back by the
crash-loop back-off, by design). Target: events p50 <= 2 s. Needs the engine and the base
image (scripts/docker-setup). Run by hand: .venv/bin/python bench/killed_cell.py [--kills 12]
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as c

IMAGE = "devcell/busybox:latest"
TIMEOUT_S = 120.0


def write_cells(directory: Path, count: int) -> None:
    directory.mkdir(parents=True)
    for i in range(count):
        (directory / f"k{i}.yaml").write_text(
            c.idle_container_cell_yaml(f"k{i}", image=IMAGE, sleep="3600"))


def container_of(state: Path, name: str) -> str:
    from devcell.backends.host.ids import state_hash

    out = subprocess.run(["docker", "ps", "-aq", "--filter", "label=dev.devcell.managed=true",
                          "--filter", f"label=dev.devcell.state-dir={state_hash(state)}",
                          "--filter", f"label=dev.devcell.cell={name}"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 1, out
    return out[0]


def running_since(container: str) -> str | None:
    out = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}",
                          container], capture_output=True, text=True).stdout.split()
    return out[1] if out and out[0] == "true" else None


def succeeded_ops(db: Path, name: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(conn.execute(
            "SELECT count(*) FROM operations o JOIN cells c ON c.id = o.object_id "
            "WHERE c.name = ? AND o.status = 'Succeeded'", (name,)).fetchone()[0])
    finally:
        conn.close()


def phase(db: Path, name: str) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return str(conn.execute("SELECT phase FROM cells WHERE name = ? AND deleted_at IS NULL",
                                (name,)).fetchone()[0])
    finally:
        conn.close()


def measure(devcell: str, work: Path, label: str, kills: int, extra: list[str]) -> list[float]:
    manifests, state = work / f"m-{label}", work / f"state-{label}"
    write_cells(manifests, kills)
    env = c.env_for(state)
    c.run_ok([devcell, "apply", "-f", str(manifests)], env)
    daemon = subprocess.Popen([devcell, "controller", "run", "--manifests", str(manifests),
                               *extra], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    samples = []
    try:
        time.sleep(3)  # started, synced, following the events
        for i in range(kills):
            name = f"k{i}"
            container = container_of(state, name)
            before_ops = succeeded_ops(state / "state.db", name)
            started = running_since(container)
            t0 = time.monotonic()
            subprocess.run(["docker", "kill", container], capture_output=True, check=True)
            while True:
                since = running_since(container)
                if since is not None and since != started \
                        and succeeded_ops(state / "state.db", name) > before_ops \
                        and phase(state / "state.db", name) == "Running":
                    break
                if time.monotonic() - t0 > TIMEOUT_S:
                    sys.exit(f"{label}: {name} not running again within {TIMEOUT_S:.0f} s")
                time.sleep(0.02)
            samples.append(time.monotonic() - t0)
            print(f"  {label} kill {i + 1}/{kills}: {samples[-1] * 1000:.0f} ms", flush=True)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        c.run([devcell, "delete", "-f", str(manifests), "--approve"], env)
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=12, help="kills with events (default 12)")
    p.add_argument("--resync-kills", type=int, default=5,
                   help="kills with the resync only (default 5; 0 skips that daemon)")
    p.add_argument("--resync", default="10s", help="the resync-only daemon's --resync")
    p.add_argument("--devcell", default=str(Path(sys.executable).parent / "devcell"))
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    if args.kills < 10:
        sys.exit("--kills must be at least 10")
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    with c.workdir(args.keep) as work:
        results = {"events": measure(args.devcell, work, "events", args.kills,
                                     ["--resync", "60s"])}
        if args.resync_kills:
            results["resync"] = measure(args.devcell, work, "resync", args.resync_kills,
                                        ["--resync", args.resync, "--no-runtime-events"])
    print("\nkilled container -> running again and recorded Running (median of n)")
    print(f"{'daemon':<32}{'n':>4}{'median ms':>12}{'min ms':>10}{'p90 ms':>10}")
    for label, values in results.items():
        name = "events (default)" if label == "events" else \
            f"resync only ({args.resync}, before)"
        print(f"{name:<32}{len(values):>4}{statistics.median(values) * 1000:>12.0f}"
              f"{min(values) * 1000:>10.0f}{c.p90(values) * 1000:>10.0f}")
    p50 = statistics.median(results["events"])
    print(f"target: events p50 <= 2000 ms -> {p50 * 1000:.0f} ms {c.verdict(p50 <= 2.0)}")
    if "resync" in results:
        print(f"resync/events (median): {statistics.median(results['resync']) / p50:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
