#!/usr/bin/env python3
"""port-forward through the API (`devcell --server unix:SOCK port-forward`, one WebSocket per
connection, server/forward.py) against the direct `devcell port-forward` on the state
directory, in one run: the first byte's latency of a new connection and a download's
throughput.

Set-up (untimed, printed): a container cell with no network (mode none) applied with `apply
-f`, its services `nc -ll -p 7000 -e cat` (an echo) and `nc -ll -p 7002 -e head -c SIZE
/dev/zero` (a download); a daemon serving the state directory (`controller run --manifests
EMPTY --allow-empty --listen unix:SOCK --resync 0 --no-runtime-events`); both forwards
started once, side by side, each listening on free local ports for both services.

Timed, the two forwards taking turns (order reversed every other round), medians:
- first byte: a new local connection, one byte written to the echo, until it comes back
  (through the API: the WebSocket's upgrade, the server's checks and its connection into the
  cell; direct: the backend's connection into the cell);
- download: a new connection reading SIZE bytes until their end (MiB/s).

Run by hand (root: the connection into a container's namespace uses setns), under nice:
    nice -n 10 .venv/bin/python bench/port_forward_api.py [--runs 15] [--mib 64]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGE = "devcell/busybox:latest"
ECHO, SOURCE = 7000, 7002


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    p.add_argument("--runs", type=int, default=15, help="timed turns of each (default 15)")
    p.add_argument("--mib", type=int, default=64, help="the download's size (default 64)")
    args = p.parse_args()
    runs = max(3, min(args.runs, 200))
    size = max(1, min(args.mib, 1024)) << 20
    devcell = [sys.executable, "-m", "devcell"]
    with tempfile.TemporaryDirectory(prefix="devcell-bench-pf-") as tmp:
        root = Path(tmp)
        state, empty, sock = root / "state", root / "manifests", root / "api.sock"
        empty.mkdir()
        name = f"pf-{uuid.uuid4().hex[:6]}"
        manifest = root / "cell.yaml"
        manifest.write_text(
            f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\n"
            f"spec:\n  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
            f"  services:\n"
            f"    - {{name: echo, command: [nc, -ll, -p, '{ECHO}', -e, cat]}}\n"
            f"    - {{name: source, command: [nc, -ll, -p, '{SOURCE}', -e, head, -c, "
            f"'{size}', /dev/zero]}}\n")
        direct = devcell + ["--state-dir", str(state)]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        began = time.monotonic()
        subprocess.run([*direct, "apply", "-f", str(manifest), "--timeout", "300"],
                       check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL)
        print(f"set-up: cell {name} Running in {time.monotonic() - began:.1f} s", flush=True)
        procs: list[subprocess.Popen[str]] = []
        try:
            log = open(root / "daemon.log", "w")  # noqa: SIM115  (closed with the daemon)
            procs.append(subprocess.Popen(
                [*direct, "controller", "run", "--manifests", str(empty), "--allow-empty",
                 "--listen", f"unix:{sock}", "--resync", "0", "--no-runtime-events"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True))
            deadline = time.monotonic() + 120
            while not sock.exists():
                if time.monotonic() > deadline or procs[0].poll() is not None:
                    raise SystemExit(f"the daemon did not listen: {(root / 'daemon.log').read_text()}")
                time.sleep(0.1)
            forwards = {
                "direct": _forward(procs, [*direct, "port-forward", name, f":{ECHO}",
                                           f":{SOURCE}"], env),
                "api": _forward(procs, [*devcell, "--server", f"unix:{sock}", "port-forward",
                                        name, f":{ECHO}", f":{SOURCE}"], env)}
            print(f"forwards: {forwards}", flush=True)
            first: dict[str, list[float]] = {k: [] for k in forwards}
            rate: dict[str, list[float]] = {k: [] for k in forwards}
            for echo, source in forwards.values():  # warm-up, untimed
                _first_byte(echo)
                _download(source, size)
            load_before = os.getloadavg()
            for turn in range(runs):
                order = list(forwards) if turn % 2 == 0 else list(reversed(forwards))
                for label in order:
                    echo, source = forwards[label]
                    first[label].append(_first_byte(echo))
                    rate[label].append(size / (1 << 20) / _download(source, size))
            load_after = os.getloadavg()
        finally:
            for proc in reversed(procs):
                proc.send_signal(signal.SIGINT if proc is not procs[0] else signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            subprocess.run([*direct, "delete", "cell", name, "--timeout", "120"],
                           cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    ms = {k: statistics.median(v) * 1000 for k, v in first.items()}
    mibs = {k: statistics.median(v) for k, v in rate.items()}
    print(f"load average {load_before[0]:.1f} -> {load_after[0]:.1f}; {runs} turns each")
    print(f"first byte (new connection, 1 byte echoed), median: direct {ms['direct']:.1f} ms, "
          f"through the API {ms['api']:.1f} ms: {ms['api'] / ms['direct']:.2f}x")
    print(f"download of {size >> 20} MiB, median: direct {mibs['direct']:.0f} MiB/s, through "
          f"the API {mibs['api']:.0f} MiB/s: {mibs['api'] / mibs['direct']:.2f} of direct")
    return 0


def _forward(procs: list[subprocess.Popen[str]], argv: list[str],
             env: dict[str, str]) -> tuple[int, int]:
    """Start a forward of both services; its two local ports."""
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    assert proc.stdout is not None
    ports = []
    for _ in range(2):
        found = re.fullmatch(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+\n",
                             proc.stdout.readline())
        if found is None:
            raise SystemExit(f"{argv}: no forward ({proc.poll()})")
        ports.append(int(found.group(1)))
    return ports[0], ports[1]


def _first_byte(port: int) -> float:
    began = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"x")
        if sock.recv(1) != b"x":
            raise SystemExit(f"port {port}: the echo did not answer")
        return time.perf_counter() - began


def _download(port: int, size: int) -> float:
    began = time.perf_counter()
    got = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        while chunk := sock.recv(1 << 20):
            got += len(chunk)
    if got != size:
        raise SystemExit(f"port {port}: {got} bytes of {size}")
    return time.perf_counter() - began


if __name__ == "__main__":
    sys.exit(main())
