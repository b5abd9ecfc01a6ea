"""A container cell whose workspace is a host directory copied in once
(`spec.workspace.source.directory`), on the real engine: the files are there at the first
start, the directory itself never changes with the cell, links stay links, and a path the
configuration does not allow is refused at apply with its line."""

from __future__ import annotations

import os
from pathlib import Path

from tests.backends.container.support import IMAGE
from tests.conftest import Cli


def _manifest(tmp_path: Path, path: Path) -> Path:
    manifest = tmp_path / "copied.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: copied}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        f"  workspace: {{source: {{directory: {{path: '{path}'}}}}}}\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    return manifest


def test_a_host_directory_is_copied_in_once_and_left_as_it_was(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    project = tmp_path / "projects" / "app"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "passwd-link").symlink_to("/etc/passwd")
    manifest = _manifest(tmp_path, project)
    refused = cli("apply", "-f", str(manifest))
    assert refused.returncode != 0 and "copied.yaml:8" in refused.stderr, refused.stderr
    assert "workspace.source.directory.path" in refused.stderr
    assert cli("get", "cells", "-o", "name").stdout == ""  # nothing recorded

    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
        f"security:\n  allowedHostPaths: ['{tmp_path / 'projects'}']\n")
    os.chmod(state / "config.yaml", 0o600)
    done = cli("apply", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    shown = cli("exec", "copied", "--", "sh", "-c",
                "cat /workspace/src/main.py; readlink /workspace/passwd-link; "
                "echo changed > /workspace/src/main.py; rm /workspace/passwd-link")
    assert shown.stdout == "print('hi')\n/etc/passwd\n", shown.stderr
    assert (project / "src" / "main.py").read_text() == "print('hi')\n"  # the host's, as it was
    assert os.readlink(project / "passwd-link") == "/etc/passwd"
