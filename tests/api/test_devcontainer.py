"""devcontainer.json -> Cell manifest, on samples written after the public devcontainer
specification (image-based, Dockerfile-based, JSONC with comments and trailing commas).
No engine: what the manifests do when applied is tests/e2e/test_import_devcontainer.py."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from devcell.api import devcontainer
from devcell.errors import ManifestError

IMAGE_BASED = """\
// Image-based, as an editor's "add dev container" writes it.
{
    "name": "Web App (Python)",
    "image": "devcell/busybox:latest",
    /* the app and its debugger */
    "forwardPorts": [8000, "localhost:5678", "db:5432",],
    "appPort": ["9000:90"],
    "containerEnv": {"APP_ENV": "dev", "ROOT": "${containerWorkspaceFolder}/src"},
    "remoteEnv": {
        "PATH": "${containerEnv:PATH}:/opt/bin",
        "HOME_COPY": "${localEnv:HOME}",
        "UNSET_ME": null,
        "EDITOR": "vi",
    },
    "workspaceFolder": "/workspaces/app",
    "onCreateCommand": "echo on-create > /tmp/log",
    "postCreateCommand": ["sh", "-c", "echo post-create >> /tmp/log"],
    "postStartCommand": {
        "server": "echo server >> /tmp/log",
        "watch": ["sh", "-c", "echo watch >> /tmp/log"],
    },
    "postAttachCommand": "echo attached",
    "customizations": {"vscode": {"extensions": ["ms-python.python"]}},
    "remoteUser": "vscode",
    "someFutureField": true,
}
"""

DOCKERFILE_BASED = """\
{
    // Dockerfile beside this file, the repository as the build context.
    "name": "api",
    "build": {
        "dockerfile": "Dockerfile",
        "context": "..",
        "args": {"VARIANT": "3.12", "DEBUG": 1},
        "target": "dev",
        "cacheFrom": ["example/cache"],
    },
    "runArgs": ["--init", "--memory=1g", "--cpus", "2", "-e", "FROM_RUN=1"],
    "mounts": [
        "source=${localWorkspaceFolder}/data,target=/data,type=bind,readonly",
        {"source": "cache", "target": "/cache", "type": "volume"},
    ],
    "workspaceMount": "source=${localWorkspaceFolder},target=/src,type=bind",
    "workspaceFolder": "/src/api",
}
"""


def _sample(root: Path, text: str, name: str = ".devcontainer/devcontainer.json") -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _convert(path: Path, out_dir: Path, state: Path, **kwargs: object
             ) -> devcontainer.Conversion:
    return devcontainer.convert(path, name=kwargs.get("name"),  # type: ignore[arg-type]
                                out_dir=out_dir, state_dir=state,
                                env=kwargs.get("env", {"HOME": "/home/dev"}))  # type: ignore[arg-type]


def test_an_image_based_sample_with_comments_and_trailing_commas(tmp_path: Path) -> None:
    path = _sample(tmp_path / "proj", IMAGE_BASED)
    found = devcontainer.find(None, tmp_path / "proj")
    assert found == path
    result = _convert(path, tmp_path / "proj", tmp_path / "state")
    m = result.manifest
    assert m["metadata"]["name"] == "web-app-python"
    spec = m["spec"]
    assert spec["image"] == "devcell/busybox:latest" and "build" not in spec
    assert spec["workspace"] == {"mountPath": "/workspaces/app"}
    assert spec["env"] == [{"name": "APP_ENV", "value": "dev"},
                           {"name": "ROOT", "value": "/workspaces/app/src"},
                           {"name": "HOME_COPY", "value": "/home/dev"},
                           {"name": "EDITOR", "value": "vi"}]
    assert spec["network"] == {"mode": "bridge", "ports": [
        {"containerPort": 8000, "hostPort": 8000, "hostIP": "127.0.0.1"},
        {"containerPort": 5678, "hostPort": 5678, "hostIP": "127.0.0.1"},
        {"containerPort": 90, "hostPort": 9000, "hostIP": "127.0.0.1"}]}
    assert spec["hooks"] == {
        "postCreate": [["/bin/sh", "-c", "echo on-create > /tmp/log"],
                       ["sh", "-c", "echo post-create >> /tmp/log"]],
        "postStart": [["/bin/sh", "-c", "echo server >> /tmp/log"],
                      ["sh", "-c", "echo watch >> /tmp/log"]],
        "postAttach": [["/bin/sh", "-c", "echo attached"]]}
    assert spec["user"] == "vscode"
    assert m["metadata"]["annotations"] == {
        "devcell.dev/vscode-extensions": '["ms-python.python"]'}
    notes = "\n".join(result.notes)
    for field in ("remoteEnv.PATH", "remoteEnv.UNSET_ME",
                  "forwardPorts 'db:5432'", "someFutureField"):
        assert f"{field}: not converted" in notes, field
    for field in ("postAttachCommand", "customizations", "remoteUser"):
        assert f"{field}: not converted" not in notes, field
    assert "postStartCommand: its 2 commands run one after another" in notes
    assert result.problems == []


def test_a_dockerfile_based_sample(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    path = _sample(root, DOCKERFILE_BASED)
    (root / ".devcontainer" / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    result = _convert(path, root, tmp_path / "state")
    spec = result.manifest["spec"]
    assert spec["build"] == {"context": ".", "dockerfile": ".devcontainer/Dockerfile",
                             "args": {"VARIANT": "3.12", "DEBUG": "1"}, "target": "dev"}
    assert spec["resources"] == {"memory": "1Gi", "cpus": 2.0}
    assert spec["env"] == [{"name": "FROM_RUN", "value": "1"}]
    assert spec["workspace"] == {"mountPath": "/src"}
    assert "mounts" not in spec  # /repo/data is not allowed by the (default) configuration
    notes = "\n".join(result.notes)
    assert "build.cacheFrom: not converted" in notes
    assert "mounts[0]: left out, DevCell's security rules refuse it: host bind mounts are off" \
        in notes
    assert spec["volumes"] == [{"name": "cache", "mountPath": "/cache"}]
    assert "mounts[1]: the engine's volume cache is shared by every container naming it; " \
        "the cell gets its own, cache" in notes
    assert spec["security"] == {"init": True}  # what every cell has: no allowance needed
    assert "workspaceFolder: not converted (the workspace is at /src" in notes
    assert result.problems == []


def test_the_legacy_dockerfile_field_and_a_manifest_written_in_a_subfolder(
        tmp_path: Path) -> None:
    root = tmp_path / "repo"
    path = _sample(root, '{"dockerFile": "Dockerfile"}', ".devcontainer.json")
    (root / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    result = _convert(path, root, tmp_path / "state")
    assert result.manifest["spec"]["build"] == {"context": "."}
    assert result.manifest["metadata"]["name"] == "repo"
    with pytest.raises(ManifestError) as refused:
        _convert(path, root / "deploy", tmp_path / "state")
    assert "lies outside the directory of the manifest" in str(refused.value.problems[0])


def test_a_mount_target_with_a_trailing_slash_is_taken_without_it(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    path = _sample(root, '{"image": "devcell/busybox:latest", "mounts": '
                         '["source=tf_cache,target=/home/dev/.cache/bazel/"]}')
    result = _convert(path, root, tmp_path / "state")
    assert result.manifest["spec"]["volumes"] == [
        {"name": "tf-cache", "mountPath": "/home/dev/.cache/bazel"}]


def test_an_allowed_bind_mount_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "data").mkdir(parents=True)
    path = _sample(root, DOCKERFILE_BASED)
    (root / ".devcontainer" / "Dockerfile").write_text("FROM devcell/busybox:latest\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = state / "config.yaml"
    config.write_text(f"apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
                      f"  allowedHostPaths: [{root}/data]\n")
    config.chmod(0o600)
    result = _convert(path, root, state)
    assert result.manifest["spec"]["mounts"] == [
        {"hostPath": str(root / "data"), "mountPath": "/data", "readOnly": True}]


def test_what_breaks_the_security_defaults_is_refused_with_file_line_and_field(
        tmp_path: Path) -> None:
    path = _sample(tmp_path, textwrap.dedent("""\
        {
          "image": "devcell/busybox:latest",
          "features": {"http://example.com/node.tgz": {}},
          "privileged": true,
          "capAdd": ["SYS_PTRACE"],
          "runArgs": ["--privileged", "--cap-add=NET_ADMIN", "--network", "host",
                      "--pid=host", "-v", "/:/host", "--device", "/dev/kvm"],
          "mounts": ["source=/tmp,target=/etc,type=bind"],
          "workspaceFolder": "/proc/work",
        }
        """))
    with pytest.raises(ManifestError) as refused:
        _convert(path, tmp_path, tmp_path / "state")
    shown = [str(p) for p in refused.value.problems]
    expect = [
        (3, "features.http://example.com/node.tgz", "a tarball URL must be https"),
        (4, "privileged", "security.allowPrivileged: true in DevCell's configuration"),
        (5, "capAdd[0]", "listing SYS_PTRACE in security.allowedCapabilities"),
        (6, "runArgs", "--privileged is refused"),
        (6, "runArgs", "--cap-add NET_ADMIN is refused: capability NET_ADMIN is not allowed"),
        (6, "runArgs", "--network host is refused: the host's network is not shared unless an "
                       "administrator allows it with security.allowHostNetwork: true"),
        (7, "runArgs", "--pid host is refused"),
        (7, "runArgs", "-v /:/host is refused"),
        (7, "runArgs", "--device /dev/kvm is refused: host device /dev/kvm is not allowed"),
        (8, "mounts[0]", "target /etc would hide or overwrite /etc"),
        (9, "workspaceFolder", "the workspace path /proc/work would hide"),
    ]
    for line, field, message in expect:
        assert any(s.startswith(f"{path}:{line}: {field}: ") and message in s for s in shown), \
            (line, field, message, shown)
    assert len(shown) == len(expect)


@pytest.mark.parametrize(("text", "where", "message"), [
    ('{\n  "image": "a"\n  "name": "b"\n}\n', ":3:", "not valid JSONC"),
    ('{\n  "image": "a",\n  "image": "b"\n}\n', ":3: image:", 'duplicate key "image"'),
    ('[1, 2]\n', ": ", "expected a JSON object"),
    ('{"dockerComposeFile": 3, "service": "app"}', ":1: dockerComposeFile:",
     "expected the compose file's path, or an array of paths"),
    ('{"name": "x"}', ":1: image:", "the file names no image"),
    ('{\n"image": "a",\n"postCreateCommand": 42}', ":3: postCreateCommand:",
     "expected a string, an array of strings, or an object"),
    ('{"image": "a", "x": ' + "[" * 50_000 + "]" * 50_000 + "}", ": ",
     "nested too deeply"),  # json5 recurses per level: a RecursionError, never a traceback
])
def test_bad_input_names_file_and_line(tmp_path: Path, text: str, where: str,
                                       message: str) -> None:
    path = _sample(tmp_path, text, "devcontainer.json")
    with pytest.raises(ManifestError) as refused:
        _convert(path, tmp_path, tmp_path / "state")
    first = str(refused.value.problems[0])
    assert first.startswith(str(path)) and where in first and message in first, first


def test_names_given_or_derived_are_valid_cell_names(tmp_path: Path) -> None:
    path = _sample(tmp_path / "My Project", '{"image": "a", "name": "  ÜBER  Tool!! "}')
    assert _convert(path, tmp_path, tmp_path / "s").manifest["metadata"]["name"] == "ber-tool"
    assert _convert(path, tmp_path, tmp_path / "s", name="mine").manifest["metadata"][
        "name"] == "mine"
    with pytest.raises(ManifestError):
        _convert(path, tmp_path, tmp_path / "s", name="Not_Valid")


def test_a_host_credential_filled_in_is_said_and_kept_secret(tmp_path: Path) -> None:
    """A hostile project can pull the importing shell's tokens into the cell with
    ${localEnv:...} under an innocent name: the import says so and never shows the value."""
    path = _sample(tmp_path / "proj", json.dumps({
        "image": "devcell/busybox:latest",
        "containerEnv": {"EDITOR_THEME": "${localEnv:GITHUB_TOKEN}", "LANG": "${localEnv:LANG}"},
        "postCreateCommand": "echo ${localEnv:AWS_SECRET_ACCESS_KEY} > /dev/null"}))
    result = _convert(path, tmp_path / "proj", tmp_path / "state", env={
        "HOME": "/home/dev", "GITHUB_TOKEN": "ghp_sekrit", "LANG": "C.UTF-8",
        "AWS_SECRET_ACCESS_KEY": "aws_sekrit"})
    env = {e["name"]: e for e in result.manifest["spec"]["env"]}
    assert env["EDITOR_THEME"]["secret"] is True and "secret" not in env["LANG"]
    said = [n for n in result.notes if "a credential by its name" in n]
    assert len(said) == 2, result.notes
    assert said[0].startswith("containerEnv.EDITOR_THEME: takes the value of GITHUB_TOKEN")
    assert said[1].startswith("postCreateCommand: takes the value of AWS_SECRET_ACCESS_KEY")
    assert not any("sekrit" in n for n in result.notes + result.said)


def test_a_devcontainer_json_linking_out_of_the_project_is_refused(tmp_path: Path) -> None:
    """A project (or a cell writing its live workspace) may not make the import read a host
    file: json5's error would show its first characters."""
    (tmp_path / "host.json").write_text('{"image": "devcell/busybox:latest"}')
    project = tmp_path / "proj"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").symlink_to(tmp_path / "host.json")
    with pytest.raises(ManifestError, match="outside the project folder"):
        _convert(project / ".devcontainer" / "devcontainer.json", project, tmp_path / "state")
    (project / "shared.json").write_text('{"image": "devcell/busybox:latest"}')
    (project / ".devcontainer" / "devcontainer.json").unlink()
    (project / ".devcontainer" / "devcontainer.json").symlink_to("../shared.json")
    _convert(project / ".devcontainer" / "devcontainer.json", project, tmp_path / "state")
