"""devcontainer.json's user, environment probe, attach and host commands, and editor
customizations, converted (api/devcontainer_lifecycle.py); initializeCommand refused unless
DevCell's configuration allows host commands, at import and at apply."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from devcell.api import devcontainer, devcontainer_lifecycle
from devcell.errors import ManifestError
from tests.api.test_devcontainer import _convert, _sample


def _allow_host_commands(state: Path) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       "security:\n  allowHostCommands: true\n")
    (state / "config.yaml").chmod(0o600)


def _ok(tmp_path: Path, text: str) -> devcontainer.Conversion:
    path = _sample(tmp_path, textwrap.dedent(text))
    result = _convert(path, tmp_path, tmp_path / "state")
    assert result.problems == []
    return result


def _refused(tmp_path: Path, text: str) -> list[str]:
    path = _sample(tmp_path, textwrap.dedent(text))
    with pytest.raises(ManifestError) as refused:
        _convert(path, tmp_path, tmp_path / "state")
    return [str(p).removeprefix(str(path)) for p in refused.value.problems]


def test_remote_user_and_container_user_become_the_cells_user(tmp_path: Path) -> None:
    both = _ok(tmp_path, '{"image": "devcell/busybox:latest", "remoteUser": "vscode",\n'
                         ' "containerUser": "root"}')
    assert both.manifest["spec"]["user"] == "vscode"
    assert any(n.startswith("containerUser: not converted (a cell runs as one user: "
                            "remoteUser vscode") for n in both.notes)
    alone = _ok(tmp_path, '{"image": "devcell/busybox:latest", "containerUser": "1000:1000"}')
    assert alone.manifest["spec"]["user"] == "1000:1000"
    assert not any("User" in n for n in alone.notes)


@pytest.mark.parametrize("user, why", [
    ('"${localEnv:DEVCELL_TEST_UNSET}"', "${localEnv:DEVCELL_TEST_UNSET} is not set"),
    ('"bad user"', "expected a user name or uid"),
    ("7", "expected a user name or uid (a string)")])
def test_a_user_that_cannot_be_a_cells_user_is_refused_with_its_line(
        tmp_path: Path, user: str, why: str) -> None:
    shown = _refused(tmp_path, '{\n  "image": "devcell/busybox:latest",\n'
                               f'  "remoteUser": {user}\n}}')
    assert len(shown) == 1 and shown[0].startswith(":3: remoteUser: " + why), shown


def test_user_env_probe_and_post_attach(tmp_path: Path) -> None:
    result = _ok(tmp_path, """\
        {"image": "devcell/busybox:latest", "userEnvProbe": "loginInteractiveShell",
         "workspaceFolder": "/w",
         "postAttachCommand": {"a": "echo hi from ${containerWorkspaceFolder}",
                               "b": ["git", "status"]}}""")
    spec = result.manifest["spec"]
    assert spec["userEnvProbe"] == "loginInteractiveShell"
    assert spec["hooks"] == {"postAttach": [["/bin/sh", "-c", "echo hi from /w"],
                                            ["git", "status"]]}
    none = _ok(tmp_path, '{"image": "devcell/busybox:latest", "userEnvProbe": "none"}')
    assert "userEnvProbe" not in none.manifest["spec"]
    shown = _refused(tmp_path, '{"image": "devcell/busybox:latest",\n'
                               ' "userEnvProbe": "bash"}')
    assert shown == [":2: userEnvProbe: expected one of none, loginShell, "
                     "loginInteractiveShell, interactiveShell"]


def test_initialize_command_is_refused_without_the_allowance_naming_it(tmp_path: Path) -> None:
    shown = _refused(tmp_path, """\
        {
          "image": "devcell/busybox:latest",
          "initializeCommand": "touch .env"
        }""")
    assert len(shown) == 1, shown
    assert shown[0].startswith(":3: initializeCommand: initializeCommand runs on the host")
    assert "security.allowHostCommands: true in " in shown[0]


def test_initialize_command_with_the_allowance_runs_as_written(tmp_path: Path) -> None:
    _allow_host_commands(tmp_path / "state")
    text = '{"image": "devcell/busybox:latest", "initializeCommand": %s}'
    string = _ok(tmp_path, text % '"echo ${localWorkspaceFolderBasename} > .env"')
    assert string.manifest["spec"]["hooks"] == {
        "hostInitialize": [["/bin/sh", "-c", f"echo {tmp_path.name} > .env"]]}
    array = _ok(tmp_path, text % '["docker", "login", "example.test"]')
    assert array.manifest["spec"]["hooks"] == {
        "hostInitialize": [["docker", "login", "example.test"]]}
    elsewhere = _sample(tmp_path, text % '"true"')
    moved = _convert(elsewhere, tmp_path / "out", tmp_path / "state")
    assert any(n.startswith("initializeCommand: it runs in the folder of the manifest")
               for n in moved.notes)


def test_customizations_become_annotations(tmp_path: Path) -> None:
    result = _ok(tmp_path, """\
        {"image": "devcell/busybox:latest",
         "extensions": ["old.one", "ms-python.python"],
         "settings": {"editor.tabSize": 2},
         "customizations": {
           "vscode": {"extensions": ["ms-python.python", "-old.one", "rust-lang.rust-analyzer"],
                      "settings": {"python.defaultInterpreterPath": "/usr/bin/python3"},
                      "devPort": 8000},
           "jetbrains": {"backend": "PyCharm"}}}""")
    notes = result.notes
    annotations = result.manifest["metadata"]["annotations"]
    assert json.loads(annotations[devcontainer_lifecycle.EXTENSIONS]) == [
        "ms-python.python", "rust-lang.rust-analyzer"]
    assert json.loads(annotations[devcontainer_lifecycle.SETTINGS]) == {
        "editor.tabSize": 2, "python.defaultInterpreterPath": "/usr/bin/python3"}
    assert any(n.startswith("customizations.jetbrains: not converted") for n in notes)
    assert any(n.startswith("customizations.vscode.devPort: not converted") for n in notes)
    huge = _ok(tmp_path, json.dumps({"image": "devcell/busybox:latest", "customizations": {
        "vscode": {"settings": {"k": "x" * 5000}}}}))
    assert "annotations" not in huge.manifest["metadata"]
    assert any(n.startswith("customizations.vscode.settings: not converted (5") for n in
               huge.notes)
    shown = _refused(tmp_path, '{"image": "devcell/busybox:latest",\n'
                               ' "customizations": {"vscode": {"extensions": ["$(reboot)"]}}}')
    assert shown == [":2: customizations.vscode.extensions[0]: expected an extension id "
                     "(publisher.name)"]


HOST_CELL = """\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: hosted}
spec:
  backend: fake
  hooks:
    hostInitialize: [[sh, -c, "pwd > initialized"]]
"""


def test_apply_refuses_host_commands_without_the_allowance(tmp_path: Path) -> None:
    problems = devcontainer._problems(HOST_CELL, tmp_path / "cell.yaml", tmp_path / "state")
    assert [p.field for p in problems] == ["spec.hooks.hostInitialize"]
    assert "security.allowHostCommands: true in" in problems[0].message
    _allow_host_commands(tmp_path / "state")
    assert devcontainer._problems(HOST_CELL, tmp_path / "cell.yaml", tmp_path / "state") == []


def test_a_folder_host_commands_run_in_is_copied_not_bound_live(tmp_path: Path) -> None:
    """Bound live, the cell could rewrite the script initializeCommand runs on the host."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n  allowHostCommands: true\n"
        f"  allowedHostPaths: ['{tmp_path}']\n")
    (state / "config.yaml").chmod(0o600)
    project = tmp_path / "project"
    path = _sample(project, '{"image": "devcell/busybox:latest", '
                            '"initializeCommand": "sh .devcontainer/init.sh"}')
    os.chown(project, 1000, 1000)  # a user's folder: bound live were it not for the command
    result = _convert(path, project, state)
    assert result.manifest["spec"]["workspace"]["source"] == {
        "directory": {"path": str(project)}}
    assert any("initializeCommand runs on the host in it" in s for s in result.said)
    assert result.problems == []
    plain = _sample(tmp_path / "plain", '{"image": "devcell/busybox:latest"}')
    os.chown(tmp_path / "plain", 1000, 1000)
    live = _convert(plain, tmp_path / "plain", state)
    assert live.manifest["spec"]["workspace"]["source"] == {
        "hostPath": {"path": str(tmp_path / "plain")}}


def test_a_project_file_a_host_command_names_keeps_the_folder_copied(tmp_path: Path) -> None:
    """The manifest written elsewhere, initializeCommand still names a project file: bound
    live, the cell could rewrite it, so the folder is copied."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n  allowHostCommands: true\n"
        f"  allowedHostPaths: ['{tmp_path}']\n")
    (state / "config.yaml").chmod(0o600)
    project = tmp_path / "project"
    path = _sample(project, '{"image": "devcell/busybox:latest", "initializeCommand": '
                            '"sh ${localWorkspaceFolder}/.devcontainer/init.sh"}')
    os.chown(project, 1000, 1000)
    (tmp_path / "out").mkdir()
    result = _convert(path, tmp_path / "out", state)
    assert result.manifest["spec"]["workspace"]["source"] == {
        "directory": {"path": str(project)}}
    elsewhere = _sample(tmp_path / "other", '{"image": "devcell/busybox:latest", '
                                            '"initializeCommand": "true"}')
    os.chown(tmp_path / "other", 1000, 1000)
    live = _convert(elsewhere, tmp_path / "out", state)
    assert live.manifest["spec"]["workspace"]["source"] == {
        "hostPath": {"path": str(tmp_path / "other")}}


def test_a_named_remote_user_on_a_live_folder_runs_as_its_owner(tmp_path: Path) -> None:
    """A cell writing a host folder is created only with a numeric non-root user: remoteUser
    by name made a manifest the engine check refused (and the import said uid 1000)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
        f"  allowedHostPaths: ['{tmp_path}']\n")
    (state / "config.yaml").chmod(0o600)
    for user in ("vscode", "root", "0:0"):
        project = tmp_path / user.replace(":", "-")
        path = _sample(project, json.dumps({"image": "devcell/busybox:latest",
                                            "remoteUser": user}))
        os.chown(project, 1000, 1001)
        result = _convert(path, project, state)
        assert result.manifest["spec"]["workspace"]["source"] == {
            "hostPath": {"path": str(project)}}
        assert result.manifest["spec"]["user"] == "1000:1001"
        assert any(n.startswith(f"remoteUser: {user} runs as uid 1000:1001") for n in
                   result.notes), result.notes
    kept = _sample(tmp_path / "kept", json.dumps({"image": "devcell/busybox:latest",
                                                  "remoteUser": "1000"}))
    os.chown(tmp_path / "kept", 1000, 1000)
    assert _convert(kept, tmp_path / "kept", state).manifest["spec"]["user"] == "1000"


def test_a_credential_in_a_host_command_stays_the_shells(tmp_path: Path) -> None:
    """Filled in, `docker login -p ${localEnv:REGISTRY_TOKEN}` put the token in the manifest,
    in the line printed before each run and in the operation's record."""
    _allow_host_commands(tmp_path / "state")
    path = _sample(tmp_path, json.dumps({
        "image": "devcell/busybox:latest",
        "initializeCommand": "docker login -p ${localEnv:REGISTRY_TOKEN} "
                             "-u ${localEnv:USER} ${localEnv:API_KEY:none} r.example"}))
    result = devcontainer.convert(path, name=None, out_dir=tmp_path,
                                  state_dir=tmp_path / "state",
                                  env={"REGISTRY_TOKEN": "sekrit", "USER": "dev"})
    assert result.manifest["spec"]["hooks"]["hostInitialize"] == [[
        "/bin/sh", "-c", "docker login -p ${REGISTRY_TOKEN} -u dev ${API_KEY-none} r.example"]]
    assert any(n.startswith("initializeCommand: a credential it reads") for n in result.notes)
    assert "sekrit" not in json.dumps(result.manifest)
