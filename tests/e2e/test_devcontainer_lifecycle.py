"""A devcontainer.json's remoteUser, userEnvProbe, postAttachCommand and initializeCommand on
the real engine, one cell for all (built once from a two-line Dockerfile, ~10 s in all):
initializeCommand runs on the host before the start (with the configuration's allowance),
postCreate runs as remoteUser with the probed login environment, `devcell exec` gets that
environment, postAttach runs when `exec -t` and `devcell ssh` attach, and `devcell code`
writes the VS Code settings and installs the extensions with the server it finds."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.api.test_devcontainer_lifecycle import _allow_host_commands
from tests.conftest import REPO, Cli
from tests.e2e.test_import_devcontainer import _ready, engine_state  # noqa: F401

pytestmark = pytest.mark.e2e

DOCKERFILE = """\
FROM devcell/busybox:latest
RUN echo 'dev:x:1000:1000:dev:/home/dev:/bin/sh' >> /etc/passwd && \\
    echo 'dev:x:1000:' >> /etc/group && mkdir -p /home/dev && \\
    printf 'export PROBED="from the profile"\\n' > /home/dev/.profile && \\
    chown -R 1000:1000 /home/dev
"""
DEVCONTAINER = """\
{
  "name": "lifecycle",
  "build": {"dockerfile": "Dockerfile"},
  "remoteUser": "dev",
  "userEnvProbe": "loginShell",
  "initializeCommand": "echo initialized > ${localWorkspaceFolder}/host-ran",
  "postCreateCommand": "id -un > /tmp/created-as && echo \\"$PROBED\\" > /tmp/created-with",
  "postAttachCommand": "echo attached-as-$(id -un) && echo x >> /tmp/attached",
  "customizations": {"vscode": {"extensions": ["ms-python.python", "a.b"],
                                "settings": {"editor.tabSize": 2}}},
}
"""


def _exec_on_a_terminal(state_dir: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """`devcell exec -t` with a pseudo-terminal as its standard input, as a user's shell."""
    primary, secondary = pty.openpty()
    try:
        return subprocess.run([sys.executable, "-m", "devcell", "exec", "-t", *argv],
                              stdin=secondary, capture_output=True, timeout=60, cwd=REPO,
                              env=dict(os.environ, DEVCELL_HOME=str(state_dir)))
    finally:
        os.close(primary)
        os.close(secondary)


def test_user_probe_attach_and_host_commands(cli: Cli, tmp_path: Path,
                                             engine_state: Path) -> None:  # noqa: F811
    _allow_host_commands(engine_state)
    project = tmp_path / "project"
    (project / ".devcontainer").mkdir(parents=True)
    (project / ".devcontainer" / "Dockerfile").write_text(DOCKERFILE)
    (project / ".devcontainer" / "devcontainer.json").write_text(textwrap.dedent(DEVCONTAINER))
    imported = cli("import", "devcontainer", "-o", "cell.yaml", cwd=project)
    assert imported.returncode == 0, imported.stderr
    applied = cli("apply", "-f", str(project / "cell.yaml"), timeout=300)
    assert applied.returncode == 0, applied.stderr
    assert "cell lifecycle: running on the host (hooks.hostInitialize" in applied.stderr
    assert (project / "host-ran").read_text() == "initialized\n"
    steps = cli("get", "operations", "-o", "yaml").stdout
    assert steps.index("host-initialize") < steps.index("build-image") < steps.index("start")
    _ready(cli, "lifecycle")

    def cat(path: str) -> str:
        got = cli("exec", "lifecycle", "--", "cat", *path.split())
        assert got.returncode == 0, got.stderr
        return got.stdout

    # the hook ran as remoteUser, with the probed environment
    assert cat("/tmp/created-as /tmp/created-with") == "dev\nfrom the profile\n"
    probed = cli("exec", "-e", "OWN=mine", "lifecycle", "--", "sh", "-c", 'echo "$PROBED/$OWN"')
    assert probed.stdout == "from the profile/mine\n", probed.stderr
    for other_user in ("nobody", "root"):  # another user's probe is not sourced
        other = cli("exec", "-u", other_user, "lifecycle", "--", "sh", "-c", 'echo "[$PROBED]"')
        assert other.stdout == "[]\n", other.stderr

    attached = _exec_on_a_terminal(engine_state, "lifecycle", "--", "true")
    assert attached.returncode == 0, attached.stderr
    assert b"attached-as-dev" in attached.stderr
    assert cat("/tmp/attached") == "x\n"  # and this exec, without -t, attached nothing
    if shutil.which("ssh"):
        shell = cli("ssh", "lifecycle", input="exit 0\n", timeout=60)
        assert shell.returncode == 0, shell.stderr
        assert "attached-as-dev" in shell.stdout + shell.stderr
        # a command is no attach
        assert cli("ssh", "lifecycle", "--", "cat", "/tmp/attached").stdout == "x\nx\n"

    # devcell code: VS Code's settings written, its extensions installed by the server found
    first = cli("code", "lifecycle", "--print")
    assert first.returncode == 0, first.stderr
    assert first.stdout == ("code --folder-uri "
                            "vscode-remote://ssh-remote+lifecycle.devcell/workspaces/project\n")
    settings = "/home/dev/.vscode-server/data/Machine/settings.json"
    assert f"settings: wrote {settings}" in first.stderr
    assert "VS Code's server is not in the cell yet" in first.stderr
    assert "attached-as-dev" in first.stderr  # VS Code attaching runs postAttach
    written = cli("exec", "lifecycle", "--", "cat", settings).stdout
    assert json.loads(written) == {"editor.tabSize": 2}
    planted = cli("exec", "lifecycle", "--", "sh", "-c",
                  'd=~/.vscode-server/bin/0123abc/bin && mkdir -p $d && '
                  'printf \'#!/bin/sh\\necho "$(id -un) $*" >> ~/installed\\n\' > $d/code-server'
                  ' && chmod +x $d/code-server')
    assert planted.returncode == 0, planted.stderr
    again = cli("code", "lifecycle", "--print")
    assert f"settings: kept {settings} (it exists)" in again.stderr
    assert "extensions: installed ms-python.python a.b" in again.stderr
    assert cli("exec", "lifecycle", "--", "cat", "/home/dev/installed").stdout == (
        "dev --install-extension ms-python.python\ndev --install-extension a.b\n")
