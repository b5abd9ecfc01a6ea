"""`devcell exec CELL -- true` on a running container cell beside `docker exec CONTAINER true` on
the same container, and a vm cell's `devcell exec` beside the container cell's (issue 26).

One state directory, one container cell (and, when QEMU is there and --no-vm is not given, one
vm cell) of the same image. Whole processes, output to /dev/null, timed in turns (load on the
host hits every subject alike), medians of --runs, ratios of the medians:

  devcell      devcell exec box-c -- true          (the fast path: a running container cell)
  docker       docker exec CONTAINER true          (the same container: the peer)
  python       python -c pass                      (the interpreter alone, for scale)
  vm           devcell exec box-v -- true          (with QEMU)
  other        OTHER exec box-o -- true            (--compare-devcell OTHER: another build,
                                                   its own cell in its own state directory,
                                                   as its schema may be older)

Target: devcell / docker <= 1.2; vm / devcell reported.

    .venv/bin/python bench/exec.py --runs 21                       # ~1 min (+ a vm boot)
    .venv/bin/python bench/exec.py --runs 21 --compare-devcell /work/main/.venv/bin/devcell
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEVCELL = str(REPO / ".venv" / "bin" / "devcell")
PYTHON = str(REPO / ".venv" / "bin" / "python")
IMAGE = "devcell/busybox:latest"


def manifest(name: str, backend: str) -> str:
    return json.dumps({"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
                       "metadata": {"name": name},
                       "spec": {"backend": backend, "image": IMAGE, "network": {"mode": "none"},
                                "resources": {"memory": "128Mi"}}})


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The process's wall time and its CPU time (user + system: what load does not inflate
    as much; the engine's own work is in neither's CPU)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=600)
    took = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def container_of(state: Path, env: dict[str, str]) -> str:
    """The id of the container cell's container, by DevCell's labels."""
    shown = subprocess.run([DEVCELL, "get", "cell", "box-c", "-o", "json"], env=env,
                           capture_output=True, text=True, check=True)
    cell_id = json.loads(shown.stdout)["metadata"]["id"]
    found = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter",
                            f"label=dev.devcell.cell-id={cell_id}", "--filter",
                            f"label=dev.devcell.state-path={state.resolve()}"],
                           capture_output=True, text=True, check=True).stdout.split()
    if len(found) != 1:
        raise SystemExit(f"expected one running container for box-c, found {found}")
    return found[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--no-vm", action="store_true", help="leave the vm cell out")
    parser.add_argument("--compare-devcell", metavar="OTHER",
                        help="another build's devcell, timed on the same cell in the same turns")
    args = parser.parse_args()
    if not 3 <= args.runs <= 200:
        sys.exit("--runs must be between 3 and 200")
    vm = not args.no_vm and shutil.which("qemu-system-x86_64") is not None
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-exec-") as tmp:
        state = Path(tmp) / "state"
        env = dict(os.environ, DEVCELL_HOME=str(state),
                   PYTHONPYCACHEPREFIX=str(Path(tmp) / "pycache"))
        # Compiled modules cached as in a normal install: without it an editable install under
        # PYTHONDONTWRITEBYTECODE=1 recompiles every devcell module in every process.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        other_env = dict(env, DEVCELL_HOME=str(Path(tmp) / "other-state"))
        cells = [("box-c", "container", DEVCELL, env)] + (
            [("box-v", "vm", DEVCELL, env)] if vm else []) + (
            [("box-o", "container", args.compare_devcell, other_env)]
            if args.compare_devcell else [])
        try:
            for name, backend, program, cell_env in cells:
                path = Path(tmp) / f"{name}.json"
                path.write_text(manifest(name, backend))
                run([program, "apply", "-f", str(path)], cell_env)
            container = container_of(state, env)
            subjects = {
                "devcell": [DEVCELL, "exec", "box-c", "--", "true"],
                "docker": ["docker", "exec", container, "true"],
                "python": [PYTHON, "-c", "pass"],
            }
            if vm:
                subjects["vm"] = [DEVCELL, "exec", "box-v", "--", "true"]
            if args.compare_devcell:
                subjects["other"] = [args.compare_devcell, "exec", "box-o", "--", "true"]
            envs = {name: other_env if name == "other" else env for name in subjects}
            for name, argv in subjects.items():  # warm: bytecode, page cache, the engine
                run(argv, envs[name])
            times: dict[str, list[float]] = {name: [] for name in subjects}
            cpu: dict[str, list[float]] = {name: [] for name in subjects}
            for _ in range(args.runs):
                for name, argv in subjects.items():
                    took, used = run(argv, envs[name])
                    times[name].append(took)
                    cpu[name].append(used)
        finally:
            for name, _, program, cell_env in cells:
                subprocess.run([program, "delete", "cell", name, "--approve"], env=cell_env,
                               capture_output=True, timeout=600, check=False)
    load_after = os.getloadavg()
    medians = {name: statistics.median(found) * 1000 for name, found in times.items()}
    print(f"runs {args.runs}, load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    for name, argv in subjects.items():
        shown = " ".join(argv[:1] and [Path(argv[0]).name, *argv[1:]])
        print(f"{name:8} median {medians[name]:7.1f} ms   "
              f"p10-p90 {_pct(times[name], 10):6.1f}-{_pct(times[name], 90):6.1f} ms   "
              f"CPU {statistics.median(cpu[name]) * 1000:5.1f} ms   {shown}")
    print(f"devcell / docker exec: {medians['devcell'] / medians['docker']:.2f} (target <= 1.2)")
    if vm:
        print(f"vm / container devcell exec: {medians['vm'] / medians['devcell']:.2f}")
    if args.compare_devcell:
        print(f"other / docker exec: {medians['other'] / medians['docker']:.2f}; "
              f"devcell / other: {medians['devcell'] / medians['other']:.2f}")


def _pct(samples: list[float], pct: int) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, len(ordered) * pct // 100)] * 1000


if __name__ == "__main__":
    main()
