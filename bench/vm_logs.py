"""`devcell logs` of a vm cell (read through its guest agent) beside a container cell's (host
files) and beside reading the same bytes with `devcell exec` (the way before vm logs).

One state directory, one vm cell and one container cell of the same image, each with a
service log of --mib MiB of 80-byte stamped lines. Timed as whole processes, output to
/dev/null, in turns (load on the host hits all alike), medians of --runs:

  container    devcell logs box-c svc            (its last 8 MiB, host files)
  vm           devcell logs box-v svc            (its last 8 MiB, guest-file-read 1 MiB a time)
  vm-exec      devcell exec box-v -- tail -c 8388608 /var/log/devcell/svc.log  (the peer)
  container/vm --tail 100 likewise (reading backwards from the end)

    .venv/bin/python bench/vm_logs.py --runs 5      # ~3-5 min on a loaded 2-CPU host (TCG)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVCELL = str(REPO / ".venv" / "bin" / "devcell")
IMAGE = "devcell/busybox:latest"
SERVICE = ["sh", "-c", "echo up; exec sleep 1000000"]


def manifest(name: str, backend: str) -> str:
    return json.dumps({"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
                       "metadata": {"name": name},
                       "spec": {"backend": backend, "image": IMAGE,
                                "network": {"mode": "none"},
                                "resources": {"memory": "128Mi"},
                                "services": [{"name": "svc", "command": SERVICE}]}})


def devcell(env: dict[str, str], *args: str, out: int | None = subprocess.DEVNULL) -> float:
    began = time.perf_counter()
    done = subprocess.run([DEVCELL, *args], env=env, stdout=out, stderr=subprocess.PIPE,
                          timeout=900)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"devcell {' '.join(args)} failed: {done.stderr.decode()[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mib", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-vmlogs-") as tmp:
        env = dict(os.environ, DEVCELL_HOME=str(Path(tmp) / "state"))
        devcell(env, "image", "build-base")
        for name, backend in (("box-c", "container"), ("box-v", "vm")):
            path = Path(tmp) / f"{name}.json"
            path.write_text(manifest(name, backend))
            devcell(env, "apply", "-f", str(path))
        lines = (args.mib << 20) // 80
        pad = "x" * 51
        fill = ("awk 'BEGIN { for (i = 0; i < " + str(lines) + "; i++) printf "
                "\"2026-01-02T03:04:05Z line %07d %s\\n\", i, \"" + pad + "\" }' "
                ">> /var/log/devcell/svc.log")
        try:
            for name in ("box-c", "box-v"):
                devcell(env, "exec", name, "--", "sh", "-c", fill)
            cases = {
                "container": ["logs", "box-c", "svc"],
                "vm": ["logs", "box-v", "svc"],
                "vm-exec": ["exec", "box-v", "--", "tail", "-c", "8388608",
                            "/var/log/devcell/svc.log"],
                "container --tail 100": ["logs", "box-c", "svc", "--tail", "100"],
                "vm --tail 100": ["logs", "box-v", "svc", "--tail", "100"],
            }
            times: dict[str, list[float]] = {case: [] for case in cases}
            for run in range(args.runs + 1):  # the first round warms caches: not counted
                for case, argv in cases.items():
                    took = devcell(env, *argv)
                    if run:
                        times[case].append(took)
            median = {case: statistics.median(t) for case, t in times.items()}
            print(f"{args.mib} MiB logs, medians of {args.runs} runs (whole processes):")
            for case, value in median.items():
                print(f"  {case:<22} {value:7.2f} s")
            print(f"  vm / container         {median['vm'] / median['container']:7.1f}x")
            print(f"  vm / vm-exec           {median['vm'] / median['vm-exec']:7.2f}x")
            print(f"  vm / container, tail   "
                  f"{median['vm --tail 100'] / median['container --tail 100']:7.1f}x")
        finally:
            devcell(env, "delete", "cell", "box-c", "box-v", "--approve")


if __name__ == "__main__":
    main()
