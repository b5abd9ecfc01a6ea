#!/usr/bin/env python3
"""A dev container up and usable, DevCell against the reference devcontainer CLI: the same
devcontainer.json (and Dockerfile) brought up by each, through to its first exec.

Configurations (`--cases`, all offline: FROM the local devcell/busybox image, no network in
any RUN step):

- `image`: `{"image": "devcell/busybox:latest"}`, nothing built;
- `dockerfile`: a Dockerfile of one RUN step;
- `remoteuser`: a Dockerfile adding a user, and `"remoteUser": "dev"`;
- `project`: a project's Dockerfile: ARG, ENV, WORKDIR, a user, COPY of a few files past a
  .dockerignore, five RUN layers, and `"remoteUser": "dev"`.

Each timed run makes a fresh cell / container and ends with its first command in it:

- DevCell: `devcell apply -f CELL.yaml` (inline, no daemon), then `devcell exec NAME -- true`.
  The manifest is what `devcell import devcontainer` writes for that devcontainer.json (done
  once per case, untimed; `spec.user` added for `remoteUser`, which import names as not
  converted), renamed per run. One state directory per build for the whole bench (made by an
  untimed warm-up), a new cell name each run; after each run, untimed, the cell is checked
  (its user, the Dockerfile's marker file) and deleted (`devcell delete cell`, which removes
  the image DevCell built for it).
- devcontainer CLI: `devcontainer up --workspace-folder P --id-label dev.devcell.bench=RUN`,
  then `devcontainer exec --workspace-folder P --id-label ... true`; checked the same way,
  then its container removed (by that label). Its images (`vsc-<folder>-<hash>[-uid]`, the
  folders being this run's own) are removed at the end.

Build cache: by default every step of each Dockerfile is in the engine's build cache (a
developer bringing their environment up again): the bench builds each case once as
`devcell-bench-anchor-TOKEN/CASE` first, so the layers survive the removal of each run's
images, for both tools alike. `--cold` puts a step unique to each run first in its Dockerfile
instead, so nothing is cached and every RUN step runs, for both.

The builder: the devcontainer CLI uses `docker buildx build` (BuildKit) when `docker buildx
version` works and the classic builder (`docker build`) otherwise; the bench says which it
found. DevCell builds through the engine's API (the classic builder).

Timed: each command as a whole process; a run's figure is the sum of its two. Subjects take
turns in every round (the order reversed every other round). Also printed: the median of
DevCell's recorded steps (create-volume, build-image, create, start...) per case.

Needs the engine and the base image (scripts/docker-setup), and node + npm for the CLI:
`--devcontainer PATH`, else `devcontainer` on PATH, else it is installed once with
`npm install --prefix ~/.cache/devcell-bench/devcontainer-cli @devcontainers/cli`.
Run by hand: .venv/bin/python bench/devcontainer_up.py --runs 5   (~4 min)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sqlite3
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import _common as c
import yaml

IMAGE = "devcell/busybox:latest"
LABEL = "dev.devcell.bench"
CLI_PREFIX = Path.home() / ".cache" / "devcell-bench" / "devcontainer-cli"
CLI_PACKAGE = "@devcontainers/cli"
MARKER = "/etc/devcell-bench-marker"
USER_LINE = ("RUN echo 'dev:x:1000:1000:dev:/home/dev:/bin/sh' >> /etc/passwd "
             "&& echo 'dev:x:1000:' >> /etc/group && mkdir -p /home/dev "
             "&& chown 1000:1000 /home/dev")


@dataclass(frozen=True)
class Case:
    name: str
    dockerfile: str | None  # None: image only
    user: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # more files of the build context

    def devcontainer_json(self) -> dict[str, object]:
        out: dict[str, object] = ({"image": IMAGE} if self.dockerfile is None
                                  else {"build": {"dockerfile": "Dockerfile"}})
        if self.user:
            out["remoteUser"] = self.user
        return out


PROJECT_DOCKERFILE = f"""\
FROM {IMAGE}
ARG APP_HOME=/opt/app
ENV APP_HOME=$APP_HOME LANG=C.UTF-8 PATH=/opt/app/bin:$PATH
{USER_LINE}
RUN mkdir -p $APP_HOME/bin $APP_HOME/etc /var/cache/app && chmod 0755 $APP_HOME
WORKDIR $APP_HOME
COPY requirements.txt etc/
COPY bin/ bin/
RUN chmod 0755 bin/* && ln -s $APP_HOME/bin/app /usr/bin/app
RUN for i in $(seq 1 200); do echo "package-$i==1.$i" ; done > etc/lock.txt \\
    && wc -l etc/lock.txt > /var/cache/app/lock.count
RUN echo project > {MARKER} && chown -R dev:dev $APP_HOME
"""

CASES = {
    "image": Case("image", None),
    "dockerfile": Case("dockerfile", f"FROM {IMAGE}\nRUN echo dockerfile > {MARKER}\n"),
    "remoteuser": Case("remoteuser", f"FROM {IMAGE}\n{USER_LINE}\n"
                       f"RUN echo remoteuser > {MARKER}\n", user="dev"),
    "project": Case("project", PROJECT_DOCKERFILE, user="dev", files={
        "requirements.txt": "".join(f"lib{i}==0.{i}\n" for i in range(40)),
        "bin/app": "#!/bin/sh\necho app \"$@\"\n",
        "bin/app-migrate": "#!/bin/sh\necho migrate\n",
        ".dockerignore": "*.log\nnode_modules\n",
        "debug.log": "not sent\n" * 100,
    }),
}


# -- the devcontainer CLI ----------------------------------------------------------------------

def find_cli(given: str | None) -> str:
    """The devcontainer CLI: --devcontainer, else on PATH, else the bench's own prefix
    (installed there from the npm registry the first time)."""
    if given:
        if not os.access(given, os.X_OK):
            sys.exit(f"{given} (--devcontainer) is not an executable")
        return given
    local = CLI_PREFIX / "node_modules" / ".bin" / "devcontainer"
    if os.access(local, os.X_OK):
        return str(local)
    on_path = shutil.which("devcontainer")
    if on_path:
        return on_path
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        sys.exit("the devcontainer CLI is missing and node/npm are not installed: install "
                 f"them (apt-get install -y nodejs npm), then `npm install --prefix {CLI_PREFIX} "
                 f"{CLI_PACKAGE}`, or pass --devcontainer PATH")
    print(f"installing {CLI_PACKAGE} into {CLI_PREFIX} (npm) ...", flush=True)
    CLI_PREFIX.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([npm, "install", "--prefix", str(CLI_PREFIX), "--no-audit",
                           "--no-fund", CLI_PACKAGE], capture_output=True, text=True,
                          check=False, timeout=600)
    if proc.returncode != 0 or not os.access(local, os.X_OK):
        sys.exit(f"npm install {CLI_PACKAGE} failed:\n{proc.stderr[-2000:]}")
    return str(local)


def builder_of_cli() -> str:
    ok = subprocess.run(["docker", "buildx", "version"], capture_output=True,
                         check=False).returncode == 0
    return ("docker buildx build (BuildKit)" if ok else
            "docker build, the classic builder (`docker buildx version` fails here)")


# -- docker helpers ----------------------------------------------------------------------------

def docker(*args: str, check: bool = False) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        sys.exit(f"docker {' '.join(args)} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def remove_containers(label: str) -> None:
    ids = docker("ps", "-aq", "--filter", f"label={label}").split()
    if ids:
        docker("rm", "-f", *ids)


def images_named(prefix: str) -> list[str]:
    """repo:tag of every image whose repository starts with `prefix` (the bench's own)."""
    out = docker("images", "--format", "{{.Repository}}:{{.Tag}}")
    return [ref for ref in out.split() if ref.startswith(prefix)]


# -- the runs ----------------------------------------------------------------------------------

@dataclass
class Timing:
    up: list[float] = field(default_factory=list)
    first_exec: list[float] = field(default_factory=list)
    steps: dict[str, list[float]] = field(default_factory=dict)

    @property
    def total(self) -> list[float]:
        return [a + b for a, b in zip(self.up, self.first_exec, strict=True)]


class Bench:
    def __init__(self, work: Path, token: str, cli: str, cold: bool) -> None:
        self.work = work
        self.token = token
        self.cli = cli
        self.cold = cold
        self.run_no = 0
        self.problems: list[str] = []
        self.works: dict[str, set[str]] = {}

    def folder(self, case: Case) -> Path:
        return self.work / f"dcb-{self.token}-{case.name}"

    def write_project(self, case: Case, first_step: str = "") -> None:
        """The case's folder: .devcontainer/devcontainer.json, its Dockerfile and context."""
        dc = self.folder(case) / ".devcontainer"
        dc.mkdir(parents=True, exist_ok=True)
        (dc / "devcontainer.json").write_text(json.dumps(case.devcontainer_json(), indent=2))
        if case.dockerfile is not None:
            lines = case.dockerfile.splitlines(keepends=True)
            if first_step:
                lines.insert(1, first_step + "\n")
            (dc / "Dockerfile").write_text("".join(lines))
        for rel, text in case.files.items():
            (dc / rel).parent.mkdir(parents=True, exist_ok=True)
            (dc / rel).write_text(text)

    def prepare_run(self, case: Case) -> None:
        """--cold: a step of this run's own first, so no step of the build is cached."""
        self.run_no += 1
        if self.cold and case.dockerfile is not None:
            self.write_project(case, f"RUN echo {self.token}-{self.run_no} > /.bench-run")

    def anchor(self, case: Case) -> None:
        """Build the case once (untimed) as an image of the bench's own, so its layers stay
        cached while each run's images are removed (not with --cold)."""
        if case.dockerfile is None or self.cold:
            return
        dc = self.folder(case) / ".devcontainer"
        docker("build", "-q", "-t", f"devcell-bench-anchor-{self.token}/{case.name}", str(dc),
               check=True)

    def check(self, what: str, case: Case, out: str) -> None:
        lines = out.split()
        want_user = case.user or "root"
        want_marker = case.name if case.dockerfile is not None else "-"
        ok = lines[:2] == [want_user, want_marker]
        self.works.setdefault(what, set())
        if ok:
            self.works[what].add(case.name)
        else:
            self.problems.append(f"{what} {case.name}: expected user {want_user} and marker "
                                 f"{want_marker}, got {out.strip()[:200]!r}")

    probe = f"id -un; cat {MARKER} 2>/dev/null || echo -"

    # -- devcontainer CLI

    def devcontainer_run(self, case: Case, timing: Timing) -> None:
        self.prepare_run(case)
        label = f"{LABEL}={self.token}-{self.run_no}"
        folder = str(self.folder(case))
        env = c.env_for(self.work / "unused")
        common = ["--workspace-folder", folder, "--id-label", label]
        try:
            up = c.run([self.cli, "up", *common], env, capture=True)
            if up.returncode != 0 or b'"outcome":"success"' not in up.stdout:
                self.problems.append(f"devcontainer up {case.name}: exit {up.returncode}: "
                                     f"{(up.stdout + up.stderr).decode(errors='replace')[-600:]}")
                return
            ex = c.run([self.cli, "exec", *common, "true"], env, capture=True)
            if ex.returncode != 0:
                self.problems.append(f"devcontainer exec {case.name}: exit {ex.returncode}")
                return
            timing.up.append(up.seconds)
            timing.first_exec.append(ex.seconds)
            probe = c.run([self.cli, "exec", *common, "sh", "-c", self.probe], env,
                          capture=True)
            self.check("devcontainer CLI", case, probe.stdout.decode(errors="replace"))
        finally:
            remove_containers(label)
            if self.cold:  # a rebuilt tag leaves the last run's image untagged: removed now
                for ref in images_named(f"vsc-dcb-{self.token}-{case.name}-"):
                    docker("rmi", ref)

    # -- DevCell

    def manifest(self, case: Case, devcell: str, env: dict[str, str]) -> dict[str, object]:
        """What `devcell import devcontainer` makes of the case (spec.user for remoteUser)."""
        out = self.work / f"imported-{case.name}.yaml"
        c.run_ok([devcell, "import", "devcontainer", str(self.folder(case)), "-o", str(out)],
                 env)
        doc = yaml.safe_load(out.read_text())
        if case.user:
            doc["spec"]["user"] = case.user
        build = doc["spec"].get("build")
        if build:  # relative to the imported file; the per-run files are written beside it
            build["context"] = str((out.parent / build["context"]).resolve())
        return doc

    def devcell_run(self, case: Case, devcell: str, tag: str, state: Path,
                    doc: dict[str, object], timing: Timing) -> None:
        self.prepare_run(case)
        name = f"{case.name}-{self.run_no}"
        doc = json.loads(json.dumps(doc))
        doc["metadata"]["name"] = name  # type: ignore[index]
        path = self.work / f"cell-{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        env = c.env_for(state)
        try:
            up = c.run([devcell, "apply", "-f", str(path)], env, capture=True)
            if up.returncode != 0:
                self.problems.append(f"devcell apply {case.name}: exit {up.returncode}: "
                                     f"{up.stderr.decode(errors='replace')[-600:]}")
                return
            ex = c.run([devcell, "exec", name, "--", "true"], env, capture=True)
            if ex.returncode != 0:
                self.problems.append(f"devcell exec {case.name}: exit {ex.returncode}: "
                                     f"{ex.stderr.decode(errors='replace')[-300:]}")
                return
            timing.up.append(up.seconds)
            timing.first_exec.append(ex.seconds)
            for step, ms in recorded_steps(state, name):
                timing.steps.setdefault(step, []).append(ms / 1000)
            probe = c.run([devcell, "exec", name, "--", "sh", "-c", self.probe], env,
                          capture=True)
            self.check(f"devcell{tag}", case, probe.stdout.decode(errors="replace"))
        finally:
            c.run([devcell, "delete", "cell", name, "--approve"], env, capture=True)
            path.unlink(missing_ok=True)
            left = docker("ps", "-aq", "--filter", f"label=dev.devcell.cell={name}",
                          "--filter", f"label=dev.devcell.state-path={state.resolve()}").split()
            if left:
                self.problems.append(f"devcell delete {name} left containers {left}")
                docker("rm", "-f", *left)


def recorded_steps(state: Path, cell: str) -> list[tuple[str, float]]:
    """The steps of the cell's create operation and their recorded durations (ms)."""
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT s.name, s.duration_ms FROM operation_steps s JOIN operations o "
            "ON o.id = s.op_id WHERE o.object_name = ? ORDER BY s.op_id, s.idx",
            (cell,)).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()
    return [(name, ms) for name, ms in rows if ms is not None]


def main() -> int:
    p = c.base_parser(__doc__.split("\n\n")[0], runs=5)
    p.add_argument("--cases", default=",".join(CASES),
                   help=f"which configurations, comma-separated (default: {','.join(CASES)})")
    p.add_argument("--devcontainer", metavar="PATH", help="the devcontainer CLI to time")
    p.add_argument("--cold", action="store_true",
                   help="nothing in the build cache: a step unique to each run comes first")
    args = p.parse_args()
    c.check_args(args)
    cases = [CASES[n] for n in args.cases.split(",") if n in CASES]
    if not cases or len(cases) != len(args.cases.split(",")):
        sys.exit(f"--cases: choose among {', '.join(CASES)}")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        sys.exit(f"{IMAGE} is missing or the engine is down: run scripts/docker-setup first")
    cli = find_cli(args.devcontainer)
    version = subprocess.run([cli, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    print(f"devcontainer CLI {version} ({cli}); it builds with {builder_of_cli()}; "
          f"DevCell builds through the engine's API; build cache: "
          f"{'cold (a unique first step each run)' if args.cold else 'warm (every step cached)'}")
    token = secrets.token_hex(4)
    builds = c.builds(args)

    with c.workdir(args.keep) as work:
        bench = Bench(work, token, cli, args.cold)
        states = {b.name: work / f"state-{i}" for i, b in enumerate(builds)}
        timings: dict[str, Timing] = {}
        try:
            docs = {}
            for case in cases:
                bench.write_project(case)
                bench.anchor(case)
                for b in builds:
                    docs[(b.name, case.name)] = bench.manifest(case, b.devcell,
                                                               c.env_for(states[b.name]))
            subjects: list[tuple[str, Callable[[Timing], None]]] = []
            for case in cases:
                for b in builds:
                    def dc_run(t: Timing, case: Case = case, b: c.Build = b) -> None:
                        bench.devcell_run(case, b.devcell, b.tag, states[b.name],
                                          docs[(b.name, case.name)], t)
                    subjects.append((f"{case.name}: devcell{b.tag}", dc_run))

                def cli_run(t: Timing, case: Case = case) -> None:
                    bench.devcontainer_run(case, t)
                subjects.append((f"{case.name}: devcontainer CLI", cli_run))
            timings = {label: Timing() for label, _ in subjects}
            warm = {label: Timing() for label, _ in subjects}
            for round_no in range(args.warmup + args.runs):
                order = subjects if round_no % 2 == 0 else subjects[::-1]
                for label, run in order:
                    run(timings[label] if round_no >= args.warmup else warm[label])
                print(f"round {round_no + 1}/{args.warmup + args.runs} done "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            for ref in images_named(f"vsc-dcb-{token}-") + images_named(
                    f"devcell-bench-anchor-{token}/"):
                docker("rmi", ref)
        report(cases, builds, timings, bench, args)
        return 1 if bench.problems else 0


def report(cases: list[Case], builds: list[c.Build], timings: dict[str, Timing],
           bench: Bench, args: argparse.Namespace) -> None:
    print(f"\nup + first exec, whole processes, medians of {args.runs} "
          f"(interleaved; load average now {', '.join(f'{x:.2f}' for x in os.getloadavg())})")
    width = max(len(k) for k in timings) + 2
    print(f"{'subject':<{width}}{'n':>3} {'up ms':>9} {'exec ms':>9} {'total ms':>9} "
          f"{'min ms':>9} {'p90 ms':>9} {'ratio':>7}")
    for case in cases:
        peer = timings[f"{case.name}: devcontainer CLI"].total
        base = statistics.median(peer) if peer else None
        for label, t in timings.items():
            if not label.startswith(f"{case.name}: ") or not t.up:
                continue
            med = statistics.median(t.total)
            ratio = f"{med / base:7.2f}" if base else "      -"
            print(f"{label:<{width}}{len(t.up):>3} {c.fmt_ms(statistics.median(t.up)):>9} "
                  f"{c.fmt_ms(statistics.median(t.first_exec)):>9} {c.fmt_ms(med):>9} "
                  f"{c.fmt_ms(min(t.total)):>9} {c.fmt_ms(c.p90(t.total)):>9} {ratio}")
    print("\nDevCell's recorded steps (median ms) per case:")
    for label, t in timings.items():
        if t.steps:
            print(f"  {label}: " + ", ".join(f"{k} {statistics.median(v) * 1000:.0f}"
                                            for k, v in t.steps.items()))
    for case in cases:
        for b in builds:
            t = timings[f"{case.name}: devcell{b.tag}"]
            peer = timings[f"{case.name}: devcontainer CLI"]
            if t.up and peer.up:
                ratio = statistics.median(t.total) / statistics.median(peer.total)
                print(f"{case.name}: devcell{b.tag} / devcontainer CLI {ratio:.2f} (target <= "
                      f"1.0: {c.verdict(ratio <= 1.0)})")
    print("\nwhich cases work (right user, the Dockerfile's marker file):")
    for what, names in bench.works.items():
        print(f"  {what}: {', '.join(sorted(names)) or 'none'}")
    for problem in bench.problems:
        print(f"  problem: {problem}")


if __name__ == "__main__":
    raise SystemExit(main())
