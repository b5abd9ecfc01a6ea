"""Real teams' devcontainer.json files (tests/data/devcontainer_corpus, sources in its
SOURCES.md) run through `devcell import devcontainer` and `devcell apply --dry-run`, as a user
runs them: shared by tests/e2e/test_devcontainer_corpus.py (which asserts on the outcome,
running the commands in-process in two worker processes: run_all) and
bench/devcontainer_corpus.py (which prints the per-file table, running each as a process).

Only the devcontainer.json files are stored. The files they reference (Dockerfiles, compose
files, scripts, local features) are the repositories' code: each is laid down at its place
with content of our own that makes the conversion meaningful: a Dockerfile `FROM` the test
base image with the build's ARGs, a compose file with the service devcontainer.json names and
a database beside it, a local feature in the specification's format, a script that exits 0.

Each file's outcome is `converted` (import and apply --dry-run both succeed), `refused`
(import fails naming fields), or `failed` (anything else: a traceback, a dry-run refusing
what the import wrote, an error naming no field). A converted file's every top-level field
must be carried into the manifest or named on stderr; `silent` lists those that are neither.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "devcontainer_corpus"
BASE = "devcell/busybox:latest"
"""Every Dockerfile and compose service is built FROM (or runs) the test base image, so what
the import writes can also be applied for real without the network."""

SIDECAR_IMAGES = {"db": "postgres:16-alpine", "redis": "redis:7-alpine",
                  "mssql": "mcr.microsoft.com/mssql/server:2022-latest"}


@dataclass(frozen=True)
class Entry:
    """One corpus file: its folder in the corpus and where it lived in its repository."""

    folder: str
    repo: str
    path: str
    referenced: dict[str, str]
    corpus: Path = CORPUS

    @property
    def file(self) -> Path:
        return self.corpus / self.folder / "devcontainer.json"

    @property
    def data(self) -> dict[str, Any]:
        import json5

        loaded: dict[str, Any] = json5.loads(self.file.read_text(encoding="utf-8-sig"))
        return loaded


def entries(corpus: Path = CORPUS) -> list[Entry]:
    table = json.loads((corpus / "corpus.json").read_text())
    return [Entry(folder, info["repo"], info["path"], dict(info.get("referenced") or {}), corpus)
            for folder, info in sorted(table.items())
            if (corpus / folder / "devcontainer.json").is_file()]


def feature_refs(corpus: Path = CORPUS) -> list[str]:
    """Every feature reference the corpus names, as written (OCI references and the short
    ids of the deprecated form alike; local folders left out)."""
    found: set[str] = set()
    for entry in entries(corpus):
        for ref in (entry.data.get("features") or {}):
            if not str(ref).startswith("."):
                found.add(str(ref))
    return sorted(found)


def oci_repository(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of an OCI feature reference; a short id of the
    deprecated form (`git`) is the devcontainers/features one, as the reference CLI maps it."""
    if "/" not in ref:
        ref = f"ghcr.io/devcontainers/features/{ref}"
    host, _, rest = ref.partition("/")
    repository, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        repository, tag = rest, "latest"
    return host, repository, tag


def corpus_features(corpus: Path = CORPUS) -> dict[tuple[str, str], dict[str, str]]:
    """A minimal Feature in the specification's format for every registry reference the
    corpus names, keyed by (repository, tag) as the registry serves it: its id, version and
    every option the corpus sets (a string each, as the files write them). The
    docker-in-docker ones ask, as the real one does, for a privileged container, an init and
    their own entrypoint."""
    options: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in entries(corpus):
        for ref, value in (entry.data.get("features") or {}).items():
            if str(ref).startswith("."):
                continue
            _, repository, tag = oci_repository(str(ref))
            # a short id of the deprecated form (`git`) is served at :1 and :latest alike
            for served in (tag, "1") if "/" not in str(ref) else (tag,):
                found = options.setdefault((repository, served), {})
                for name in (value if isinstance(value, dict) else {"version": value}):
                    found[str(name)] = {"type": "string", "default": ""}
    out = {}
    for (repository, tag), opts in sorted(options.items()):
        id_ = repository.rsplit("/", 1)[-1]
        metadata: dict[str, Any] = {"id": id_, "version": f"{tag if tag[:1].isdigit() else 1}"
                                    ".0.0", "name": id_, "options": opts}
        if id_ == "docker-in-docker":
            metadata.update(privileged=True, init=True,
                            entrypoint="/usr/local/share/docker-init.sh")
        out[(repository, tag)] = {
            "devcontainer-feature.json": json.dumps(metadata, indent=2) + "\n",
            "install.sh": f"#!/bin/sh\nset -e\necho {id_} > /usr/local/share/{id_}.installed\n",
        }
    return out


def serve_features(directory: Path, features: dict[tuple[str, str], dict[str, str]]) -> Any:
    """A local registry (tests/registry.py) serving `features`, (repository, tag) -> files;
    the caller stops it (`.stop()`). Its address is what images.registryMirrors sends ghcr.io
    to."""
    from tests import registry

    running = registry.start(directory)
    try:
        for (repository, tag), files in features.items():
            running.push_feature(repository, tag, files)
    except BaseException:
        running.stop()
        raise
    return running


def sample_features(refs: dict[str, dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    """`ghcr.io/...:tag` -> files, keyed as serve_features takes them."""
    return {oci_repository(ref)[1:]: files for ref, files in refs.items()}


# -- the project's files ----------------------------------------------------------------------


def lay_down(entry: Entry, root: Path) -> Path:
    """The repository's tree under `root` as far as this file needs it: devcontainer.json at
    its path, each file it references with content of our own. Returns devcontainer.json."""
    data = entry.data
    source = root / entry.path
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(entry.file.read_bytes())
    here = source.parent
    compose = data.get("dockerComposeFile")
    compose_files = [compose] if isinstance(compose, str) else list(compose or [])
    wanted = {**{rel: "" for rel in entry.referenced}, **{rel: "" for rel in compose_files}}
    for ref in data.get("features") or {}:
        if str(ref).startswith("."):
            wanted[f"{ref}/devcontainer-feature.json"] = ""
            wanted[f"{ref}/install.sh"] = ""
    build: dict[str, Any] = data["build"] if isinstance(data.get("build"), dict) else {}
    dockerfile = build.get("dockerfile") or data.get("dockerFile")
    if isinstance(dockerfile, str):
        wanted.setdefault(dockerfile, "")
    for rel in wanted:
        target = (here / rel).resolve()
        if not target.is_relative_to(root.resolve()):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        text = _content(rel, target, data, here, compose_files)
        target.write_text(text)
        if text.startswith("#!"):
            target.chmod(0o755)
    for keep in ("README.md",):  # a project has files of its own
        if not (root / keep).exists():
            (root / keep).write_text(f"# {entry.repo}\n")
    return source


def _content(rel: str, target: Path, data: dict[str, Any], here: Path,
             compose_files: list[str]) -> str:
    name = target.name
    if name == "devcontainer-feature.json":
        feature = target.parent.name
        return json.dumps({"id": feature, "version": "1.0.0", "name": feature,
                           "options": {"version": {"type": "string", "default": "latest"}}},
                          indent=2) + "\n"
    if rel in compose_files:
        return _compose(data, first=rel == compose_files[0], here=here, target=target)
    if "dockerfile" in name.lower():
        build: dict[str, Any] = data["build"] if isinstance(data.get("build"), dict) else {}
        args: dict[str, Any] = build["args"] if isinstance(build.get("args"), dict) else {}
        lines = [f"ARG {arg}" for arg in args] + [f"FROM {BASE}"]
        lines += [f"ARG {arg}" for arg in args]
        lines += ["RUN mkdir -p /opt/devcell-corpus && echo built > /opt/devcell-corpus/marker"]
        return "\n".join(lines) + "\n"
    if name.endswith((".yml", ".yaml")):
        return "# a configuration file of the project\n"
    if name.endswith(".sql"):
        return "SELECT 1;\n"
    if name.endswith(".env"):
        return "EXAMPLE_SETTING=1\n"
    if name.endswith(".txt"):
        return "a file of the project\n"
    return "#!/bin/sh\n# a script of the project\nset -e\necho \"$0 ran\"\n"


def _compose(data: dict[str, Any], *, first: bool, here: Path, target: Path) -> str:
    """A compose file of our own: the service devcontainer.json names (built from a
    Dockerfile beside the compose file when the repository had one there, else the base
    image), sleeping so the editor can attach, with the project mounted, and a database
    beside it (plus any other service runServices names). A second compose file overrides
    the service's environment, as layered compose files do."""
    import yaml

    service = str(data.get("service") or "app")
    if not first:
        return yaml.safe_dump({"services": {service: {"environment": {"LAYERED": "1"}}}},
                              sort_keys=False)
    others = [str(s) for s in data.get("runServices") or [] if s != service] or ["db"]
    app: dict[str, Any] = {}
    if (target.parent / "Dockerfile").exists() or (here / "Dockerfile").exists() \
            and target.parent == here:
        app["build"] = {"context": ".", "dockerfile": "Dockerfile"}
    else:
        app["image"] = BASE
    project = os.path.relpath(_project_root(here), target.parent)
    app["volumes"] = [f"{project}:/workspaces/{_project_root(here).name}:cached"]
    app["command"] = "sleep infinity"
    app["environment"] = {"DATABASE_HOST": "localhost"}
    app["depends_on"] = others
    services: dict[str, Any] = {service: app}
    for other in others:
        services[other] = {
            "image": SIDECAR_IMAGES.get(other, BASE),
            "restart": "unless-stopped",
            "volumes": [f"{other}-data:/data"],
            "environment": {"POSTGRES_PASSWORD": "postgres"} if other == "db" else {},
        }
    return yaml.safe_dump({"services": services,
                           "volumes": {f"{other}-data": None for other in others}},
                          sort_keys=False)


def _project_root(here: Path) -> Path:
    for parent in (here, *here.parents):
        if parent.name == ".devcontainer":
            return parent.parent
    return here


# -- running it -------------------------------------------------------------------------------


@dataclass
class Outcome:
    folder: str
    status: str  # converted | refused | failed
    refused: list[str] = field(default_factory=list)
    """The fields an import refusal named (`features`, `runArgs`, `mounts[0]`)."""
    notes: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)
    """Top-level fields of a converted file neither carried into the manifest nor named."""
    detail: str = ""
    manifest: dict[str, Any] = field(default_factory=dict)


_ERROR = re.compile(r"^error: .*?devcontainer\.json:\d+(?::\d+)?: ([^:]+?): (.*)$")
_OTHER_ERROR = re.compile(r"^error: (?:[^:]+?):\d+(?::\d+)?: ([^:]+?): (.*)$")


def write_config(state_dir: Path, config: dict[str, Any]) -> None:
    """DevCell's configuration in `state_dir` (owner-only, as DevCell requires of it)."""
    import yaml

    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / "config.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "devcell.dev/v1alpha1", "kind": "Config",
                                    **config}))
    path.chmod(0o600)


GRANTS: dict[str, Any] = {
    "allowedCapabilities": ["SYS_PTRACE", "NET_ADMIN", "NET_RAW", "SYS_ADMIN"],
    "allowedSecurityOpts": ["seccomp=unconfined", "apparmor=unconfined", "label=disable"],
    "allowPrivileged": True,
    "allowedDevices": ["/dev/fuse", "/dev/net/tun", "/dev/kvm"],
    "allowHostCommands": True,
}
"""What a team's administrator grants for these projects (debuggers, docker-in-docker, fuse):
each refusal without the allowance names it; with it the file converts."""


def known_settings(section: str, wanted: dict[str, Any]) -> dict[str, Any]:
    """The entries of `wanted` that DevCell's configuration schema knows in `section` (the
    allowances land one by one; an unknown key would fail every import)."""
    schema = json.loads((REPO / "devcell" / "schemas" / "config.schema.json").read_text())
    known = set(schema["properties"].get(section, {}).get("properties", {}))
    return {k: v for k, v in wanted.items() if k in known}


def corpus_config(root: Path, *, grant: bool, mirror: str | None = None) -> dict[str, Any]:
    """The configuration the corpus runs under: the project folder allowed as a host path (so
    the import binds it as the workspace), the grants when asked, ghcr.io sent to `mirror`."""
    security: dict[str, Any] = {"allowedHostPaths": [str(root)]}
    if grant:
        security.update(known_settings("security", GRANTS))
    config: dict[str, Any] = {"security": security}
    images = known_settings("images", {"registryMirrors": {"ghcr.io": mirror}} if mirror else {})
    if images:
        config["images"] = images
    return config


def run(entry: Entry, root: Path, state_dir: Path, *, config: dict[str, Any] | None = None,
        env: dict[str, str] | None = None, in_process: bool = False) -> Outcome:
    """Lay the file down under `root`, import it and dry-run the manifest it wrote."""
    source = lay_down(entry, root)
    return import_and_dry_run(entry.folder, entry.data, source, root, state_dir,
                              config=config, env=env, in_process=in_process)


Job = tuple[Entry, Path, Path, dict[str, Any]]
"""What run() takes: the entry, the project's root, the state directory, the configuration."""


def run_all(jobs: list[Job], workers: int = 2) -> list[Outcome]:
    """run() of each job, in order, by `workers` worker processes that run the commands
    in-process (tests/cli/inprocess.py): the interpreter's start and DevCell's imports, about
    half of an import's or a dry run's CPU, are paid once per worker instead of twice per
    file. Each command still gets its own working directory, environment and standard
    streams, and an exception it lets out is a failure as a traceback was."""
    procs = []
    try:
        for w in range(workers):
            proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.devcontainer_corpus import worker; worker()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO)
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(pickle.dumps(jobs[w::workers]))
            proc.stdin.close()
        outcomes: list[Outcome] = [Outcome("", "failed")] * len(jobs)
        for w, proc in enumerate(procs):
            assert proc.stdout is not None
            done = proc.stdout.read()
            assert proc.wait(timeout=60) == 0, f"corpus worker {w} exited {proc.returncode}"
            outcomes[w::workers] = pickle.loads(done)
        return outcomes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def worker() -> None:
    """A run_all worker: the jobs pickled on stdin, their outcomes pickled on stdout."""
    jobs: list[Job] = pickle.loads(sys.stdin.buffer.read())
    with os.fdopen(os.dup(1), "wb") as out:  # what the commands' children print goes to stderr
        os.dup2(2, 1)
        outcomes = [run(entry, root, state_dir, config=config, in_process=True)
                    for entry, root, state_dir, config in jobs]
        out.write(pickle.dumps(outcomes))


def import_and_dry_run(label: str, data: dict[str, Any], source: Path, project: Path,
                       state_dir: Path, *, config: dict[str, Any] | None = None,
                       env: dict[str, str] | None = None, in_process: bool = False) -> Outcome:
    """`devcell import devcontainer SOURCE -o PROJECT/cell.yaml` run in `project` (where a
    developer would: the top of the repository), then `devcell apply --dry-run` of it; as
    subprocesses, or in this process (`in_process`: see run_all)."""
    if config:
        write_config(state_dir, config)
    out = project / "cell.yaml"
    full_env = dict(os.environ, DEVCELL_HOME=str(state_dir), **(env or {}))
    devcell = _devcell_in_process if in_process else _devcell
    imported = devcell(["import", "devcontainer", str(source), "-o", str(out)], project,
                       full_env)
    notes = [line.removeprefix("warning: ") for line in imported.stderr.splitlines()
             if line.startswith("warning: ")]
    if "Traceback" in imported.stderr:
        return Outcome(label, "failed", notes=notes, detail=_last(imported.stderr))
    if imported.returncode != 0:
        fields = []
        for line in imported.stderr.splitlines():
            found = _ERROR.match(line) or _OTHER_ERROR.match(line)
            if found:
                fields.append(f"{found.group(1)}: {found.group(2)}")
        if not fields:
            return Outcome(label, "failed", notes=notes,
                           detail="refused naming no field: " + _last(imported.stderr))
        return Outcome(label, "refused", refused=fields, notes=notes)
    applied = devcell(["apply", "-f", str(out), "--dry-run"], project, full_env)
    if applied.returncode != 0:
        return Outcome(label, "failed", notes=notes,
                       detail="apply --dry-run: " + _last(applied.stderr))
    import yaml

    manifest = yaml.safe_load(out.read_text())
    silent = unaccounted(data, manifest, imported.stderr)
    return Outcome(label, "converted", notes=notes, silent=silent, manifest=manifest)


def _devcell(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


def _devcell_in_process(args: list[str], cwd: Path, env: dict[str, str]
                        ) -> subprocess.CompletedProcess[str]:
    """The command run by main() in this process; an exception it let out (or a run past the
    subprocess's time limit) is reported as the traceback a process would have printed."""
    from tests.cli import inprocess

    code, out, err = inprocess.run(args, cwd, env=env, time_limit=300)
    if isinstance(code, str):
        err += f"\nTraceback (in-process run): {code}\n"
        code = 1
    return subprocess.CompletedProcess(args, code, out, err)


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


# -- none silently changed --------------------------------------------------------------------


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _carried(key: str, value: Any, spec: dict[str, Any]) -> bool:
    """Whether devcontainer.json's top-level `key` shows in the manifest's spec."""
    env_names = {e.get("name") for e in spec.get("env") or [] if isinstance(e, dict)}
    hooks = spec.get("hooks") or {}
    if key in ("image", "build", "dockerFile", "context"):
        return bool(spec.get("image") or spec.get("build"))
    if key in ("containerEnv", "remoteEnv"):
        return isinstance(value, dict) and set(value) <= env_names
    if key in ("forwardPorts", "appPort"):
        return bool(_dig(spec, "network", "ports"))
    if key in ("onCreateCommand", "updateContentCommand", "postCreateCommand"):
        return bool(hooks.get("postCreate"))
    if key == "postStartCommand":
        return bool(hooks.get("postStart"))
    if key == "postAttachCommand":
        return bool(hooks.get("postAttach"))
    if key in ("workspaceFolder", "workspaceMount"):
        return bool(_dig(spec, "workspace", "mountPath"))
    if key == "mounts":
        return isinstance(value, list) and \
            len(spec.get("mounts") or []) + len(spec.get("volumes") or []) >= len(value)
    if key == "overrideFeatureInstallOrder":  # the order of spec.features
        return bool(spec.get("features"))
    if key == "features":
        return isinstance(value, dict) and len(spec.get("features") or []) >= len(value)
    if key == "overrideFeatureInstallOrder":  # the order of spec.features
        return bool(spec.get("features"))
    if key in ("dockerComposeFile", "service", "runServices"):
        return bool(spec.get("sidecars")) or bool(spec.get("image") or spec.get("build"))
    if key in ("capAdd", "privileged", "securityOpt", "init"):
        return bool(spec.get("security"))
    if key == "overrideCommand":  # true: DevCell's supervisor keeps the cell running anyway
        return value is True or bool(spec.get("services"))
    if key == "runArgs":  # each flag not mapped (env, resources, security) is named
        return bool(spec.get("env") or spec.get("resources") or spec.get("security"))
    if key == "hostRequirements":
        return bool(spec.get("resources"))
    if key in ("remoteUser", "containerUser"):
        return bool(spec.get("user"))
    if key == "userEnvProbe":
        return value == "none" or spec.get("userEnvProbe") == value
    if key == "initializeCommand":
        return bool(hooks.get("hostInitialize"))
    return False


def unaccounted(data: dict[str, Any], manifest: dict[str, Any], stderr: str) -> list[str]:
    """devcontainer.json's top-level fields that are neither carried into the manifest nor
    named on stderr: what the import would have changed silently."""
    spec = manifest.get("spec") or {}
    named = set()
    for line in stderr.splitlines():
        if line.startswith("warning: ") and ": " in line[9:]:
            found = re.match(r"[A-Za-z$][\w$]*", line[9:].split(": ", 1)[1])
            if found:
                named.add(found.group(0))
    out = []
    said = stderr.replace("\\", "")
    env_names = {e.get("name") for e in spec.get("env") or [] if isinstance(e, dict)}
    for key in ("containerEnv", "remoteEnv"):  # each variable carried or named on its own
        for var in data.get(key) or {} if isinstance(data.get(key), dict) else {}:
            if var not in env_names and f"{key}.{var}" not in said \
                    and data[key][var] is not None:
                out.append(f"{key}.{var}")
    for key, value in data.items():
        if key == "name" or key in named:
            continue
        if value in (None, {}, [], ""):
            continue
        if key in ("customizations", "extensions", "settings") and \
                (manifest.get("metadata") or {}).get("annotations"):
            continue  # VS Code's extensions and settings, as annotations
        if not _carried(key, value, spec):
            out.append(key)
    return out


# -- the table --------------------------------------------------------------------------------


def table(outcomes: Iterable[Outcome]) -> str:
    rows = ["| file | outcome | refused: field (or why it failed) |", "| --- | --- | --- |"]
    for o in outcomes:
        why = "; ".join(o.refused) if o.refused else o.detail
        if o.silent:
            why = (why + "; " if why else "") + "silently dropped: " + ", ".join(o.silent)
        rows.append(f"| {o.folder} | {o.status} | {why.replace('|', '/')} |")
    return "\n".join(rows)


def summary(outcomes: list[Outcome]) -> str:
    total = len(outcomes)
    converted = sum(o.status == "converted" for o in outcomes)
    refused = sum(o.status == "refused" for o in outcomes)
    failed = total - converted - refused
    percent = 100 * converted / total if total else 0.0
    return (f"{converted} of {total} converted and applied (dry run) ({percent:.0f}%), "
            f"{refused} refused, {failed} failed")


def refused_fields(outcomes: list[Outcome]) -> dict[str, int]:
    """How many files each field refused (the field before any `[i]` or `.sub`)."""
    counts: dict[str, int] = {}
    for o in outcomes:
        for key in {re.split(r"[.\[ :]", r, maxsplit=1)[0] for r in o.refused}:
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
