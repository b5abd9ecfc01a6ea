"""The devcontainer specification's variables filled in at import (api/devcontainer_vars.py):
everywhere a converted field may hold one (image, build args, env, mounts, the workspace
path, hooks, runArgs), an unset one refused by name and field, `${containerEnv:...}` left to
the container, and `${devcontainerId}` as the devcontainer CLI computes it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from devcell.api import devcontainer, devcontainer_vars
from tests.api.test_devcontainer import _sample
from tests.conftest import allow_host_paths

ENV = {"HOME": "/home/dev", "TZ": "", "USER": "dev", "PROXY": "http://127.0.0.1:3128"}
"""(What `devcontainer read-configuration` of @devcontainers/cli 0.89.0 gives with TZ set
and empty: "" for ${localEnv:TZ:LA}, HOME's value for ${localEnv:HOME}${localEnv:USERPROFILE},
"" for an unset variable: the one place DevCell differs, refusing it instead.)"""


def _vars(env: dict[str, str] | None = None) -> devcontainer_vars.Variables:
    return devcontainer_vars.variables(Path("/src/web"), Path("/src/web/.devcontainer/d.json"),
                                       "/workspaces/web", ENV if env is None else env)


@pytest.mark.parametrize(("value", "text"), [
    ("${localEnv:HOME}/.kube", "/home/dev/.kube"),
    ("${env:HOME}", "/home/dev"),
    ("${localEnv:TZ:America/Los_Angeles}", ""),  # set and empty, as the devcontainer CLI
    ("${localEnv:NOPE:America/Los_Angeles}", "America/Los_Angeles"),
    ("${localEnv:NOPE:}", ""),
    ("${localEnv:HOME}${localEnv:USERPROFILE}/.ssh", "/home/dev/.ssh"),  # one of them is set
    ("${env:HOME}${env:USERPROFILE}", "/home/dev"),
    ("${localWorkspaceFolder}/data:${containerWorkspaceFolder}",
     "/src/web/data:/workspaces/web"),
    ("${localWorkspaceFolderBasename}-${containerWorkspaceFolderBasename}", "web-web"),
    ("echo ${HOME} ${workspaceFolder} $${x}", "echo ${HOME} ${workspaceFolder} $${x}"),
])
def test_a_value_is_filled_in(value: str, text: str) -> None:
    filled = _vars().fill(value)
    assert (filled.text, filled.unset, filled.container) == (text, (), ())


def test_an_unset_variable_without_a_default_is_named_and_container_env_is_left() -> None:
    filled = _vars().fill("${localEnv:GITHUB_TOKEN}:${containerEnv:PATH}:${env:ALSO}")
    assert filled.unset == ("localEnv:GITHUB_TOKEN", "env:ALSO")
    assert filled.container == ("PATH",) and "${containerEnv:PATH}" in filled.text
    assert _vars({}).fill("${localEnv:HOME}${localEnv:USERPROFILE}").unset == (
        "localEnv:HOME", "localEnv:USERPROFILE")


def test_devcontainer_id_is_the_devcontainer_clis() -> None:
    # What `devcontainer up` (@devcontainers/cli 0.89.0) put in a container's environment
    # for ${devcontainerId}, this folder and file.
    assert devcontainer_vars.devcontainer_id(
        Path("/tmp/dcid/proj"), Path("/tmp/dcid/proj/.devcontainer/devcontainer.json")) == \
        "0gaqgf5fs1hjbun6pl20qqehnv6q17l0fbs9mm11jnacnona1c94"
    found = devcontainer_vars.devcontainer_id(Path("/src/web"),
                                              Path("/src/web/.devcontainer/devcontainer.json"))
    assert len(found) == 52 and set(found) <= set("0123456789abcdefghijklmnopqrstuv")
    assert found == devcontainer_vars.devcontainer_id(
        Path("/src/web"), Path("/src/web/.devcontainer/devcontainer.json"))
    assert found != devcontainer_vars.devcontainer_id(
        Path("/src/api"), Path("/src/api/.devcontainer/devcontainer.json"))


def test_a_shell_command_reads_container_env_as_its_own_variable() -> None:
    assert devcontainer_vars.as_shell("echo ${containerEnv:PATH} ${containerEnv:A:x}") == \
        "echo ${PATH} ${A:-x}"


def test_every_converted_field_is_filled_in(tmp_path: Path) -> None:
    root = tmp_path / "web"
    path = _sample(root, textwrap.dedent("""\
        {
          "build": {"dockerfile": "Dockerfile",
                    "args": {"TZ": "${localEnv:ZONE:America/Los_Angeles}",
                             "OWNER": "${localEnv:USER}"}},
          "containerEnv": {"HTTP_PROXY": "${localEnv:PROXY}",
                           "BIN": "${containerWorkspaceFolder}/bin"},
          "remoteEnv": {"PATH": "${containerWorkspaceFolder}/bin:${containerEnv:PATH}"},
          "mounts": ["source=${env:HOME}${env:USERPROFILE}/.kube,target=/kube,type=bind"],
          "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
          "postCreateCommand":
            "echo ${localEnv:USER} > ${containerWorkspaceFolder}/who; echo ${containerEnv:HOME}",
          "postStartCommand": ["touch", "${containerWorkspaceFolderBasename}"],
          "runArgs": ["-e", "ME=${localEnv:USER}", "--memory=${localEnv:MEM:1g}"]
        }
        """))
    (root / ".devcontainer" / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    allow_host_paths(tmp_path / "state", home)
    result = devcontainer.convert(path, name=None, out_dir=root, state_dir=tmp_path / "state",
                                  env={**ENV, "HOME": str(home)})
    spec = result.manifest["spec"]
    assert spec["build"]["args"] == {"TZ": "America/Los_Angeles", "OWNER": "dev"}
    assert {e["name"]: e["value"] for e in spec["env"]} == {
        "HTTP_PROXY": "http://127.0.0.1:3128", "BIN": "/workspaces/web/bin", "ME": "dev"}
    assert any(n.startswith("remoteEnv.PATH: not converted (it uses ${containerEnv:...}")
               for n in result.notes)
    assert spec["mounts"] == [{"hostPath": str(home / ".kube"), "mountPath": "/kube"}]
    assert spec["workspace"]["mountPath"] == "/workspaces/web"
    assert spec["hooks"] == {
        "postCreate": [["/bin/sh", "-c", "echo dev > /workspaces/web/who; echo ${HOME}"]],
        "postStart": [["touch", "web"]]}
    assert spec["resources"] == {"memory": "1Gi"}
    assert result.problems == []


@pytest.mark.parametrize(("field", "where"), [
    ('"image": "devcell/busybox:${localEnv:TAG}"', "image"),
    ('"image": "x", "containerEnv": {"A": "${localEnv:NOPE}"}', "containerEnv.A"),
    ('"image": "x", "mounts": ["source=${localEnv:NOPE}/k,target=/k,type=bind"]', "mounts[0]"),
    ('"image": "x", "postStartCommand": "echo ${env:NOPE}"', "postStartCommand"),
    ('"image": "x", "runArgs": ["-e", "A=${localEnv:NOPE}"]', "runArgs"),
    ('"build": {"dockerfile": "Dockerfile", "args": {"A": "${localEnv:NOPE}"}}',
     "build.args.A"),
])
def test_an_unset_variable_is_refused_by_name_and_field(tmp_path: Path, field: str,
                                                        where: str) -> None:
    path = _sample(tmp_path, "{\n" + field + "\n}\n")
    (path.parent / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    with pytest.raises(devcontainer.Refused) as refused:
        devcontainer.convert(path, name=None, out_dir=tmp_path, state_dir=tmp_path / "state",
                             env=ENV)
    shown = [str(p) for p in refused.value.problems]
    assert len(shown) == 1 and f":2: {where}: " in shown[0], shown
    assert "is not set in the environment of this import and has no default" in shown[0]


def test_volume_mounts_become_the_cells_volumes(tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", textwrap.dedent("""\
        {
          "image": "devcell/busybox:latest",
          "mounts": [
            "source=claude-code-bashhistory-${devcontainerId},target=/commandhistory,type=volume",
            {"source": "cache-${devcontainerId}", "target": "/root/.cache", "type": "volume"},
            "source=cache,target=/var/cache/apt,type=volume",
            "target=/scratch,type=volume",
            "type=tmpfs,target=/tmp/fast"
          ]
        }
        """))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path / "proj",
                                  state_dir=tmp_path / "state", env={})
    assert result.manifest["spec"]["volumes"] == [
        {"name": "claude-code-bashhistory", "mountPath": "/commandhistory"},
        {"name": "cache", "mountPath": "/root/.cache"},
        {"name": "cache-2", "mountPath": "/var/cache/apt"},
        {"name": "scratch", "mountPath": "/scratch"}]
    notes = "\n".join(result.notes)
    assert "mounts[2]: the engine's volume cache is shared by every container naming it; " \
        "the cell gets its own, cache-2" in notes
    assert "mounts[0]" not in notes and "mounts[1]" not in notes
    assert "mounts[4]: not converted (a tmpfs mount has no equivalent" in notes
    assert result.problems == []
