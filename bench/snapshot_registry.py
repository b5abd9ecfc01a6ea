#!/usr/bin/env python3
"""Push and pull of a 1 GiB snapshot of 10,000 files through a local registry (`devcell
snapshot push` / `snapshot pull`, zstd (the default) and uncompressed layers) vs. `docker push` / `docker
pull` of an image whose one layer is the same tree (`docker import` of the checkpoint's tar),
and vs. `snapshot export -o FILE` + `snapshot import FILE` (no registry).

One container cell (network none) is filled once on the host (as bench/checkpoint.py fills it)
and checkpointed once. Registries are Debian's docker-registry on 127.0.0.1 (the tests' one):
every push goes to a registry restarted on empty storage (so no blob is ever "already there"),
every pull comes from a second registry that holds both artifacts and the image. Each pulled
snapshot is verified (Ready, 10,000 files, the tree's change signature equal to the source
checkpoint's) and deleted, untimed; each pulled image is removed, untimed. Every timed command
is a whole process.

Needs the engine, the base image (scripts/docker-setup) and docker-registry; ~6 GiB free disk.
Run by hand: .venv/bin/python bench/snapshot_registry.py [--runs 5]
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import _common as c
from checkpoint import make_world

from devcell.backends.host import treecopy

BINARY = "/usr/bin/docker-registry"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """A docker-registry on a fixed 127.0.0.1 port, restartable on empty storage."""

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, _port()
        self.address = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *, empty: bool) -> None:
        if empty:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.yml"
        config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                          f"    rootdirectory: {self.root / 'storage'}\nhttp:\n"
                          f"  addr: {self.address}\n")
        self.process = subprocess.Popen([BINARY, "serve", str(config)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2).close()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise SystemExit("docker-registry did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


@contextmanager
def registries(work: Path) -> Iterator[tuple[Registry, Registry]]:
    push, pull = Registry(work / "push-registry"), Registry(work / "pull-registry")
    try:
        pull.start(empty=True)
        yield push, pull
    finally:
        push.stop()
        pull.stop()


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    c.add_workspace_options(p, mib=1024)
    p.add_argument("--skip-push", action="store_true",
                   help="time the pulls only (the pushes take most of the run)")
    args = p.parse_args()
    c.check_args(args)
    c.require_free_disk(args.mib, 7)
    if not Path(BINARY).exists():
        raise SystemExit(f"{BINARY} is not installed (apt-get install docker-registry)")

    with c.workdir(args.keep) as work, registries(work) as (push_reg, pull_reg):
        world = make_world(c.builds(args)[0], work, "big", args.files, args.mib)
        source, target = world.state, work / "target"
        env, target_env = world.env, c.env_for(target)
        world.dc("snapshot", "create", "big", "--name", "base")
        (checkpoint,) = source.glob("images/checkpoints/snap_*")
        signature = treecopy.signature(checkpoint / "workspace")
        print(f"checkpoint: {args.files} files, {args.mib} MiB in {checkpoint}")
        problems: list[str] = []
        image_push = f"{push_reg.address}/bench/tree:v1"
        image_pull = f"{pull_reg.address}/bench/tree:v1"
        tar = f"tar --format=posix -C {shlex.quote(str(checkpoint))} -cf - workspace"
        made_images = [image_push, image_pull]
        for image in made_images:
            c.run_ok(["bash", "-o", "pipefail", "-c",
                      f"{tar} | docker import - {shlex.quote(image)}"], env)
        # the pull registry holds both artifacts and the image
        c.run_ok([args.devcell, "snapshot", "push", "base", f"{pull_reg.address}/bench/snap:zst"],
                 env)
        c.run_ok([args.devcell, "snapshot", "push", "base",
                  f"{pull_reg.address}/bench/snap:raw", "--compression", "none"], env)
        c.run_ok(["docker", "push", image_pull], env)
        c.run_ok(["docker", "rmi", image_pull], env)
        archive = work / "base.tar"

        def fresh_registry() -> tuple[dict[str, str], Callable[[], None]]:
            push_reg.stop()
            push_reg.start(empty=True)
            return env, lambda: None

        def pulled_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            def done() -> None:
                out = c.run_ok([args.devcell, "get", "snapshots", "moved", "-o", "json"],
                               target_env, capture=True).stdout
                status = json.loads(out)["status"]
                (made,) = target.glob("images/checkpoints/snap_*")
                if (status.get("phase") != "Ready"
                        or status.get("checkpoint", {}).get("files") != args.files
                        or treecopy.signature(made / "workspace") != signature):
                    problems.append(f"pull/import: {status}")
                c.run_ok([args.devcell, "delete", "snapshot", "moved"], target_env)
            return target_env, done

        def image_gone() -> tuple[dict[str, str], Callable[[], None]]:
            return env, lambda: c.run_ok(["docker", "rmi", image_pull], env)

        push_zst, push_raw = "devcell snapshot push (zstd)", "devcell snapshot push (none)"
        docker_push = "docker push (image of the same tree)"
        samples = {} if args.skip_push else c.time_interleaved([
            c.Subject(push_zst, [args.devcell, "snapshot", "push", "base",
                                f"{push_reg.address}/bench/snap:v1"], fresh_registry),
            c.Subject(push_raw, [args.devcell, "snapshot", "push", "base",
                                 f"{push_reg.address}/bench/snap:v1", "--compression", "none"],
                      fresh_registry),
            c.Subject(docker_push, ["docker", "push", image_push], fresh_registry),
            c.Subject("devcell snapshot export -o FILE",
                      [args.devcell, "snapshot", "export", "base", "-o", str(archive)],
                      c.fixed(env)),
        ], args.runs, args.warmup)
        if samples:
            c.print_timings(f"push: {args.mib} MiB / {args.files} files, {args.runs} runs each "
                            f"({args.warmup} warm-up)", samples, baseline=docker_push)

        if args.skip_push:  # the import's archive, untimed
            c.run_ok([args.devcell, "snapshot", "export", "base", "-o", str(archive)], env)
        pull_zst, pull_raw = "devcell snapshot pull (zstd)", "devcell snapshot pull (none)"
        docker_pull = "docker pull (image of the same tree)"
        pulls = c.time_interleaved([
            c.Subject(pull_zst, [args.devcell, "snapshot", "pull",
                                f"{pull_reg.address}/bench/snap:zst", "--name", "moved"],
                      pulled_fresh),
            c.Subject(pull_raw, [args.devcell, "snapshot", "pull",
                                 f"{pull_reg.address}/bench/snap:raw", "--name", "moved"],
                      pulled_fresh),
            c.Subject(docker_pull, ["docker", "pull", image_pull], image_gone),
            c.Subject("devcell snapshot import FILE",
                      [args.devcell, "snapshot", "import", str(archive), "--name", "moved"],
                      pulled_fresh),
        ], args.runs, args.warmup)
        c.print_timings(f"pull: {args.mib} MiB / {args.files} files, {args.runs} runs each "
                        f"({args.warmup} warm-up)", pulls, baseline=docker_pull)
        for mine, theirs, what in ((push_zst, docker_push, "push"), (pull_zst, docker_pull, "pull")):
            table = samples if what == "push" else pulls
            if not table:
                continue
            ratio = statistics.median(table[mine]) / statistics.median(table[theirs])
            print(f"{mine} / {theirs} = {ratio:.2f}")
        print(f"\nverification: {'PASS' if not problems else 'MISS'}")
        for problem in problems:
            print(f"  problem: {problem}")
        c.run(["docker", "rmi", image_push], env)
        if c.run([args.devcell, "delete", "cell", "big", "--approve"], env).returncode != 0:
            print("could not delete the cell big; remove its container by hand")
        return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
