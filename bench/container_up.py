#!/usr/bin/env python3
"""20 cells up on the container backend vs. the same 20 containers started with `docker run -d`
in parallel from a shell, and with Debian's docker-compose (an equivalent compose file).

Every subject starts 20 equivalent containers from devcell/busybox:latest: network none, an
init process, 0.5 CPU, 64 MiB, pids limit 4096, every capability dropped but DevCell's eight,
no-new-privileges, a bind-mounted workspace directory, and the same service loop (DevCell runs
it under its supervisor; the others run it as the container's command). Timed: the whole
process, from start until it exits with all 20 running (each run is verified, untimed; then
everything it made is removed, by its labels or project name).

- `devcell apply -f DIR`: inline convergence (no daemon), a fresh state dir per run.
- GitOps: a daemon (`devcell controller run --manifests W --workers 8`) already runs on a fresh
  state dir; timed: `cp DIR/*.yaml W/ && devcell apply -f W` (the daemon sees the files and
  reconciles them in parallel; apply records the same desired state and waits until Ready).
- `sh -c 'docker run -d ... & (x20); wait'` and `docker-compose -p P up -d`.

Needs the engine and the base image (scripts/docker-setup) and docker-compose
(`apt-get install -y docker-compose`). Run by hand: .venv/bin/python bench/container_up.py
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _common as c

IMAGE = "devcell/busybox:latest"
SERVICE = "while true; do date >> /workspace/journal.txt; sleep 5; done"
CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
        "NET_BIND_SERVICE")
LABEL = "dev.devcell.bench"


def cell_yaml(name: str) -> str:
    return f"""\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}}}
spec:
  backend: container
  image: {IMAGE}
  network: {{mode: none}}
  workspace: {{mountPath: /workspace}}
  resources: {{cpus: 0.5, memory: 64Mi}}
  services:
    - name: journal
      command: [sh, -c, {json.dumps(SERVICE)}]
"""


def docker_run_script(run_id: str, workspaces: Path, cells: int) -> str:
    caps = " ".join(f"--cap-add {cap}" for cap in CAPS)
    lines = []
    for i in range(cells):
        ws = workspaces / f"w{i}"
        lines.append(
            f"docker run -d --name bench-{run_id}-{i} --label {LABEL}={run_id} --network none "
            f"--init --cpus 0.5 --memory 64m --pids-limit 4096 --cap-drop ALL {caps} "
            f"--security-opt no-new-privileges --mount type=bind,source={ws},target=/workspace "
            f"-w /workspace {IMAGE} sh -c {shlex.quote(SERVICE)} >/dev/null &")
    return "\n".join(lines) + "\nwait\n"


def compose_yaml(run_id: str, workspaces: Path, cells: int) -> str:
    out = ['version: "2.4"', "services:"]
    for i in range(cells):
        out += [f"  c{i}:", f"    image: {IMAGE}", "    network_mode: none", "    init: true",
                "    cpus: 0.5", "    mem_limit: 64m", "    pids_limit: 4096",
                "    cap_drop: [ALL]", f"    cap_add: [{', '.join(CAPS)}]",
                "    security_opt: [no-new-privileges]", "    working_dir: /workspace",
                f"    labels: {{{LABEL}: {run_id}}}",
                f"    volumes: [\"{workspaces / f'w{i}'}:/workspace\"]",
                f"    command: [sh, -c, {json.dumps(SERVICE)}]"]
    return "\n".join(out) + "\n"


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True,
                          check=False).stdout


def running_with(label: str) -> int:
    return len(docker("ps", "-q", "--filter", f"label={label}").split())


def remove_with(label: str) -> None:
    ids = docker("ps", "-aq", "--filter", f"label={label}").split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def state_label(state: Path) -> str:
    return f"dev.devcell.state-path={state.resolve()}"


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    p.add_argument("--cells", type=int, default=20, help="containers per run (default 20)")
    p.add_argument("--workers", type=int, default=8, help="daemon workers (default 8)")
    p.add_argument("--no-daemon", action="store_true", help="skip the daemon subject")
    args = p.parse_args()
    c.check_args(args)
    if not 1 <= args.cells <= 100:
        sys.exit("--cells must be between 1 and 100")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        sys.exit(f"{IMAGE} is missing or the engine is down: run scripts/docker-setup first")
    compose = shutil.which("docker-compose")
    if compose is None:
        sys.exit("docker-compose is not installed: apt-get install -y docker-compose")

    with c.workdir(args.keep) as work:
        manifests = work / "manifests"
        manifests.mkdir()
        for i in range(args.cells):
            (manifests / f"b{i:02d}.yaml").write_text(cell_yaml(f"b{i:02d}"))
        watched = work / "watched"
        counter = iter(range(10_000))
        problems: list[str] = []
        checked = {"n": 0}

        def verify(what: str, running: int) -> None:
            checked["n"] += 1
            if running != args.cells:
                problems.append(f"{what}: {running}/{args.cells} containers running")

        def devcell_fresh(b: c.Build) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
            """Inline apply by build `b`, on a state dir of its own per run (two builds never
            share one: their schemas may differ)."""
            def prepare() -> tuple[dict[str, str], Callable[[], None]]:
                state = work / f"state-{next(counter)}"
                label = state_label(state)

                def done() -> None:
                    verify(f"devcell apply{b.tag}", running_with(label))
                    remove_with(label)
                    shutil.rmtree(state, ignore_errors=True)
                return c.env_for(state), done
            return prepare

        def devcell_daemon(b: c.Build) -> Callable[[], tuple[dict[str, str], Callable[[], None]]]:
            """A daemon of build `b` on a fresh state dir, started (untimed) before each run."""
            def prepare() -> tuple[dict[str, str], Callable[[], None]]:
                state = work / f"state-{next(counter)}"
                env = c.env_for(state)
                shutil.rmtree(watched, ignore_errors=True)
                watched.mkdir()
                daemon = subprocess.Popen(
                    [b.devcell, "controller", "run", "--manifests", str(watched), "--workers",
                     str(args.workers)], env=env, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                deadline = time.monotonic() + 30
                while "yes" not in c.run([b.devcell, "get", "controllers"], env,
                                         capture=True).stdout.decode():
                    if time.monotonic() > deadline or daemon.poll() is not None:
                        sys.exit(f"the daemon{b.tag} did not start")
                    time.sleep(0.1)
                label = state_label(state)

                def done() -> None:
                    verify(f"devcell apply (daemon){b.tag}", running_with(label))
                    daemon.send_signal(signal.SIGTERM)
                    daemon.wait(60)
                    remove_with(label)
                    shutil.rmtree(state, ignore_errors=True)
                return env, done
            return prepare

        def shell_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            run_id = secrets.token_hex(4)
            workspaces = work / f"ws-{run_id}"
            for i in range(args.cells):
                (workspaces / f"w{i}").mkdir(parents=True)
            script = work / "run.sh"
            script.write_text(docker_run_script(run_id, workspaces, args.cells))

            def done() -> None:
                verify("docker run", running_with(f"{LABEL}={run_id}"))
                remove_with(f"{LABEL}={run_id}")
                shutil.rmtree(workspaces, ignore_errors=True)
            return c.env_for(work / "unused"), done

        def compose_fresh() -> tuple[dict[str, str], Callable[[], None]]:
            run_id = secrets.token_hex(4)
            workspaces = work / f"ws-{run_id}"
            for i in range(args.cells):
                (workspaces / f"w{i}").mkdir(parents=True)
            (work / "docker-compose.yml").write_text(compose_yaml(run_id, workspaces, args.cells))
            env = c.env_for(work / "unused")
            env["COMPOSE_PROJECT_NAME"] = "devcellbench"

            def done() -> None:
                verify("docker-compose", running_with(f"{LABEL}={run_id}"))
                remove_with(f"{LABEL}={run_id}")
                shutil.rmtree(workspaces, ignore_errors=True)
            return env, done

        builds = c.builds(args)

        def label_dc(b: c.Build) -> str:
            return f"devcell{b.tag} apply -f DIR ({args.cells} container cells, inline)"

        def label_dd(b: c.Build) -> str:
            return f"GitOps{b.tag}: cp into daemon dir + apply ({args.workers} workers)"

        label_sh = f"sh: {args.cells} x docker run -d & ... wait"
        label_co = f"docker-compose up -d ({args.cells} services)"
        subjects = [c.Subject(label_dc(b), [b.devcell, "apply", "-f", str(manifests)],
                              devcell_fresh(b)) for b in builds]
        if not args.no_daemon:
            for b in builds:
                gitops = (f"cp {shlex.quote(str(manifests))}/*.yaml "
                          f"{shlex.quote(str(watched))}/ && "
                          f"{shlex.quote(b.devcell)} apply -f {shlex.quote(str(watched))}")
                subjects.append(c.Subject(label_dd(b), ["sh", "-c", gitops], devcell_daemon(b)))
        subjects += [
            c.Subject(label_sh, ["sh", str(work / "run.sh")], shell_fresh),
            c.Subject(label_co, [compose, "-f", str(work / "docker-compose.yml"), "up", "-d"],
                      compose_fresh),
        ]
        samples = c.time_interleaved(subjects, args.runs, args.warmup,
                                     alternate=len(builds) > 1)
        c.print_timings(f"{args.cells} containers up, {args.runs} runs each (interleaved, "
                        f"{args.warmup} warm-up)", samples, baseline=label_sh)
        c.print_build_ratios(samples, builds, label_dc)
        if not args.no_daemon:
            c.print_build_ratios(samples, builds, label_dd)
        shell = statistics.median(samples[label_sh])
        comp = statistics.median(samples[label_co])
        for label in [s.label for s in subjects if s.label not in (label_sh, label_co)]:
            med = statistics.median(samples[label])
            print(f"{label}: {med / shell:.2f} x parallel docker run (target <= 1.2: "
                  f"{c.verdict(med / shell <= 1.2)}), {med / comp:.2f} x docker-compose "
                  f"(target <= 1.0: {c.verdict(med / comp <= 1.0)})")
        total = checked["n"]
        print(f"\nverification of every run: {total - len(problems)}/{total} runs had all "
              f"{args.cells} containers running {c.verdict(not problems)}")
        for problem in problems:
            print(f"  problem: {problem}")
        return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
