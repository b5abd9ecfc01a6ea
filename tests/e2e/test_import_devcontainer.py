"""`devcell import devcontainer` then `devcell apply`, as a user runs them, on the real engine:
an image-based and a Dockerfile-based devcontainer.json (JSONC) become Ready cells whose
hooks ran, whose environment is set and whose forwarded port is published on 127.0.0.1;
every field left out is named on stderr; the project's files are in the workspace when the
hooks run (the folder copied in, or bound live)."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import Cli, allow_host_paths

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def engine_state(state_dir: Path) -> Iterator[Path]:
    require_engine()
    yield state_dir
    remove_containers(state_dir)
    import docker

    client = docker.from_env(timeout=120)
    try:
        for image in client.api.images(filters={
                "label": [f"dev.devcell.state-dir={state_hash(state_dir)}"]}):
            client.api.remove_image(image["Id"], force=True)
    finally:
        client.close()


def _ready(cli: Cli, name: str) -> dict[str, Any]:
    cell: dict[str, Any] = json.loads(cli("get", "cell", name, "-o", "json").stdout)
    assert cell["status"]["conditions"][0]["status"] == "True", cell["status"]
    return cell


def test_an_image_based_devcontainer_is_imported_and_applied(
        cli: Cli, tmp_path: Path, engine_state: Path) -> None:
    port = _free_port()
    project = tmp_path / "webapp"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "devcontainer.json").write_text(textwrap.dedent(f"""\
        // Image-based: the image is already on the engine.
        {{
          "name": "Web App",
          "image": "{IMAGE}",
          "forwardPorts": [{port}],   // the web server
          "containerEnv": {{"APP_ENV": "dev",}},
          "postCreateCommand": "echo created-$APP_ENV > ${{containerWorkspaceFolder}}/created",
          "postStartCommand": ["sh", "-c", "httpd -p {port} -h ${{containerWorkspaceFolder}}"],
          "customizations": {{"vscode": {{"extensions": ["a.b"]}}}},
          "remoteUser": "root",
        }}
        """))
    imported = cli("import", "devcontainer", "-o", "cell.yaml", cwd=project)
    assert imported.returncode == 0, imported.stderr
    assert "cell/web-app written to cell.yaml" in imported.stdout
    for field in ("customizations", "remoteUser"):  # annotations, spec.user
        assert f"{field}: not converted" not in imported.stderr
    applied = cli("apply", "-f", str(project / "cell.yaml"))
    assert applied.returncode == 0, applied.stderr
    _ready(cli, "web-app")
    got = cli("exec", "web-app", "--", "cat", "/workspaces/webapp/created")
    assert got.stdout == "created-dev\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /created HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := conn.recv(4096):  # HTTP/1.0: the server closes after the body
            answer += chunk
    assert b"200" in answer.split(b"\r\n", 1)[0] and b"created-dev" in answer


@pytest.mark.state_dir_only("its build context is a path relative to the manifest's file, a "
                            "file of the client's: a server takes relative paths from its own "
                            "working directory (docs/api.md)")
def test_a_dockerfile_based_devcontainer_is_imported_built_and_applied(
        cli: Cli, tmp_path: Path, engine_state: Path) -> None:
    project = tmp_path / "service"
    (project / ".devcontainer").mkdir(parents=True)
    (project / "VERSION").write_text("1.2.3\n")
    (project / ".devcontainer" / "Dockerfile").write_text(textwrap.dedent(f"""\
        FROM {IMAGE} AS base
        ARG TOOL=none
        RUN mkdir -p /opt && echo "tool=$TOOL" > /opt/tool
        FROM base AS dev
        COPY VERSION /opt/VERSION
        """))
    (project / ".devcontainer" / "devcontainer.json").write_text(textwrap.dedent("""\
        {
          /* Dockerfile-based, the repository as the context */
          "name": "service",
          "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"TOOL": "make"},
                    "target": "dev",},
          "workspaceFolder": "/src",
          "postCreateCommand": {"version": "cp /opt/VERSION /src/VERSION",
                                "tool": ["sh", "-c", "cat /opt/tool >> /src/VERSION"]},
          "features": {},
          "shutdownAction": "none",
        }
        """))
    imported = cli("import", "devcontainer", str(project), "-o", str(project / "cell.yaml"))
    assert imported.returncode == 0, imported.stderr
    assert "shutdownAction: not converted" in imported.stderr
    applied = cli("apply", "-f", str(project / "cell.yaml"))
    assert applied.returncode == 0, applied.stderr
    _ready(cli, "service")
    assert cli("exec", "service", "--", "cat", "/src/VERSION").stdout == "1.2.3\ntool=make\n"


def test_features_are_imported_as_spec_features(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / ".devcontainer.json").write_text(
        '{\n  "image": "x",\n  "features": {"ghcr.io/devcontainers/features/go:1": {}},\n}\n')
    result = cli("import", "devcontainer", "-o", "cell.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ref: ghcr.io/devcontainers/features/go:1" in (tmp_path / "cell.yaml").read_text()


@pytest.mark.parametrize("owner", [0, 1000], ids=["roots-folder-copied", "users-folder-live"])
def test_the_projects_files_are_in_the_workspace_when_its_hooks_run(
        cli: Cli, tmp_path: Path, engine_state: Path, owner: int) -> None:
    project = tmp_path / "proj"
    (project / ".devcontainer").mkdir(parents=True)
    (project / "requirements.txt").write_text("left-pad==1.0\n")
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps({
        "image": IMAGE,
        "postCreateCommand": "cat requirements.txt > ${containerWorkspaceFolder}/installed && "
                             "id -u >> installed"}))
    # a user's folder is the user's files too: a file of root's, written while another thread
    # held a 077 umask, is one the hook (run as the folder's owner) may not read
    for path in (project, *project.rglob("*")):
        os.chown(path, owner, owner)
    allow_host_paths(engine_state, project)
    imported = cli("import", "devcontainer", str(project), "-o", str(tmp_path / "cell.yaml"))
    assert imported.returncode == 0, imported.stderr
    assert "network: bridge, for the lifecycle commands (postCreateCommand)" in imported.stderr
    applied = cli("apply", "-f", str(tmp_path / "cell.yaml"))
    assert applied.returncode == 0, applied.stderr
    _ready(cli, "proj")
    got = cli("exec", "proj", "--", "cat", "/workspaces/proj/installed")
    assert got.stdout == f"left-pad==1.0\n{owner}\n", got.stderr
    # bound live: the hook's file is on the host; copied: the host folder is as it was
    assert (project / "installed").exists() == (owner != 0)
