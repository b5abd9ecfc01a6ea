"""A cell's spec.features made into a build: what the build-image step builds, and what
the features ask of the container.

Each reference is resolved (backends/features/fetch.py: a local folder, or a remote feature
fetched once and kept by digest), its options checked against its metadata, the features
ordered (backends/features/order.py) and a build context written that layers each one's
install.sh on the base image: spec.image, or the image spec.build makes. The build then goes
through spec.build's path (the backend's build_tag names it by a digest of that context, so
a changed option or feature is a new image and an unchanged one costs a walk).

What a feature's metadata asks of the container is judged as a manifest's own fields are:
a capability (capAdd), privileged or a security option only where DevCell's configuration
allows the same (security.allowedCapabilities, allowPrivileged, allowedSecurityOpts),
refused naming the feature and the allowance otherwise; a volume mount becomes a volume of
the cell (spec.volumes); a bind mount is refused (a feature cannot choose host paths);
containerEnv goes into the image (ENV after its install step, as the specification says),
and so does entrypoint (the image's ENTRYPOINT runs each feature's in turn, then the cell's
command); init is what every container cell has already.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import config, names, privileges, security
from devcell.backends.features import context, fetch, metadata, order
from devcell.errors import ImageBuildFailed

BASE_SUFFIX = "__base"
"""The name spec.build's own image is tagged under when features layer on it
(`devcell-build/<state>/<cell>__base:<digest>`): no cell's or sidecar's build (`<cell>.<sidecar>`)
is named so, since their names have no `_`."""


@dataclass(frozen=True)
class Prepared:
    build: dict[str, Any]
    """The build-image step's build: the generated context."""
    runtime: dict[str, Any] = field(default_factory=dict)
    """Spec fields the features add to the cell's runtime (security, volumes)."""
    order: tuple[str, ...] = ()
    """The features' references in installation order (for messages and describe)."""


def _user(spec: dict[str, Any]) -> dict[str, str]:
    """_REMOTE_USER/_CONTAINER_USER when spec.user says (else the context's env file takes
    the base image's user; the homes come from the image's /etc/passwd there)."""
    if not spec.get("user"):
        return {}
    user = str(spec["user"]).partition(":")[0]
    return {"_REMOTE_USER": user, "_CONTAINER_USER": user}


def shown(i: int, ref: str) -> str:
    return f"{ref} (spec.features[{i}])"


def prepare(spec: dict[str, Any], cell_name: str, base: str, state_dir: Path) -> Prepared:
    """Resolve, check and order the features of `spec`; write their build context for the
    image `base`. ImageBuildFailed (permanent: a change to the manifest, a feature or the
    configuration mends it) or FeatureFetchFailed (retried) say what is wrong, naming the
    feature."""
    settings = config.load(state_dir)
    store = fetch.Store(state_dir, settings.images.registry_mirrors)
    resolved = []
    options = []
    for i, entry in enumerate(spec.get("features") or []):
        name = shown(i, str(entry["ref"]))
        found = store.resolve(str(entry["ref"]), name)
        resolved.append(found)
        options.append(metadata.resolve_options(found.feature, entry.get("options") or {},
                                                name))
    placed = [order.Placed(r.ref, r.feature, r.shown) for r in resolved]
    ordered = order.install_order(placed)
    runtime = Runtime(settings.security)
    steps = []
    for i in ordered:
        runtime.add(resolved[i], resolved[i].shown)
        steps.append(context.Step(resolved[i], {**_user(spec), **options[i]}))
    folder = context.write(state_dir, cell_name, base, steps)
    build: dict[str, Any] = {"context": folder, "dockerfile": "Dockerfile"}
    timeout = (spec.get("build") or {}).get("timeoutSeconds")
    if timeout:
        build["timeoutSeconds"] = timeout
    return Prepared(build, runtime.fields(), tuple(placed[i].shown for i in ordered))


_VOLUME_NAME = re.compile(r"[^a-z0-9-]+")


class Runtime:
    """What the features ask of the container, judged against the configuration."""

    def __init__(self, policy: config.SecurityPolicy) -> None:
        self.policy = policy
        self.capabilities: list[str] = []
        self.security_opt: list[str] = []
        self.privileged = False
        self.init = False
        self.volumes: list[dict[str, str]] = []

    def add(self, resolved: fetch.Resolved, name: str) -> None:
        feature = resolved.feature
        allowed_caps = {c.upper().removeprefix("CAP_") for c in self.policy.allowed_capabilities}
        allowed_caps.update(privileges.DEFAULT_CAPABILITIES)
        for cap in feature.cap_add:
            wanted = cap.upper().removeprefix("CAP_")
            if wanted not in allowed_caps:
                raise ImageBuildFailed(
                    f"feature {name} asks for capability {wanted} (capAdd of its "
                    f"metadata); DevCell's configuration does not allow it: "
                    f"security.allowedCapabilities in {self.policy.source} would")
            if wanted not in self.capabilities:
                self.capabilities.append(wanted)
        if feature.privileged:
            if not self.policy.allow_privileged:
                raise ImageBuildFailed(
                    f"feature {name} asks for a privileged container (privileged of its "
                    f"metadata); DevCell's configuration does not allow it: "
                    f"security.allowPrivileged in {self.policy.source} would")
            self.privileged = True
        allowed_opts = set(self.policy.allowed_security_opts)
        for option in feature.security_opt:
            if option not in allowed_opts:
                raise ImageBuildFailed(
                    f"feature {name} asks for security option {option} (securityOpt of its "
                    f"metadata); DevCell's configuration does not allow it: "
                    f"security.allowedSecurityOpts in {self.policy.source} would")
            if option not in self.security_opt:
                self.security_opt.append(option)
        self.init = self.init or feature.init
        for j, mount in enumerate(feature.mounts):
            self.volumes.append(self._volume(mount, name, j))

    def _volume(self, mount: Any, name: str, j: int) -> dict[str, str]:
        fields: dict[str, str] = {}
        if isinstance(mount, str):
            for part in mount.split(","):
                key, _, value = part.partition("=")
                fields[key.strip()] = value.strip()
        elif isinstance(mount, dict):
            fields = {str(k): str(v) for k, v in mount.items()}
        target = fields.get("target") or fields.get("dst") or fields.get("destination", "")
        kind = fields.get("type", "volume")
        if kind != "volume":
            raise ImageBuildFailed(
                f"feature {name} asks for a {names.printable(kind)} mount at "
                f"{names.printable(target or '?')} (mounts[{j}] of its metadata); a feature may "
                "have volumes of the cell only (a bind mount names host paths: give it in "
                "spec.mounts, where DevCell's configuration judges it)")
        problem = security.mount_path_problem(target) if target else "is missing"
        if problem:
            raise ImageBuildFailed(f"feature {name}: mounts[{j}] of its metadata: the target "
                                   f"{names.printable(problem)}")
        source = fields.get("source") or fields.get("src") or f"feature-{j}"
        source = source.replace("-${devcontainerId}", "").replace("${devcontainerId}", "")
        volume = _VOLUME_NAME.sub("-", source.lower()).strip("-")[:55].strip("-") or f"v{j}"
        taken = {v["name"] for v in self.volumes}
        unique, n = volume, 2
        while unique in taken:  # two features naming one source: each its own volume
            unique, n = f"{volume}-{n}", n + 1
        return {"name": unique, "mountPath": target}

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        security: dict[str, Any] = {}
        if self.capabilities:
            security["capabilities"] = list(self.capabilities)
        if self.security_opt:
            security["securityOpt"] = list(self.security_opt)
        if self.privileged:
            security["privileged"] = True
        if self.init:
            security["init"] = True
        if security:
            out["security"] = security
        if self.volumes:
            out["volumes"] = self.volumes
        return out


def with_runtime(spec: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """`spec` with what the features ask of the container merged in: their capabilities and
    options beside the manifest's own spec.security, their volumes after spec.volumes (a
    volume at a path the manifest already mounts a volume at is the manifest's)."""
    if not runtime:
        return spec
    out = dict(spec)
    if "security" in runtime:
        mine = dict(spec.get("security") or {})
        for key, value in runtime["security"].items():
            if isinstance(value, list):
                mine[key] = list(dict.fromkeys([*(mine.get(key) or []), *value]))
            else:
                mine[key] = bool(mine.get(key)) or value
        out["security"] = mine
    if "volumes" in runtime:
        volumes = list(spec.get("volumes") or [])
        paths = {v["mountPath"] for v in volumes}
        names = {v["name"] for v in volumes}
        for volume in runtime["volumes"]:
            if volume["mountPath"] in paths or volume["name"] in names:
                continue
            volumes.append(volume)
            paths.add(volume["mountPath"])
            names.add(volume["name"])
        out["volumes"] = volumes
    return out
