"""What an imported cell needs at run time that devcontainer.json only implies
(api/devcontainer_runtime.py): a network for its lifecycle commands, hostRequirements as
limits, sudo in a hook warned about when the hooks do not run as root; and every warning
shown even when the file is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devcell.api import devcontainer, devcontainer_runtime
from tests.api.test_devcontainer import _sample
from tests.conftest import Cli


def _spec(tmp_path: Path, data: dict[str, object]) -> tuple[dict, devcontainer.Conversion]:
    path = _sample(tmp_path, json.dumps({"image": "devcell/busybox:latest", **data}))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path,
                                  state_dir=tmp_path / "state", env={})
    assert result.problems == []
    return result.manifest["spec"], result


@pytest.mark.parametrize("hook", devcontainer_runtime.NETWORK_HOOKS)
def test_a_lifecycle_command_gives_the_cell_a_bridge_and_says_why(tmp_path: Path,
                                                                  hook: str) -> None:
    spec, result = _spec(tmp_path, {hook: "pip install -r requirements.txt"})
    assert spec["network"] == {"mode": "bridge"}
    assert result.said[1].startswith(f"network: bridge, for the lifecycle commands ({hook})")


def test_no_lifecycle_command_keeps_no_network_and_says_how_to_have_one(
        tmp_path: Path) -> None:
    spec, result = _spec(tmp_path, {})
    assert "network" not in spec
    assert "write spec.network.mode: bridge" in result.said[1]


def test_network_none_in_run_args_keeps_none(tmp_path: Path) -> None:
    spec, result = _spec(tmp_path, {"postCreateCommand": "make", "runArgs": ["--network=none"]})
    assert "network" not in spec and result.said[1] == "network: none (runArgs --network none)"


def test_forwarded_ports_keep_their_bridge(tmp_path: Path) -> None:
    spec, _ = _spec(tmp_path, {"postCreateCommand": "make", "forwardPorts": [8000]})
    assert spec["network"]["mode"] == "bridge" and spec["network"]["ports"]


def test_host_requirements_become_limits(tmp_path: Path) -> None:
    cpus = os.cpu_count() or 1
    spec, result = _spec(tmp_path, {"hostRequirements": {"cpus": 1, "memory": "4gb",
                                                          "storage": "32gb"}})
    assert spec["resources"] == {"cpus": 1.0, "memory": "4Gi"}
    assert "hostRequirements.storage: not converted" in "\n".join(result.notes)
    spec, result = _spec(tmp_path, {"hostRequirements": {"cpus": cpus + 8, "memory": "1.5gb"},
                                    "runArgs": ["--memory=512m"]})
    assert spec["resources"] == {"cpus": float(cpus), "memory": "512Mi"}  # runArgs win
    assert f"hostRequirements.cpus: {cpus + 8} asked, this machine has {cpus}" in \
        "\n".join(result.notes)


def test_sudo_is_warned_about_as_root_or_not(tmp_path: Path) -> None:
    _, result = _spec(tmp_path, {"postStartCommand": "sudo /usr/local/bin/init-firewall.sh"})
    assert [n for n in result.notes if n.startswith(
        "postStartCommand: uses sudo; the hooks run as root, so it is not needed")]
    assert devcontainer_runtime.sudo({"postStartCommand": ["sudo", "x"],
                                      "onCreateCommand": "pseudo x; echo sudo"}, "node") == [
        "postStartCommand: uses sudo, which cannot work here: the hooks run as node, and a "
        "cell runs with no-new-privileges (a setuid sudo gains nothing) and most capabilities "
        "dropped; do the privileged part in a Dockerfile RUN step (build), or ask for runArgs "
        "--security-opt no-new-privileges=false where DevCell's configuration allows it "
        "(security.allowedSecurityOpts)"]


def test_a_refused_file_shows_every_warning_too(cli: Cli, tmp_path: Path) -> None:
    _sample(tmp_path / "proj", json.dumps({
        "image": "devcell/busybox:latest", "privileged": True, "portsAttributes": {},
        "containerEnv": {"A": "${localEnv:DEVCELL_TEST_UNSET}"}}))
    done = cli("import", "devcontainer", str(tmp_path / "proj"))
    assert done.returncode != 0 and done.stdout == ""
    assert "portsAttributes: not converted" in done.stderr
    assert "privileged: a privileged container" in done.stderr
    assert "security.allowPrivileged" in done.stderr
    assert "containerEnv.A: ${localEnv:DEVCELL_TEST_UNSET} is not set" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_dockerfile_outside_the_build_context_is_accepted_as_docker_build_f(
        tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", json.dumps({
        "build": {"dockerfile": "../docker/Dockerfile.dev", "context": "."}}))
    (tmp_path / "proj" / "docker").mkdir()
    (tmp_path / "proj" / "docker" / "Dockerfile.dev").write_text("FROM scratch\n")
    result = devcontainer.convert(path, name=None, out_dir=tmp_path / "proj",
                                  state_dir=tmp_path / "state", env={})
    assert result.manifest["spec"]["build"] == {"context": ".devcontainer",
                                                "dockerfile": "../docker/Dockerfile.dev"}
    assert result.problems == []
    with pytest.raises(devcontainer.Refused) as refused:  # the manifest below the Dockerfile
        devcontainer.convert(path, name=None, out_dir=path.parent,
                             state_dir=tmp_path / "state", env={})
    assert "lies outside the directory of the manifest" in str(refused.value)


def test_no_image_is_refused_as_the_devcontainer_cli_refuses_it(tmp_path: Path) -> None:
    path = _sample(tmp_path, json.dumps({"name": "x", "postCreateCommand": "make"}))
    with pytest.raises(devcontainer.Refused) as refused:
        devcontainer.convert(path, name=None, out_dir=tmp_path, state_dir=tmp_path / "state",
                             env={})
    assert "names no image" in str(refused.value)
