"""Pure checks (no engine): create arguments, security refusals, supervisor script, base image."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from devcell.backends import supervisor
from devcell.backends.container import base_image
from devcell.backends.container import spec as container_spec
from devcell.backends.container.layout import Layout
from devcell.backends.host.ids import safe_id
from devcell.config import SecurityPolicy
from devcell.errors import BackendError
from tests.backends.container.support import spec
from tests.backends.engine import in_ci


def kwargs(tmp_path: Path, policy: SecurityPolicy | None = None, **overrides: Any
           ) -> dict[str, Any]:
    return container_spec.create_kwargs(
        Layout(tmp_path), name="devcell-x-1", cell_id="cell_x", cell_name="x",
        spec=spec(**overrides), volume_id="vol_x", runtime_hash="h", policy=policy)


def test_defaults_are_locked_down(tmp_path: Path) -> None:
    args = kwargs(tmp_path)
    assert args["privileged"] is False and args["cap_drop"] == ["ALL"]
    assert args["network_mode"] == "none" and args["security_opt"] == ["no-new-privileges"]
    assert {m["Target"] for m in args["mounts"]} == {"/devcell", "/workspace", "/var/log/devcell"}
    assert next(m for m in args["mounts"] if m["Target"] == "/devcell")["ReadOnly"] is True
    container_spec.check_security(Layout(tmp_path), args)


def test_spec_security_reaches_the_engine_only_as_the_configuration_allows(
        tmp_path: Path) -> None:
    asked = {"capabilities": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"],
             "devices": ["/dev/null:/dev/mine:r"], "init": True}
    allowed = SecurityPolicy(allowed_capabilities=("SYS_PTRACE",),
                             allowed_security_opts=("seccomp=unconfined",),
                             allowed_devices=("/dev/null",))
    args = kwargs(tmp_path, allowed, security=asked)
    assert args["cap_drop"] == ["ALL"] and args["cap_add"][-1] == "SYS_PTRACE"
    assert args["security_opt"] == ["no-new-privileges", "seccomp=unconfined"]
    assert args["devices"] == ["/dev/null:/dev/mine:r"] and args["init"] is True
    container_spec.check_security(Layout(tmp_path), args, allowed)
    with pytest.raises(BackendError, match=r"spec.security.capabilities\[0\]: capability "
                                           "SYS_PTRACE is not allowed"):
        kwargs(tmp_path, security=asked)  # the configuration tightened since admission
    with pytest.raises(BackendError, match="allowedCapabilities.*allowedSecurityOpts.*"
                                           "allowedDevices"):
        container_spec.check_security(Layout(tmp_path), args)


def test_no_new_privileges_stays_beside_a_writable_host_mount(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    policy = SecurityPolicy(allowed_host_paths=(str(tmp_path / "src"),),
                            allowed_security_opts=("no-new-privileges=false",))
    args = kwargs(tmp_path / "state", policy,
                  mounts=[{"hostPath": str(tmp_path / "src"), "mountPath": "/src"}])
    container_spec.check_security(Layout(tmp_path / "state"), args, policy)
    args["security_opt"] = []
    with pytest.raises(BackendError, match="no-new-privileges must stay set"):
        container_spec.check_security(Layout(tmp_path / "state"), args, policy)


def test_resources_and_env(tmp_path: Path) -> None:
    args = kwargs(tmp_path, resources={"cpus": 1.5, "memory": "1Gi"},
                  env=[{"name": "A", "value": "1"}, {"name": "S", "value": "x", "secret": True}])
    assert args["nano_cpus"] == 1_500_000_000 and args["mem_limit"] == 2**30
    assert args["environment"] == {"A": "1"}  # the secret is not in the container's config


@pytest.mark.parametrize("text,value", [("512Mi", 512 * 2**20), ("2G", 2 * 10**9),
                                        ("8388608", 8388608)])
def test_memory_units(text: str, value: int) -> None:
    assert container_spec.memory_bytes(text) == value


def test_bridge_publishes_on_loopback_unless_the_configuration_allows_more(
        tmp_path: Path) -> None:
    network = {"mode": "bridge", "ports": [
        {"containerPort": 8080}, {"containerPort": 53, "hostPort": 5353, "hostIP": "0.0.0.0"}]}
    with pytest.raises(BackendError, match="publishing on 0.0.0.0 would expose"):
        kwargs(tmp_path, network=network)
    args = kwargs(tmp_path, network=network,
                  policy=SecurityPolicy(allowed_publish_addresses=("0.0.0.0",)))
    assert args["network"] == container_spec.BRIDGE_NETWORK
    assert args["ports"] == {"8080/tcp": [("127.0.0.1", 8080)], "53/tcp": [("0.0.0.0", 5353)]}
    with pytest.raises(BackendError, match="published only with (spec.)?network.mode bridge"):
        kwargs(tmp_path, network={"mode": "none", "ports": [{"containerPort": 1}]})


def test_one_container_port_is_published_on_every_host_port_asked(tmp_path: Path) -> None:
    network = {"mode": "bridge", "ports": [
        {"containerPort": 80, "hostPort": 8080}, {"containerPort": 80, "hostPort": 8081}]}
    args = kwargs(tmp_path, network=network)
    assert args["ports"] == {"80/tcp": [("127.0.0.1", 8080), ("127.0.0.1", 8081)]}


def test_host_network_only_when_the_configuration_allows_it(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="host networking .* off by default"):
        kwargs(tmp_path, network={"mode": "host"})
    allowed = SecurityPolicy(allow_host_network=True)
    args = kwargs(tmp_path, network={"mode": "host"}, policy=allowed)
    assert args["network_mode"] == "host"
    container_spec.check_security(Layout(tmp_path), args, allowed)
    with pytest.raises(BackendError, match="network mode host is not allowed"):
        container_spec.check_security(Layout(tmp_path), args)  # the policy was tightened


def test_host_mounts_only_under_allowed_paths(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "app").mkdir(parents=True)
    state = tmp_path / "state"
    mounts = [{"hostPath": str(src / "app"), "mountPath": "/src", "readOnly": True}]
    with pytest.raises(BackendError, match="host bind mounts are off by default"):
        container_spec.create_kwargs(
            Layout(state), name="devcell-x-1", cell_id="cell_x", cell_name="x",
            spec=spec(mounts=mounts), volume_id="vol_x", runtime_hash="h")
    allowed = SecurityPolicy(allowed_host_paths=(str(src),))
    args = container_spec.create_kwargs(
        Layout(state), name="devcell-x-1", cell_id="cell_x", cell_name="x",
        spec=spec(mounts=mounts), volume_id="vol_x", runtime_hash="h", policy=allowed)
    bind = next(m for m in args["mounts"] if m["Target"] == "/src")
    assert bind == {"Type": "bind", "Source": str(src / "app"), "Target": "/src", "ReadOnly": True}
    container_spec.check_security(Layout(state), args, allowed)
    with pytest.raises(BackendError, match="off by default"):
        container_spec.check_security(Layout(state), args)  # allowlist emptied since


@pytest.mark.parametrize("change,message", [
    ({"privileged": True}, "privileged"),
    ({"cap_add": ["SYS_ADMIN"]}, "may not be added"),
    ({"cap_drop": []}, "dropped first"),
    ({"pid_mode": "host"}, "pid_mode"),
    ({"userns_mode": "host"}, "userns_mode"),
    ({"devices": ["/dev/kvm"]}, "devices"),
    ({"network_mode": "container:abc"}, "network mode"),
    ({"security_opt": ["seccomp=unconfined"]}, "security option"),
    ({"mounts": [{"Type": "bind", "Source": "/etc", "Target": "/x"}]}, "mount of /etc: host bind"),
    ({"mounts": [{"Type": "volume", "Source": "named", "Target": "/x"}]}, "not a bind mount"),
])
def test_security_refusals(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    args = kwargs(tmp_path)
    args.update(change)
    with pytest.raises(BackendError, match=message):
        container_spec.check_security(Layout(tmp_path), args)


def test_a_symlink_out_of_the_state_dir_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "escape").symlink_to("/etc")
    args = kwargs(state)
    args["mounts"].append({"Type": "bind", "Source": str(state / "escape"), "Target": "/e"})
    with pytest.raises(BackendError, match="resolves to /etc"):
        container_spec.check_security(Layout(state), args)


@pytest.mark.parametrize("path", ["/", "/proc", "/etc/x", "/devcell", "/var/log/devcell",
                                  "relative", "/a/../b", "/a:b"])
def test_unsafe_mount_paths(tmp_path: Path, path: str) -> None:
    with pytest.raises(BackendError, match="mountPath"):
        kwargs(tmp_path, workspace={"mountPath": path})


@pytest.mark.parametrize("value", ["../a", "a/b", "", "UPPER", "a.b", "-a", "a" * 129])
def test_safe_id(value: str) -> None:
    with pytest.raises(BackendError):
        safe_id("volume", value)


def test_supervisor_quotes_arguments_and_runs_under_sh(tmp_path: Path) -> None:
    hostile = "it's $(touch /tmp/pwned) `id` \"q\" ; rm -rf /"
    body = spec(services=[{"name": "echo", "command": ["printf", "%s\\n", hostile],
                           "restart": "Never"}])
    script = supervisor.render_script("x", body)
    assert "pwned) `id`" in script and supervisor.SECRETS in script
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    secrets_text = supervisor.render_secrets({"TOKEN": hostile})
    out = subprocess.run(["sh", "-c", secrets_text + 'printf %s "$TOKEN"'],
                         capture_output=True, text=True)
    assert out.stdout == hostile


@pytest.mark.parametrize("services", [
    [{"name": "a", "command": ["x"]}, {"name": "a", "command": ["y"]}],
    [{"name": "../a", "command": ["x"]}],
    [{"name": "a", "command": []}],
    [{"name": "a", "command": ["x"], "restart": "Sometimes"}],
])
def test_bad_services_are_refused(services: list[dict[str, Any]]) -> None:
    with pytest.raises(BackendError):
        supervisor.render_script("x", spec(services=services))


def test_base_image_rootfs() -> None:
    try:
        data = base_image.rootfs_tar()
    except BackendError as exc:  # no busybox-static: CI installs it, so only skip elsewhere
        if in_ci():
            raise
        pytest.skip(str(exc))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].isfile() and members["bin/busybox"].mode == 0o755
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert members["tmp"].mode == 0o1777 and "etc/passwd" in members
    assert all(not m.issym() or "/" not in m.linkname for m in members.values())


def test_the_engine_limits_are_checked_again_before_the_engine_call(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"spec.workspace.mountPath: /.dockerenv is reserved"):
        kwargs(tmp_path, workspace={"mountPath": "/.dockerenv"})
    with pytest.raises(BackendError, match="spec.resources.cpus: must be at least 0.01"):
        kwargs(tmp_path, resources={"cpus": 0.001})


def test_every_devcell_label_is_set_by_devcell_not_inherited_from_the_image(
        tmp_path: Path) -> None:
    """A container inherits its image's labels and the image is the cell's to write: each
    DevCell label DevCell has no value for is set empty, so an image's LABEL cannot fill it."""
    from devcell.backends.container import labels as devcell_labels

    made = container_spec.create_kwargs(
        Layout(tmp_path), name="devcell-x-1", cell_id="cell_x", cell_name="x", spec=spec(),
        volume_id=None, runtime_hash="h")["labels"]
    for key in (devcell_labels.VOLUME, devcell_labels.OPERATION, devcell_labels.BASE_IMAGE,
                devcell_labels.KEPT_ROOTFS):
        assert made[key] == ""
