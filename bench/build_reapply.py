#!/usr/bin/env python3
"""Re-applying a cell built from a Dockerfile whose context did not change, vs `docker build`
of the same context with a warm cache, side by side in one run.

The context holds 1,000 files (100 directories of 10, 1-4 KiB each) and a Dockerfile FROM
devcell/busybox:latest that copies them and runs a RUN step. Untimed first: `devcell apply`
builds it once, `docker build` once (warming its cache). Timed, taking turns: `devcell apply
-f cell.yaml` (whole process: it walks and hashes the context, finds the image its digest
names and builds nothing) and `docker build -q -t TAG CONTEXT` (whole process: sends the
context, every step a cache hit). Prints medians and the ratio; removes what it made.

Needs the engine and the base image (scripts/docker-setup). Run by hand:
.venv/bin/python bench/build_reapply.py [--runs 11]

`--digest-only [--files 1000,100000]` measures just what every reconcile of a built cell
pays, in one process, no engine: the context's digest computed in full
(container_build.digest: docker-py's .dockerignore matcher and a hash of every file, what
every resync paid before the cache) vs answered by the cache (build_digest_cache: a walk
with lstat), taking turns, medians and the ratio per context size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from devcell.backends.host.ids import state_hash  # noqa: E402

DEVCELL = REPO / ".venv" / "bin" / "devcell"
IMAGE = "devcell/busybox:latest"
PEER_TAG = "devcell-bench/build-reapply:peer"


def make_context(root: Path, files: int) -> None:
    for i in range(files):
        directory = root / f"pkg{i // 10:03d}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"mod{i % 10}.py").write_bytes(os.urandom(512).hex().encode() * (1 + i % 4))
    (root / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY . /src\nRUN ls -R /src | wc -l > /count\n")
    (root / ".dockerignore").write_text("*.tmp\n")


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{argv[0]} failed: {done.stderr[-2000:]}")
    return elapsed


def digest_only(sizes: list[int], runs: int) -> None:
    from devcell.backends.container import build as container_build
    from devcell.backends.container import build_digest_cache

    for files in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="devcell-bench-digest-"))
        try:
            make_context(tmp / "app", files)
            build = {"context": str(tmp / "app")}
            time.sleep(build_digest_cache.RACY_SECONDS + 0.5)  # older than the racy window
            cache = build_digest_cache.DigestCache(tmp / "state")
            cache.digest("bench", build, container_build.digest, cell_id="bench")  # warms it
            full, cached = [], []
            for _ in range(runs):
                start = time.perf_counter()
                expected = container_build.digest(build)
                full.append(time.perf_counter() - start)
                start = time.perf_counter()
                got = cache.digest("bench", build, container_build.digest, cell_id="bench")
                cached.append(time.perf_counter() - start)
                assert got == expected
            a, b = statistics.median(full), statistics.median(cached)
            print(f"{files} files, {runs} runs each: full digest median {a:.3f} s, "
                  f"cached (lstat walk) median {b:.3f} s, ratio full/cached {a / b:.1f}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=11)
    p.add_argument("--files", default="1000")
    p.add_argument("--digest-only", action="store_true")
    raw = p.parse_args()
    if raw.digest_only:
        digest_only([int(n) for n in raw.files.split(",")], raw.runs)
        return
    args = argparse.Namespace(runs=raw.runs, files=int(raw.files))
    tmp = Path(tempfile.mkdtemp(prefix="devcell-bench-build-"))
    # Compiled modules cached as in a normal install (an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would recompile devcell/ in every process), as bench/_common.
    env = dict(os.environ, DEVCELL_HOME=str(tmp / "state"),
               PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    project = tmp / "project"
    make_context(project / "app", args.files)
    manifest = project / "cell.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                        "metadata: {name: bench-built}\nspec:\n  backend: container\n"
                        "  build: {context: app}\n  services:\n"
                        "    - {name: idle, command: [sleep, '3600']}\n")
    devcell = [str(DEVCELL), "apply", "-f", str(manifest)]
    peer = ["docker", "build", "-q", "-t", PEER_TAG, str(project / "app")]
    try:
        first = timed(devcell, env)
        warm = timed(peer, env)
        print(f"first apply (builds): {first:.2f} s; first docker build: {warm:.2f} s")
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(timed(devcell, env))
            theirs.append(timed(peer, env))
        described = subprocess.run([str(DEVCELL), "describe", "cell", "bench-built"], env=env,
                                   capture_output=True, text=True).stdout
        builds = sum(1 for line in described.splitlines()
                     if "build-image" in line and "Succeeded" in line and ". build-image" in line)
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"context: {args.files} files; {args.runs} runs each, taking turns")
        print(f"devcell apply (unchanged context, digest check): median {a * 1000:.0f} ms")
        print(f"docker build (warm cache):                       median {b * 1000:.0f} ms")
        print(f"ratio devcell/docker: {a / b:.2f}; engine builds by devcell in all: {builds}")
    finally:
        subprocess.run([str(DEVCELL), "delete", "cell", "bench-built", "--approve"], env=env,
                       capture_output=True)
        subprocess.run(["docker", "rmi", "-f", PEER_TAG], capture_output=True)
        owner = state_hash(tmp / "state")
        listed = subprocess.run(["docker", "images", "-q", "--filter",
                                 f"label=dev.devcell.state-dir={owner}"],
                                capture_output=True, text=True).stdout.split()
        if listed:
            subprocess.run(["docker", "rmi", "-f", *listed], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
