"""DevCell's own configuration: the explicit exceptions to its secure defaults.

Manifests say what a cell wants; this file says what the owner of the state directory allows.
It lives outside the manifests on purpose: whoever can write a manifest (a GitOps directory,
a teammate's pull request) cannot grant themselves a host bind mount or the host's network.

Read from $DEVCELL_CONFIG, else <state-dir>/config.yaml. Missing means the defaults (nothing
allowed beyond them). A file group or others could write is refused, like ssh refuses a
loose authorized_keys: an allowlist anyone can edit allows anything.
"""

from __future__ import annotations

import os
import stat
from functools import cache
from pathlib import Path
from typing import Any

from devcell.errors import ConfigError, Problem
from devcell.records import Record, field

CONFIG_ENV = "DEVCELL_CONFIG"
CONFIG_NAME = "config.yaml"
MAX_BYTES = 64 * 1024


class SecurityPolicy(Record):
    """What cells may have beyond the defaults (all empty/False: the secure defaults)."""

    allowed_host_paths: tuple[str, ...] = ()
    allow_host_network: bool = False
    allowed_publish_addresses: tuple[str, ...] = ()
    allowed_build_roots: tuple[str, ...] = ()
    """Directories a build context may lie under beyond its manifest's directory tree."""
    allow_host_commands: bool = False
    """spec.hooks.hostInitialize: commands a manifest runs on the host before its cell starts."""
    allowed_capabilities: tuple[str, ...] = ()
    """spec.security.capabilities beyond the few every cell has (names without CAP_)."""
    allowed_security_opts: tuple[str, ...] = ()
    """spec.security.securityOpt entries, each exactly as written there."""
    allow_privileged: bool = False
    """spec.security.privileged."""
    allowed_devices: tuple[str, ...] = ()
    """Host device paths (and directories of them) spec.security.devices may name."""
    source: str = "<defaults>"
    """Where the policy came from, for messages that tell the user what to edit."""


class ImageSettings(Record):
    """How long pulls and builds may go without a sign of life (`images` in the file): an
    engine waiting on a registry or a build step that never answers must not hold a worker
    for good."""

    pull_idle_timeout: float = 120.0
    build_idle_timeout: float = 600.0
    registry_mirrors: dict[str, str] = field(default_factory=dict)
    """Registry host -> the host serving its Dev Container Features instead."""


class IdleSettings(Record):
    """The idle sleep of cells whose manifest sets no `spec.idle` (`idle` in the file)."""

    sleep_after: str | None = None
    """A duration (30m), `never`, or None: cells sleep for idleness only when they ask."""


class ClusterSettings(Record):
    """The swarm this state directory controls (`cluster` in the file): absent, DevCell is
    single-host, as it always was (docs/cluster.md)."""

    engine: str
    """The manager's engine: unix:///path (its own socket, or one forwarded with ssh -L)."""
    registry: str | None = None
    """REGISTRY/REPOSITORY where a checkpoint moving between nodes is put (a fork on another
    node than its snapshot's): None, such forks are refused."""
    push_snapshots: bool = False
    """Push every snapshot's checkpoint to `registry` when it is taken, so a cell whose node
    is lost can be moved from its last snapshot (`node drain --from-last-snapshot`)."""

    @property
    def socket(self) -> str:
        return self.engine[len("unix://"):]


class Config(Record):
    """The configuration of one state directory: where it was read from and each section
    (a section the file leaves out is its defaults)."""

    path: Path
    exists: bool
    security: SecurityPolicy = field(default_factory=SecurityPolicy)
    images: ImageSettings = field(default_factory=ImageSettings)
    idle: IdleSettings = field(default_factory=IdleSettings)
    cluster: ClusterSettings | None = None


def config_path(state_dir: Path) -> Path:
    given = os.environ.get(CONFIG_ENV)
    return Path(given) if given else state_dir / CONFIG_NAME


@cache
def _validator() -> Any:
    import jsonschema

    from devcell import schemas

    schema = schemas.schema("config")
    return jsonschema.validators.validator_for(schema)(schema)


def _problem(path: Path, message: str, line: int | None = None, column: int | None = None,
             field_name: str | None = None) -> Problem:
    return Problem(str(path), message, line=line, column=column, field=field_name)


def _untrusted_dir(path: Path) -> str | None:
    """Why a directory holding the configuration lets others replace it (None: it does not).

    Like ssh's StrictModes: a directory others can write (without the sticky bit) lets them
    swap the file; one owned by another user lets them change its mode.
    """
    for parent in [path.parent, *path.parent.parents]:
        st = parent.stat()
        if st.st_uid not in (os.getuid(), 0):
            return f"{parent} is owned by uid {st.st_uid}"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"{parent} is writable by group or others"
    return None


def _check_file(path: Path) -> bytes:
    """The file's bytes, if it can be trusted: checked on the open file (no stat-then-read
    race), and every directory above it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except PermissionError:
        raise ConfigError([_problem(path, "cannot read DevCell's configuration (permission "
                                          "denied)")]) from None
    with os.fdopen(fd, "rb") as stream:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError([_problem(path, "DevCell's configuration must be a regular file")])
        if st.st_mode & 0o022:
            raise ConfigError([_problem(
                path, f"DevCell's configuration is writable by group or others (mode "
                      f"{stat.S_IMODE(st.st_mode):o}); anyone who can edit it could allow "
                      f"themselves host mounts: chmod go-w {path}")])
        if st.st_uid not in (os.getuid(), 0):
            raise ConfigError([_problem(path, f"DevCell's configuration is owned by uid "
                                              f"{st.st_uid}, not by you or root; refusing to "
                                              "trust it")])
        if st.st_size > MAX_BYTES:
            raise ConfigError([_problem(path, f"file is larger than {MAX_BYTES // 1024} KiB")])
        data = stream.read(MAX_BYTES + 1)
    why = _untrusted_dir(Path(os.path.realpath(path))) or _untrusted_dir(path.absolute())
    if why:
        raise ConfigError([_problem(path, f"refusing to trust DevCell's configuration: {why} "
                                          "(others could replace the file)")])
    return data


def parse(path: Path, data: bytes, state_dir: Path | None = None) -> Config:
    """The configuration in `data` (read from `path`), or ConfigError naming line and field."""
    from devcell.manifests import validate
    from devcell.manifests.model import SourceFile, digest
    from devcell.manifests.yamlsafe import YamlSyntaxError, parse_documents

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([_problem(path, "file is not valid UTF-8")]) from None
    try:
        docs = [d for d in parse_documents(text) if d.data is not None]
    except YamlSyntaxError as exc:
        raise ConfigError([_problem(path, exc.message, exc.line, exc.column)]) from None
    if not docs:
        return Config(path, exists=True, security=SecurityPolicy(source=str(path)))
    if len(docs) > 1:
        raise ConfigError([_problem(path, "expected one YAML document", docs[1].line)])
    doc = docs[0]
    source = SourceFile(str(path), str(path), data, digest(text))
    problems = [Problem(str(path), p.message, p.line, p.column) for p in doc.problems]
    if not isinstance(doc.data, dict):
        problems.append(_problem(path, "expected a mapping with apiVersion, kind and security",
                                 doc.line))
    else:
        problems += validate.document_problems(source, doc, _validator())
    if problems:
        raise ConfigError(problems)
    security = doc.data.get("security") or {}
    real = os.path.realpath(path)
    # No cell may mount anything overlapping the state directory, so a file inside it is out
    # of every cell's reach whatever the allowlist says; elsewhere it must not be allowed.
    inside_state = state_dir is not None and (real + "/").startswith(
        os.path.realpath(state_dir).rstrip("/") + "/")
    for root in () if inside_state else security.get("allowedHostPaths", ()):
        allowed = os.path.realpath(root).rstrip("/") + "/"
        if real.startswith(allowed) or allowed == "/":
            raise ConfigError([_problem(
                path, f"DevCell's configuration lies under allowedHostPaths entry {root}: a "
                      "cell mounting it could rewrite its own permissions; keep it outside",
                field_name="security.allowedHostPaths")])
    settings = doc.data.get("images") or {}
    images = ImageSettings(
        pull_idle_timeout=float(settings.get("pullIdleTimeoutSeconds", 120)),
        build_idle_timeout=float(settings.get("buildIdleTimeoutSeconds", 600)),
        registry_mirrors=dict(settings.get("registryMirrors") or {}))
    idle = IdleSettings(sleep_after=(doc.data.get("idle") or {}).get("sleepAfter"))
    cluster = doc.data.get("cluster")
    return Config(path, exists=True, images=images, idle=idle,
                  cluster=None if cluster is None else ClusterSettings(
                      engine=cluster["engine"], registry=cluster.get("registry"),
                      push_snapshots=bool(cluster.get("pushSnapshots", False))),
                  security=SecurityPolicy(
        allowed_host_paths=tuple(security.get("allowedHostPaths", ())),
        allow_host_network=bool(security.get("allowHostNetwork", False)),
        allowed_publish_addresses=tuple(security.get("allowedPublishAddresses", ())),
        allowed_build_roots=tuple(security.get("allowedBuildRoots", ())),
        allow_host_commands=bool(security.get("allowHostCommands", False)),
        allowed_capabilities=tuple(security.get("allowedCapabilities", ())),
        allowed_security_opts=tuple(security.get("allowedSecurityOpts", ())),
        allow_privileged=bool(security.get("allowPrivileged", False)),
        allowed_devices=tuple(security.get("allowedDevices", ())),
        source=str(path)))


def load(state_dir: Path) -> Config:
    """The configuration for `state_dir`: the file if there is one, else the defaults."""
    path = config_path(state_dir)
    if not path.exists():
        if os.environ.get(CONFIG_ENV):  # named explicitly: a typo must not mean "defaults"
            raise ConfigError([_problem(path, f"no such file (named by ${CONFIG_ENV})")])
        return Config(path, exists=False, security=SecurityPolicy(source=str(path)))
    return parse(path, _check_file(path), state_dir)
