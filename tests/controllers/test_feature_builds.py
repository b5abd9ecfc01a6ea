"""What a feature's metadata asks of the container, judged as a manifest's own spec.security
is: refused naming the feature and the allowance, granted with it; volume mounts become the
cell's volumes (each its own), bind mounts are refused; merged into the runtime's spec."""

from __future__ import annotations

from typing import Any

import pytest

from devcell.backends.features import fetch
from devcell.backends.features.metadata import Feature
from devcell.config import SecurityPolicy
from devcell.controllers import feature_builds
from devcell.errors import ImageBuildFailed
from devcell.manifests import feature_refs


def _resolved(**meta: Any) -> fetch.Resolved:
    ref = feature_refs.parse("ghcr.io/devcontainers/features/x:1")
    return fetch.Resolved(ref, "x", "/nowhere", "", Feature(id="x", **meta))


def _runtime(policy: SecurityPolicy, *features: fetch.Resolved) -> dict[str, Any]:
    runtime = feature_builds.Runtime(policy)
    for i, resolved in enumerate(features):
        runtime.add(resolved, f"f{i}")
    return runtime.fields()


@pytest.mark.parametrize(("meta", "allowance"), [
    ({"cap_add": ("SYS_PTRACE",)}, "security.allowedCapabilities"),
    ({"privileged": True}, "security.allowPrivileged"),
    ({"security_opt": ("seccomp=unconfined",)}, "security.allowedSecurityOpts"),
])
def test_a_privilege_is_refused_naming_the_feature_and_the_allowance(
        meta: dict[str, Any], allowance: str) -> None:
    with pytest.raises(ImageBuildFailed, match=f"feature f0 asks for .*{allowance}"):
        _runtime(SecurityPolicy(source="cfg.yaml"), _resolved(**meta))


def test_granted_privileges_become_the_runtimes_security() -> None:
    policy = SecurityPolicy(allowed_capabilities=("SYS_PTRACE",), allow_privileged=True,
                            allowed_security_opts=("seccomp=unconfined",))
    fields = _runtime(policy, _resolved(cap_add=("CAP_SYS_PTRACE", "CHOWN"), init=True),
                      _resolved(privileged=True, security_opt=("seccomp=unconfined",)))
    assert fields == {"security": {"capabilities": ["SYS_PTRACE", "CHOWN"],
                                   "securityOpt": ["seccomp=unconfined"], "privileged": True,
                                   "init": True}}
    spec = {"security": {"capabilities": ["NET_ADMIN"]}, "volumes": []}
    merged = feature_builds.with_runtime(spec, fields)
    assert merged["security"]["capabilities"] == ["NET_ADMIN", "SYS_PTRACE", "CHOWN"]


def test_volume_mounts_become_cell_volumes_and_binds_are_refused() -> None:
    fields = _runtime(SecurityPolicy(), _resolved(mounts=(
        {"source": "dind-var-lib-docker-${devcontainerId}", "target": "/var/lib/docker",
         "type": "volume"}, "source=cache,target=/cache,type=volume")),
        _resolved(mounts=("source=cache,target=/other,type=volume",)))
    assert fields["volumes"] == [{"name": "dind-var-lib-docker", "mountPath": "/var/lib/docker"},
                                 {"name": "cache", "mountPath": "/cache"},
                                 {"name": "cache-2", "mountPath": "/other"}]
    with pytest.raises(ImageBuildFailed, match="asks for a bind mount at /etc"):
        _runtime(SecurityPolicy(), _resolved(mounts=("source=/,target=/etc,type=bind",)))
    with pytest.raises(ImageBuildFailed, match="would hide or overwrite /proc"):
        _runtime(SecurityPolicy(), _resolved(mounts=("source=x,target=/proc/x,type=volume",)))
