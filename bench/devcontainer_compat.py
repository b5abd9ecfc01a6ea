#!/usr/bin/env python3
"""The same devcontainer.json configurations brought up by DevCell and by the reference
devcontainer CLI (@devcontainers/cli), side by side in one run: which work in each, whether
the project's files are in the container, the user commands run as, and the time to usable
(median of --runs).

Configurations (`--configs`; all offline: FROM the local devcell/busybox image, Features from
a local registry):

- `image`: an image, nothing else;
- `dockerfile`: a Dockerfile of one RUN step;
- `local-feature`: a Feature in a folder beside devcontainer.json, an option set, its
  containerEnv;
- `oci-feature`: a Feature pushed by the bench to a local registry (Debian's docker-registry
  on 127.0.0.1) as an OCI artifact, an option set, its containerEnv. The devcontainer CLI
  reads it as `localhost:PORT/...` (it speaks plain HTTP only to a registry named
  localhost); DevCell as `ghcr.io/devcontainers/features/...` with its configuration's
  images.registryMirrors sending ghcr.io to the local registry;
- `compose-db`: Docker Compose, the app beside a `db` service that serves a file on
  127.0.0.1:8081 (the app shares its network: network_mode service:db). The devcontainer CLI
  drives Debian's docker-compose; DevCell makes a cell with a sidecar;
- `remoteuser`: a Dockerfile adding a user, `"remoteUser": "dev"`;
- `remoteenv`: `remoteEnv` from `${localEnv:...}` and `${containerEnv:...}` (an ENV of the
  image's Dockerfile);
- `cap-add`: `runArgs: ["--cap-add=SYS_PTRACE"]` (DevCell: allowed by
  security.allowedCapabilities);
- `postcreate-files`: a postCreateCommand listing the project's files into a file;
- `initialize`: an initializeCommand writing a file on the host (DevCell: allowed by its
  configuration's host-commands allowance).

Each project is a git repository (README.md, src/app.py committed), so DevCell's import can
fill the workspace from it. Per configuration and tool: one untimed warm-up run (its checks say
whether the configuration works: the configuration's own check, the project's files at the
workspace folder, the user `exec` runs as), then --runs timed runs, each a fresh container:

- DevCell: `devcell import devcontainer -o cell.yaml` (in the project folder), `devcell apply
  -f cell.yaml` (inline, no daemon), `devcell exec NAME -- true`; then, untimed, the checks
  and `devcell delete cell NAME`. A state directory per configuration, with the allowances it
  needs.
- devcontainer CLI: `devcontainer up --workspace-folder P --id-label dev.devcell.bench=RUN`,
  `devcontainer exec ... true`; then the checks and its containers removed (by that label, or
  by the compose project the bench's folder names), and at the end its images and volumes.

Needs the engine and the base image (scripts/docker-setup), docker-registry (Debian), node +
npm (the CLI is installed once into ~/.cache/devcell-bench/devcontainer-cli, as
bench/devcontainer_up.py does), Debian's docker-compose for compose-db.
Run by hand: .venv/bin/python bench/devcontainer_compat.py --runs 3   (~10 min)
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as c  # noqa: E402
import yaml  # noqa: E402
from devcontainer_up import IMAGE, builder_of_cli, docker, find_cli, images_named  # noqa: E402

LABEL = "dev.devcell.bench"
WS = "/workspaces"
FEATURE_FILE = "/usr/local/share/dcc-feature"


@dataclass(frozen=True)
class Config:
    name: str
    devcontainer: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    """More files of the project (relative to it), beside .devcontainer/devcontainer.json."""
    security: dict[str, Any] = field(default_factory=dict)
    check: str = "true"
    """A shell command run in the container after up; its output must hold `expect`."""
    expect: str = ""
    user: str = "root"
    host_file: str = ""
    """A file the configuration makes on the host, relative to the project (initialize)."""
    workspace: str = ""
    """The workspace folder in the container (default /workspaces/<folder>)."""


def feature_files(id_: str, env: dict[str, str]) -> dict[str, str]:
    return {
        "devcontainer-feature.json": json.dumps({
            "id": id_, "version": "1.0.0", "name": id_,
            "options": {"greeting": {"type": "string", "default": "hello"}},
            "containerEnv": env}, indent=2) + "\n",
        "install.sh": "#!/bin/sh\nset -e\nmkdir -p /usr/local/share\n"
                      f"echo \"greeting=$GREETING\" > {FEATURE_FILE}-{id_}\n",
    }


CAP_CHECK = ("cap=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status); "
             "echo ptrace=$(( (0x$cap >> 19) & 1 ))")

COMPOSE = f"""\
services:
  app:
    image: {IMAGE}
    command: sleep infinity
    network_mode: service:db
    volumes:
      - ..:/workspace:cached
  db:
    image: {IMAGE}
    command: ["sh", "-c",
              "mkdir -p /data && echo db-ready > /data/ready && httpd -f -p 127.0.0.1:8081 -h /data"]
    volumes:
      - db-data:/data
volumes:
  db-data:
"""

CONFIGS = [
    Config("image", {"image": IMAGE}),
    Config("dockerfile", {"build": {"dockerfile": "Dockerfile"}},
           {".devcontainer/Dockerfile": f"FROM {IMAGE}\nRUN echo built > /etc/dcc-marker\n"},
           check="cat /etc/dcc-marker", expect="built"),
    Config("local-feature", {"image": IMAGE, "features": {"./hello": {"greeting": "hi-local"}}},
           {f".devcontainer/hello/{k}": v
            for k, v in feature_files("hello", {"HELLO_FEATURE": "on"}).items()},
           check=f"cat {FEATURE_FILE}-hello; echo env=$HELLO_FEATURE",
           expect="greeting=hi-local env=on"),
    Config("oci-feature", {"image": IMAGE,
                           "features": {"{REGISTRY}/devcontainers/features/dcc-hello:1":
                                        {"greeting": "hi-oci"}}},
           check=f"cat {FEATURE_FILE}-dcc-hello; echo env=$DCC_FEATURE",
           expect="greeting=hi-oci env=on"),
    Config("compose-db", {"dockerComposeFile": "docker-compose.yml", "service": "app",
                          "workspaceFolder": "/workspace"},
           {".devcontainer/docker-compose.yml": COMPOSE},
           check="wget -qO- http://127.0.0.1:8081/ready", expect="db-ready",
           workspace="/workspace"),
    Config("remoteuser", {"build": {"dockerfile": "Dockerfile"}, "remoteUser": "dev"},
           {".devcontainer/Dockerfile":
            f"FROM {IMAGE}\nRUN echo 'dev:x:1000:1000:dev:/home/dev:/bin/sh' >> /etc/passwd "
            "&& echo 'dev:x:1000:' >> /etc/group && mkdir -p /home/dev "
            "&& chown 1000:1000 /home/dev\n"},
           user="dev"),
    Config("remoteenv", {"build": {"dockerfile": "Dockerfile"}, "remoteEnv": {
               "FROM_HOST": "${localEnv:DCC_BENCH_VALUE}",
               "TOOL_BIN": "${containerEnv:TOOL_HOME}/bin"}},
           {".devcontainer/Dockerfile": f"FROM {IMAGE}\nENV TOOL_HOME=/opt/tool\n"},
           check="echo \"$FROM_HOST $TOOL_BIN\"", expect="from-the-host /opt/tool/bin"),
    Config("cap-add", {"image": IMAGE, "runArgs": ["--cap-add=SYS_PTRACE"]},
           security={"allowedCapabilities": ["SYS_PTRACE"]}, check=CAP_CHECK,
           expect="ptrace=1"),
    Config("postcreate-files", {
               "image": IMAGE,
               "postCreateCommand": "ls -A ${containerWorkspaceFolder} > /tmp/dcc-files; "
                                    "id -un > /tmp/dcc-hook-user"},
           check="tr '\\n' ' ' < /tmp/dcc-files; cat /tmp/dcc-hook-user",
           expect="README.md"),
    Config("initialize", {"image": IMAGE,
                          "initializeCommand": "echo initialized > .dcc-initialized"},
           security={"allowHostCommands": True}, host_file=".dcc-initialized"),
]


# -- a local registry with the OCI Feature -------------------------------------------------------

class FeatureRegistry:
    """Debian's docker-registry on 127.0.0.1 (tests/registry.py starts it), the bench's Feature
    pushed to it as an OCI artifact in the specification's layout
    (tests/registry.py's push_feature)."""

    def __init__(self, directory: Path) -> None:
        from tests import registry

        self.running = registry.start(directory)
        self.address = self.running.address
        self.port = self.address.rsplit(":", 1)[1]

    def push(self, repository: str, tag: str, files: dict[str, str]) -> None:
        self.running.push_feature(repository, tag, files)

    def stop(self) -> None:
        self.running.stop()


# -- the runs ------------------------------------------------------------------------------------

@dataclass
class Result:
    works: bool | None = None
    why: str = ""
    files: str = ""
    user: str = ""
    times: list[float] = field(default_factory=list)


def timed(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600
          ) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    return proc, time.perf_counter() - t0


class Bench:
    def __init__(self, work: Path, token: str, cli: str, devcell: str,
                 registry: FeatureRegistry | None) -> None:
        self.work, self.token, self.cli, self.devcell = work, token, cli, devcell
        self.registry = registry
        self.run_no = 0

    def folder(self, config: Config, tool: str) -> Path:
        return self.work / f"dcc-{self.token}-{tool}-{config.name}"

    def write_project(self, config: Config, tool: str) -> Path:
        project = self.folder(config, tool)
        dc = project / ".devcontainer"
        dc.mkdir(parents=True, exist_ok=True)
        text = json.dumps(config.devcontainer, indent=2)
        if self.registry is not None:
            registry = (f"localhost:{self.registry.port}" if tool == "cli" else "ghcr.io")
            text = text.replace("{REGISTRY}", registry)
        (dc / "devcontainer.json").write_text(text + "\n")
        for rel, content in {"README.md": "# a project\n",
                             "src/app.py": "print('app')\n", **config.files}.items():
            path = project / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            if content.startswith("#!"):
                path.chmod(0o755)
        git = ["git", "-C", str(project), "-c", "user.name=bench", "-c", "user.email=b@x"]
        if not (project / ".git").exists():
            subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
            subprocess.run([*git, "add", "-A"], check=True)
            subprocess.run([*git, "commit", "-qm", "project"], check=True)
        return project

    def probe(self, config: Config, folder: Path) -> str:
        ws = config.workspace or f"{WS}/{folder.name}"
        return (f"echo \"USER=$(id -un)\"; echo \"FILES=$(ls -A {ws} 2>/dev/null | tr '\\n' ' ')\";"
                f" {config.check}")

    def judge(self, config: Config, result: Result, out: str, project: Path) -> None:
        lines = out.splitlines()
        result.user = next((x[5:] for x in lines if x.startswith("USER=")), "?")
        files = next((x[6:] for x in lines if x.startswith("FILES=")), "")
        result.files = "yes" if "README.md" in files.split() else "no"
        rest = " ".join(x for x in lines if not x.startswith(("USER=", "FILES=")))
        problems = []
        if config.expect and config.expect not in rest:
            problems.append(f"check gave {rest[:120]!r}, wanted {config.expect!r}")
        if result.user != config.user:
            problems.append(f"user {result.user}, wanted {config.user}")
        if config.host_file and not (project / config.host_file).exists():
            problems.append(f"{config.host_file} not made on the host")
        result.works = not problems
        result.why = "; ".join(problems)

    # -- devcontainer CLI

    def cli_run(self, config: Config, result: Result, *, timed_run: bool) -> None:
        self.run_no += 1
        project = self.write_project(config, "cli")
        label = f"{LABEL}={self.token}-{self.run_no}"
        env = dict(os.environ, DCC_BENCH_VALUE="from-the-host")
        common = ["--workspace-folder", str(project), "--id-label", label]
        try:
            up, t_up = timed([self.cli, "up", *common], env, project)
            if up.returncode != 0 or '"outcome":"success"' not in up.stdout:
                result.works, result.why = False, "up: " + _tail(up.stdout + up.stderr)
                return
            ex, t_ex = timed([self.cli, "exec", *common, "true"], env, project)
            if ex.returncode != 0:
                result.works, result.why = False, "exec: " + _tail(ex.stderr)
                return
            if timed_run:
                result.times.append(t_up + t_ex)
            else:
                out, _ = timed([self.cli, "exec", *common, "sh", "-c",
                                self.probe(config, project)], env, project)
                self.judge(config, result, out.stdout, project)
        finally:
            self.cli_clean(label)

    def cli_clean(self, label: str) -> None:
        ids = docker("ps", "-aq", "--filter", f"label={label}").split()
        for line in docker("ps", "-a", "--format",
                           '{{.ID}} {{.Label "com.docker.compose.project"}}').splitlines():
            cid, _, project = line.partition(" ")
            if f"dcc-{self.token}" in project:
                ids.append(cid)
        if ids:
            docker("rm", "-f", "-v", *sorted(set(ids)))

    def cli_clean_all(self) -> None:
        self.cli_clean(f"{LABEL}=none")
        for ref in images_named(f"vsc-dcc-{self.token}") + images_named(f"dcc-{self.token}"):
            docker("rmi", ref)
        for volume in docker("volume", "ls", "-q").split():
            if f"dcc-{self.token}" in volume:
                docker("volume", "rm", volume)
        for network in docker("network", "ls", "--format", "{{.Name}}").split():
            if f"dcc-{self.token}" in network:  # compose's <project>_default
                docker("network", "rm", network)

    # -- DevCell

    def devcell_run(self, config: Config, result: Result, state: Path, *,
                    timed_run: bool) -> None:
        self.run_no += 1
        project = self.write_project(config, "devcell")
        name = f"dcc-{config.name}-{self.run_no}"
        env = dict(c.env_for(state), DCC_BENCH_VALUE="from-the-host")
        try:
            imp, t_imp = timed([self.devcell, "import", "devcontainer", "--name", name, "-o",
                                "cell.yaml"], env, project)
            if imp.returncode != 0:
                result.works, result.why = False, "import: " + _tail(imp.stderr)
                return
            up, t_up = timed([self.devcell, "apply", "-f", "cell.yaml"], env, project)
            if up.returncode != 0:
                result.works, result.why = False, "apply: " + _tail(up.stderr)
                return
            ex, t_ex = timed([self.devcell, "exec", name, "--", "true"], env, project)
            if ex.returncode != 0:
                result.works, result.why = False, "exec: " + _tail(ex.stderr)
                return
            if timed_run:
                result.times.append(t_imp + t_up + t_ex)
            else:
                out, _ = timed([self.devcell, "exec", name, "--", "sh", "-c",
                                self.probe(config, project)], env, project)
                self.judge(config, result, out.stdout, project)
                doc = yaml.safe_load((project / "cell.yaml").read_text())
                if not result.works and doc:
                    result.why += f" (imported spec keys: {sorted(doc.get('spec') or {})})"
        finally:
            subprocess.run([self.devcell, "delete", "cell", name, "--approve"], env=env,
                           capture_output=True, check=False, timeout=300)
            (project / ".dcc-initialized").unlink(missing_ok=True)


def _tail(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return " | ".join(lines[-2:])[-300:]


def state_for(work: Path, config: Config, registry: FeatureRegistry | None) -> Path:
    state = work / f"state-{config.name}"
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    doc: dict[str, Any] = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Config",
                           "security": {"allowedHostPaths": [str(work)], **config.security}}
    if registry is not None and any("{REGISTRY}" in ref
                                    for ref in config.devcontainer.get("features", {})):
        doc["images"] = {"registryMirrors": {"ghcr.io": registry.address}}
    (state / "config.yaml").write_text(yaml.safe_dump(doc))
    (state / "config.yaml").chmod(0o600)
    return state


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--configs", default=",".join(x.name for x in CONFIGS))
    p.add_argument("--tools", default="devcell,cli")
    p.add_argument("--devcell", default=str(c.VENV_BIN / "devcell"))
    p.add_argument("--devcontainer", metavar="PATH", help="the devcontainer CLI")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    chosen = [x for x in CONFIGS if x.name in args.configs.split(",")]
    tools = args.tools.split(",")
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        sys.exit(f"{IMAGE} is missing or the engine is down: run scripts/docker-setup first")
    cli = find_cli(args.devcontainer)
    version = subprocess.run([cli, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    compose = shutil.which("docker-compose")
    print(f"devcontainer CLI {version} ({cli}), building with {builder_of_cli()}; "
          f"compose: {compose or 'none'}; DevCell {args.devcell}", flush=True)
    token = secrets.token_hex(3)
    results: dict[tuple[str, str], Result] = {}
    with c.workdir(args.keep) as work:
        registry = FeatureRegistry(work / "registry") if any(
            "features" in x.devcontainer for x in chosen) else None
        bench = Bench(work, token, cli, args.devcell, registry)
        try:
            if registry is not None:
                registry.push("devcontainers/features/dcc-hello", "1",
                              feature_files("dcc-hello", {"DCC_FEATURE": "on"}))
            for config in chosen:
                state = state_for(work, config, registry)
                for tool in tools:
                    result = results[(config.name, tool)] = Result()
                    for i in range(1 + args.runs):
                        if tool == "cli":
                            bench.cli_run(config, result, timed_run=i > 0)
                        else:
                            bench.devcell_run(config, result, state, timed_run=i > 0)
                        if result.works is False:
                            break
                    print(f"{config.name} {tool}: works={result.works} "
                          f"{result.why[:200]}", flush=True)
        finally:
            bench.cli_clean_all()
            if registry is not None:
                registry.stop()
    report(chosen, tools, results, args.runs)
    return 0


def report(configs: list[Config], tools: list[str], results: dict[tuple[str, str], Result],
           runs: int) -> None:
    names = {"devcell": "DevCell", "cli": "devcontainer CLI"}
    print(f"\ntime to usable = DevCell: import + apply + first exec; devcontainer CLI: up + "
          f"first exec; whole processes, median of {runs} (load now "
          f"{os.getloadavg()[0]:.1f})\n")
    head = "| configuration |" + "".join(
        f" {names[t]}: works | files | user | time to usable |" for t in tools)
    print(head)
    print("|" + " --- |" * (1 + 4 * len(tools)))
    for config in configs:
        row = f"| {config.name} |"
        for tool in tools:
            r = results.get((config.name, tool), Result())
            ok = {True: "yes", False: "no", None: "-"}[r.works]
            t = f"{statistics.median(r.times):.2f} s" if r.times else "-"
            row += f" {ok} | {r.files or '-'} | {r.user or '-'} | {t} |"
        print(row)
    print()
    for config in configs:
        for tool in tools:
            r = results.get((config.name, tool), Result())
            if r.works is False:
                print(f"- {config.name}, {names[tool]}: {r.why}")
    totals = {t: sum(bool(results.get((x.name, t), Result()).works) for x in configs)
              for t in tools}
    print("\n" + ", ".join(f"{names[t]} brought up {n} of {len(configs)}"
                           for t, n in totals.items()))


if __name__ == "__main__":
    raise SystemExit(main())
