"""`import devcontainer`: runArgs and the top-level capAdd, securityOpt, privileged and init
become spec.security (and spec.network.mode host, spec.user), each only where DevCell's
configuration allows it, the refusal naming the line and the allowance."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devcell.api import devcontainer
from devcell.errors import ManifestError

ALLOW_ALL = """\
apiVersion: devcell.dev/v1alpha1
kind: Config
security:
  allowedCapabilities: [SYS_PTRACE, NET_ADMIN]
  allowedSecurityOpts: [seccomp=unconfined, apparmor=unconfined, no-new-privileges=false]
  allowPrivileged: true
  allowedDevices: [/dev/null, /dev/zero]
  allowHostNetwork: true
"""


def _sample(root: Path, data: dict[str, Any] | str) -> Path:
    path = root / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def _state(tmp_path: Path, config: str | None = None) -> Path:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    if config is not None:
        (state / "config.yaml").write_text(config)
        (state / "config.yaml").chmod(0o600)
    return state


def _convert(path: Path, state: Path) -> devcontainer.Conversion:
    return devcontainer.convert(path, name="dbg", out_dir=path.parent.parent, state_dir=state,
                                env={"HOME": "/home/dev"})


def test_without_allowances_every_privilege_is_refused_at_its_line_in_one_round(
        tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", textwrap.dedent("""\
        {
          "image": "devcell/busybox:latest",
          "capAdd": ["SYS_PTRACE"],
          "securityOpt": ["seccomp=unconfined"],
          "privileged": true,
          "runArgs": ["--cap-add=NET_ADMIN",
                      "--security-opt", "apparmor:unconfined",
                      "--device=/dev/null",
                      "--network=host",
                      "--privileged"],
          "portsAttributes": {}
        }
        """))
    with pytest.raises(devcontainer.Refused) as refused:
        _convert(path, _state(tmp_path))
    shown = [str(p).removeprefix(str(path)) for p in refused.value.problems]
    expect = [
        (":3: capAdd[0]: ", "listing SYS_PTRACE in security.allowedCapabilities"),
        (":4: securityOpt[0]: ", "listing seccomp=unconfined in security.allowedSecurityOpts"),
        (":5: privileged: ", "security.allowPrivileged: true"),
        (":6: runArgs: ", "--cap-add NET_ADMIN is refused: capability NET_ADMIN is not allowed"),
        (":7: runArgs: ", "--security-opt apparmor:unconfined is refused: security option "
                          "apparmor=unconfined"),
        (":8: runArgs: ", "--device /dev/null is refused: host device /dev/null is not allowed"),
        (":9: runArgs: ", "--network host is refused: the host's network is not shared unless"),
        (":10: runArgs: ", "--privileged is refused: a privileged container"),
    ]
    for where, message in expect:
        assert any(s.startswith(where) and message in s for s in shown), (where, shown)
    assert len(shown) == len(expect), shown
    assert "portsAttributes: not converted" in "\n".join(refused.value.notes)


def test_allowed_privileges_are_written_as_spec_security_once_each(tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", {
        "image": "devcell/busybox:latest",
        "capAdd": ["SYS_PTRACE", "CHOWN"],
        "securityOpt": ["seccomp:unconfined", "no-new-privileges"],
        "init": True,
        "runArgs": ["--cap-add", "cap_sys_ptrace,NET_ADMIN", "--security-opt=seccomp=unconfined",
                    "--device", "/dev/zero:/dev/z:r", "--init", "--privileged",
                    "--security-opt", "no-new-privileges=true"],
    })
    state = _state(tmp_path, ALLOW_ALL)
    result = _convert(path, state)
    assert result.manifest["spec"]["security"] == {
        "capabilities": ["SYS_PTRACE", "NET_ADMIN", "CHOWN"],  # runArgs first
        "securityOpt": ["seccomp=unconfined"],  # no-new-privileges is DevCell's default
        "devices": ["/dev/zero:/dev/z:r"], "init": True, "privileged": True}
    assert result.problems == []


def test_the_host_network_is_the_cells_where_allowed_and_ports_are_the_hosts(
        tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", {"image": "devcell/busybox:latest",
                                       "forwardPorts": [8000],
                                       "runArgs": ["--network", "host"]})
    result = _convert(path, _state(tmp_path, ALLOW_ALL))
    assert result.manifest["spec"]["network"] == {"mode": "host"}
    assert any(n.startswith("forwardPorts: not converted (the cell uses the host's network")
               for n in result.notes)


@pytest.mark.parametrize("arg,message", [
    ("--cap-add=ALL", "every capability at once is not passed on"),
    ("--cap-add=SYS_PTRAC", "'SYS_PTRAC' is not a Linux capability"),
    ("--security-opt=seccomp=/work/profile.json", "a seccomp profile file is not read"),
    ("--security-opt=label:bogus", "not a security option a cell may ask for"),
    ("--device=relative", "expected a host device path under /dev"),
    ("--device=/dev/no-such-device", "host device /dev/no-such-device does not exist"),
])
def test_what_cannot_be_passed_on_is_refused_with_why(tmp_path: Path, arg: str,
                                                      message: str) -> None:
    config = ALLOW_ALL.replace("/dev/zero]", "/dev/zero, /dev/no-such-device]")
    path = _sample(tmp_path / "proj", {"image": "devcell/busybox:latest", "runArgs": [arg]})
    with pytest.raises(ManifestError) as refused:
        _convert(path, _state(tmp_path, config))
    assert message in str(refused.value)
    assert f"runArgs: {arg.replace('=', ' ', 1)} is refused" in str(refused.value)


def test_flags_without_a_field_are_named_with_why(tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", {
        "image": "devcell/busybox:latest", "init": False,
        "runArgs": ["--shm-size=2g", "--ulimit", "nofile=1024:1024", "--hostname", "dev",
                    "--cap-drop=ALL", "--user", "1000:1000"]})
    result = _convert(path, _state(tmp_path))
    notes = "\n".join(result.notes)
    assert "runArgs --shm-size 2g: not converted (no equivalent in DevCell: /dev/shm" in notes
    assert "runArgs --ulimit nofile=1024:1024: not converted" in notes
    assert "runArgs --hostname dev: not converted (the cell's host name is its name" in notes
    assert "runArgs --cap-drop ALL: not converted (a cell has every capability dropped" in notes
    assert "init: not converted (every cell runs under the engine's init anyway" in notes
    assert result.manifest["spec"]["user"] == "1000:1000"
    assert "security" not in result.manifest["spec"]


def test_sudo_under_a_lifted_no_new_privileges_is_said_to_work(tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", {
        "image": "devcell/busybox:latest", "remoteUser": "node",
        "postCreateCommand": "sudo apt-get update",
        "runArgs": ["--security-opt", "no-new-privileges=false"]})
    result = _convert(path, _state(tmp_path, ALLOW_ALL))
    assert result.manifest["spec"]["security"] == {"securityOpt": ["no-new-privileges=false"]}
    assert any("the cell lifts no-new-privileges" in n and "sudo rights" in n
               for n in result.notes), result.notes


@pytest.mark.parametrize("spelling", ["t", "T", "TRUE", "True", "1"])
def test_every_true_docker_reads_asks_for_privileged(tmp_path: Path, spelling: str) -> None:
    """docker reads a flag's value as Go's ParseBool does: `--privileged=t` is privileged.
    DevCell dropped it silently: the converted cell differed from the dev container unsaid."""
    path = _sample(tmp_path / "proj", {"image": "devcell/busybox:latest",
                                       "runArgs": [f"--privileged={spelling}"]})
    with pytest.raises(ManifestError, match="privileged"):
        _convert(path, _state(tmp_path))
    allowed = _convert(path, _state(tmp_path, ALLOW_ALL))
    assert allowed.manifest["spec"]["security"]["privileged"] is True
    off = _sample(tmp_path / "off", {"image": "devcell/busybox:latest",
                                     "runArgs": ["--privileged=F", "--init=0"]})
    assert "security" not in _convert(off, _state(tmp_path)).manifest["spec"]
