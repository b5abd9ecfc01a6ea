"""spec.security: privileges a cell asks for, each refused unless DevCell's configuration allows
it (the refusal naming the allowance), applied as the engine's create arguments."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcell import admission, privileges
from devcell.backends import limits
from devcell.config import SecurityPolicy, parse
from devcell.controllers.cell import runtime_hash
from devcell.errors import ManifestError
from devcell.manifests.loader import read_sources
from devcell.store.db import open_database

CFG = SecurityPolicy(source="cfg.yaml")


def problems(security: dict[str, Any], policy: SecurityPolicy = CFG) -> dict[str, str]:
    found = privileges.cell_problems({"security": security}, policy)
    return {".".join(str(p) for p in path): message for path, message in found}


def test_nothing_asked_nothing_refused() -> None:
    assert problems({}) == {}
    assert problems({"init": True, "capabilities": ["CHOWN", "KILL"]}) == {}  # the defaults


@pytest.mark.parametrize("security,field,allowance", [
    ({"capabilities": ["CHOWN", "SYS_PTRACE"]}, "security.capabilities.1",
     "listing SYS_PTRACE in security.allowedCapabilities of DevCell's configuration "
     "(cfg.yaml)"),
    ({"securityOpt": ["seccomp=unconfined"]}, "security.securityOpt.0",
     "listing seccomp=unconfined in security.allowedSecurityOpts"),
    ({"privileged": True}, "security.privileged", "security.allowPrivileged: true in"),
    ({"devices": ["/dev/null"]}, "security.devices.0",
     "listing it in security.allowedDevices"),
])
def test_each_privilege_is_refused_naming_the_allowance_that_would_permit_it(
        security: dict[str, Any], field: str, allowance: str) -> None:
    found = problems(security)
    assert list(found) == [field]
    assert allowance in found[field]


def test_each_privilege_is_admitted_when_its_allowance_names_it() -> None:
    policy = SecurityPolicy(allowed_capabilities=("SYS_PTRACE",),
                            allowed_security_opts=("seccomp=unconfined",),
                            allow_privileged=True, allowed_devices=("/dev/null",))
    asked = {"capabilities": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"],
             "privileged": True, "devices": ["/dev/null:/dev/mine:r"]}
    assert problems(asked, policy) == {}
    assert list(problems({"capabilities": ["SYS_ADMIN"]}, policy)) == [
        "security.capabilities.0"]  # one capability allowed is not every one
    assert list(problems({"securityOpt": ["apparmor=unconfined"]}, policy)) == [
        "security.securityOpt.0"]


def test_a_device_is_judged_by_where_its_links_lead(tmp_path: Path) -> None:
    link = tmp_path / "tty"
    link.symlink_to("/dev/null")
    allowed = SecurityPolicy(allowed_devices=("/dev/null",))
    assert problems({"devices": [str(link)]}, allowed) == {}
    elsewhere = SecurityPolicy(allowed_devices=(str(tmp_path),))  # the link, not its target
    assert "resolves to /dev/null" in problems({"devices": [str(link)]}, elsewhere)[
        "security.devices.0"]
    directory = SecurityPolicy(allowed_devices=("/dev",))
    assert "does not exist" in problems({"devices": ["/dev/no-such"]}, directory)[
        "security.devices.0"]
    (tmp_path / "file").write_text("")
    assert "is not a device" in problems({"devices": [str(tmp_path / "file")]}, SecurityPolicy(
        allowed_devices=(str(tmp_path),)))["security.devices.0"]


def test_init_false_is_refused_as_every_cell_runs_under_one() -> None:
    assert "leave init out" in problems({"init": False})["security.init"]


def test_engine_arguments_keep_the_defaults_and_add_what_was_asked() -> None:
    plain = privileges.engine_arguments({})
    assert plain == {"privileged": False, "cap_drop": ["ALL"],
                     "cap_add": list(privileges.DEFAULT_CAPABILITIES),
                     "security_opt": ["no-new-privileges"]}
    asked = privileges.engine_arguments({"security": {
        "capabilities": ["SYS_PTRACE", "CHOWN"], "securityOpt": ["seccomp=unconfined"],
        "devices": ["/dev/null", "/dev/zero:/dev/z:r"], "init": True}})
    assert asked["cap_add"] == [*privileges.DEFAULT_CAPABILITIES, "SYS_PTRACE"]
    assert asked["security_opt"] == ["no-new-privileges", "seccomp=unconfined"]
    assert asked["devices"] == ["/dev/null:/dev/null:rwm", "/dev/zero:/dev/z:r"]
    lifted = privileges.engine_arguments({"security": {
        "securityOpt": ["no-new-privileges=false"]}})
    assert lifted["security_opt"] == []  # setuid programs (sudo) gain privileges again


def test_the_last_check_refuses_arguments_the_configuration_does_not_allow() -> None:
    asked = privileges.engine_arguments({"security": {
        "capabilities": ["SYS_PTRACE"], "securityOpt": ["no-new-privileges=false"],
        "privileged": True, "devices": ["/dev/null"]}})
    found = " ".join(privileges.engine_problems(asked, SecurityPolicy()))
    for allowance in ("allowPrivileged", "allowedCapabilities", "no-new-privileges must be set",
                      "allowedDevices"):
        assert allowance in found
    allowed = SecurityPolicy(allowed_capabilities=("SYS_PTRACE",), allow_privileged=True,
                             allowed_security_opts=("no-new-privileges=false",),
                             allowed_devices=("/dev/null",))
    assert list(privileges.engine_problems(asked, allowed)) == []


def test_vm_cells_refuse_spec_security_naming_the_field() -> None:
    spec = {"backend": "vm", "security": {"capabilities": ["SYS_PTRACE"]}}
    found = dict(limits.cell_problems(spec, "vm"))
    assert "spec.security is for container cells" in found[("spec", "security")]
    assert dict(limits.cell_problems({**spec, "backend": "container"}, "container")) == {}


def test_a_changed_security_recreates_the_runtime_but_init_alone_does_not() -> None:
    spec: dict[str, Any] = {"image": "x"}
    key = b"k" * 32
    plain = runtime_hash(spec, key)
    assert runtime_hash({**spec, "security": {"init": True}}, key) == plain
    assert runtime_hash({**spec, "security": {}}, key) == plain
    assert runtime_hash({**spec, "security": {"capabilities": ["SYS_PTRACE"]}}, key) != plain


def test_the_configuration_reads_the_allowances(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    data = yaml.safe_dump({"apiVersion": "devcell.dev/v1alpha1", "kind": "Config",
                           "security": {"allowedCapabilities": ["SYS_PTRACE"],
                                        "allowedSecurityOpts": ["seccomp=unconfined"],
                                        "allowPrivileged": True,
                                        "allowedDevices": ["/dev/fuse"]}}).encode()
    policy = parse(path, data).security
    assert policy.allowed_capabilities == ("SYS_PTRACE",)
    assert policy.allowed_security_opts == ("seccomp=unconfined",)
    assert policy.allow_privileged and policy.allowed_devices == ("/dev/fuse",)
    bad = data.replace(b"SYS_PTRACE", b"SYS_PTRAC").replace(b"seccomp=unconfined",
                                                             b"seccomp=/tmp/x.json")
    with pytest.raises(Exception) as refused:
        parse(path, bad)
    shown = str(refused.value)
    assert "allowedCapabilities" in shown and "allowedSecurityOpts" in shown


def _cell(security: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "dbg"},
            "spec": {"backend": "container", "image": "devcell/busybox:latest",
                     "security": security}}


def test_admission_refuses_naming_file_line_field_and_allowance(tmp_path: Path) -> None:
    state = tmp_path / "state"
    db = open_database(state)
    try:
        manifest = tmp_path / "cell.yaml"
        manifest.write_text(yaml.safe_dump(_cell({"capabilities": ["SYS_PTRACE"]}),
                                           sort_keys=False))
        with pytest.raises(ManifestError) as refused:
            admission.apply(db, read_sources([str(manifest)]))
        problem = refused.value.problems[0]
        assert problem.field == "spec.security.capabilities[0]" and problem.line
        assert problem.file == str(manifest)
        assert "security.allowedCapabilities" in problem.message
        config = state / "config.yaml"
        config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                          "security: {allowedCapabilities: [SYS_PTRACE]}\n")
        os.chmod(config, 0o600)
        assert admission.apply(db, read_sources([str(manifest)]))
    finally:
        db.close()


def test_lifting_no_new_privileges_is_refused_beside_a_host_folder_the_cell_writes(
        tmp_path: Path) -> None:
    from devcell.security import cell_problems

    policy = SecurityPolicy(allowed_security_opts=("no-new-privileges=false",),
                            allowed_host_paths=(str(tmp_path),))
    (tmp_path / "src").mkdir()
    spec: dict[str, Any] = {
        "security": {"securityOpt": ["no-new-privileges=false"]},
        "mounts": [{"hostPath": str(tmp_path / "src"), "mountPath": "/src"}]}
    found = dict(cell_problems(spec, policy, tmp_path / "state"))
    assert "cannot go with a host folder the cell writes (/src)" in found[
        ("security", "securityOpt", 0)]
    spec["mounts"][0]["readOnly"] = True
    assert dict(cell_problems(spec, policy, tmp_path / "state")) == {}
