#!/usr/bin/env python3
"""Time to Ready of a container cell whose image is only in a local registry, vs. `docker pull`
+ `docker run -d` of the same kind of image, in the same run.

A registry (Debian's docker-registry) serves on a free 127.0.0.1 port from a temporary
directory. Before each timed run, untimed, two fresh images are built from
devcell/busybox:latest with one layer of random bytes each (`--layer-mib`, default 8), pushed,
and their local tags removed, so each subject really downloads a layer of the same size:

- devcell: `devcell apply -f cell.yaml` (inline, a fresh state dir per run; apply returns when
  the cell is Ready: volume, pull-image, create, start);
- docker: `docker pull REF && docker run -d --network none REF sleep 600`;
- also, to separate the pull from the rest of a cell's start, `devcell apply` of the same cell
  naming devcell/busybox:latest, already on the engine (no pull);
- and the pull alone: the container backend's `pull_image` (in this process: the SDK stream,
  layer progress, the record) vs `docker pull -q` of an image of the same size.

Each run is verified untimed (the cell Ready, the container running), then everything it made
is removed (the cell, `devcell image prune`, the container and the image). The subjects take
turns. Needs the engine, the base image and docker-registry (scripts/docker-setup).
Run by hand: .venv/bin/python bench/pull.py [--runs 7] [--layer-mib 8]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import _common as c

BASE = "devcell/busybox:latest"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_registry(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("docker-registry") or sys.exit("docker-registry is not installed "
                                                         "(scripts/docker-setup installs it)")
    port = free_port()
    config = work / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {work / 'storage'}\nhttp:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("docker-registry did not answer")


def sh(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


def push_fresh(work: Path, ref: str, mib: int) -> None:
    """An image of its own (a layer of random bytes) only the registry has."""
    context = work / "context"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(
        f"FROM {BASE}\nRUN dd if=/dev/urandom of=/blob bs=1048576 count={mib} 2>/dev/null\n")
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    subprocess.run(["docker", "build", "-q", "--network", "none", "-t", ref, str(context)],
                   env=env, check=True, capture_output=True)
    sh("docker", "push", "-q", ref)
    sh("docker", "rmi", ref)


def cell_yaml(path: Path, ref: str) -> None:
    path.write_text(f"""\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: pulled}}
spec:
  backend: container
  image: {ref}
  network: {{mode: none}}
  services:
    - name: idle
      command: [sleep, "600"]
""")


def timed_devcell(args: argparse.Namespace, work: Path, ref: str, n: int, *, local: bool = False) -> float:
    state = work / f"state-{n}{'-local' if local else ''}"
    manifest = work / f"cell-{n}{'-local' if local else ''}.yaml"
    cell_yaml(manifest, ref)
    env = dict(os.environ, DEVCELL_HOME=str(state))
    devcell = str(args.devcell)
    started = time.perf_counter()
    done = subprocess.run([devcell, "apply", "-f", str(manifest)], env=env, capture_output=True,
                          text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"devcell apply failed: {done.stderr}")
    shown = json.loads(sh(devcell, "--state-dir", str(state), "get", "cell", "pulled", "-o",
                          "json"))
    assert shown["status"]["phase"] == "Running", shown["status"]
    subprocess.run([devcell, "--state-dir", str(state), "delete", "cell", "pulled",
                    "--approve"], env=env, capture_output=True, check=True)
    subprocess.run([devcell, "--state-dir", str(state), "image", "prune"], env=env,
                   capture_output=True, check=True)
    return elapsed


def timed_docker(ref: str, n: int) -> float:
    name = f"bench-pull-{secrets.token_hex(4)}-{n}"
    started = time.perf_counter()
    done = subprocess.run(f"docker pull -q {ref} >/dev/null && docker run -d --network none "
                          f"--name {name} {ref} sleep 600 >/dev/null", shell=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit("docker pull + run failed")
    assert sh("docker", "inspect", "-f", "{{.State.Running}}", name).strip() == "true"
    sh("docker", "rm", "-f", name)
    sh("docker", "rmi", ref)
    return elapsed


def pull_in_process(work: Path, ref: str) -> float:
    from devcell.backends.base import CellRef
    from devcell.backends.container.backend import ContainerBackend

    backend = ContainerBackend(state_dir=work / "state-pull-alone")
    try:
        started = time.perf_counter()
        backend.pull_image(CellRef("cell_bench", "bench", {}), ref)
        elapsed = time.perf_counter() - started
    finally:
        backend.close()
    sh("docker", "rmi", ref)
    return elapsed


def pull_cli(ref: str) -> float:
    started = time.perf_counter()
    sh("docker", "pull", "-q", ref)
    elapsed = time.perf_counter() - started
    sh("docker", "rmi", ref)
    return elapsed


def main() -> int:
    p = c.base_parser(__doc__ or "", runs=7)
    p.add_argument("--layer-mib", type=int, default=8, help="MiB of the layer pulled (default 8)")
    args = p.parse_args()
    c.check_args(args)
    work = Path(tempfile.mkdtemp(prefix="devcell-bench-pull-"))
    registry, address = start_registry(work)
    samples: dict[str, list[float]] = {"devcell apply (pull + Ready)": [],
                                       "docker pull + docker run -d": [],
                                       "devcell apply, image local": [],
                                       "pull alone: backend.pull_image": [],
                                       "pull alone: docker pull -q": []}
    try:
        for n in range(args.warmup + args.runs):
            refs = [f"{address}/bench/{who}:{n}" for who in ("devcell", "docker", "sdk", "cli")]
            for ref in refs:
                push_fresh(work, ref, args.layer_mib)
            order = [0, 1, 2] if n % 2 == 0 else [2, 1, 0]  # take turns
            for i in order:
                t = (timed_devcell(args, work, refs[0], n) if i == 0
                     else timed_docker(refs[1], n) if i == 1
                     else timed_devcell(args, work, BASE, n, local=True))
                if n >= args.warmup:
                    samples[list(samples)[i]].append(t)
            for i, t in ((3, pull_in_process(work, refs[2])), (4, pull_cli(refs[3]))):
                if n >= args.warmup:
                    samples[list(samples)[i]].append(t)
    finally:
        registry.kill()
        registry.wait()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\nTime to Ready, image only in a local registry ({args.layer_mib} MiB layer), "
          f"{args.runs} runs each, medians:")
    for label, values in samples.items():
        print(f"  {label:32} median {statistics.median(values) * 1000:7.0f} ms   "
              f"min {min(values) * 1000:7.0f} ms   max {max(values) * 1000:7.0f} ms")
    ratio = statistics.median(samples["devcell apply (pull + Ready)"]) / statistics.median(
        samples["docker pull + docker run -d"])
    print(f"  median ratio devcell / docker: {ratio:.2f}")
    extra = statistics.median(samples["devcell apply (pull + Ready)"]) - statistics.median(
        samples["devcell apply, image local"])
    print(f"  the pull's share of devcell's median: {extra * 1000:.0f} ms")
    alone = statistics.median(samples["pull alone: backend.pull_image"]) / statistics.median(
        samples["pull alone: docker pull -q"])
    print(f"  pull alone, median ratio backend / docker pull: {alone:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
