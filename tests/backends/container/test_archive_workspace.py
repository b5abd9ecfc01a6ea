"""A container cell whose new workspace is made from a file `devcell snapshot export` wrote
(`spec.workspace.source.archive`), on the real engine: the new cell holds the same bytes,
links and modes as the exported snapshot, and an archive damaged after export is refused
while the workspace is made (its cell Failed, reason ArchiveRefused), which leaves no
workspace, no container and no temporary."""

from __future__ import annotations

import os
from pathlib import Path

from tests.backends.container.support import IMAGE
from tests.conftest import Cli

FILES = ("mkdir -p /workspace/src/deep && printf 'print(1)\\n' > /workspace/src/main.py && "
         "head -c 300000 /dev/urandom > /workspace/blob.bin && chmod 750 /workspace/src/deep "
         "&& ln -s /etc/passwd /workspace/passwd-link && ln /workspace/blob.bin /workspace/hard")
LISTING = ("cd /workspace && find . | sort | while read f; do "
           "if [ -L \"$f\" ]; then echo \"$f -> $(readlink \"$f\")\"; "
           "elif [ -f \"$f\" ]; then echo \"$f $(stat -c %a \"$f\") $(md5sum < \"$f\")\"; "
           "else echo \"$f $(stat -c %a \"$f\")\"; fi; done")


def _manifest(directory: Path, name: str, workspace: str) -> Path:
    manifest = directory / f"{name}.yaml"
    manifest.write_text(
        f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        f"  workspace: {workspace}\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    return manifest


def _sh(cli: Cli, cell: str, script: str) -> str:
    done = cli("exec", cell, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_exported_snapshot_makes_a_new_workspace_and_a_damaged_one_leaves_nothing(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    assert cli("apply", "-f", str(_manifest(tmp_path, "orig", "{}"))).returncode == 0
    _sh(cli, "orig", FILES)
    listing = _sh(cli, "orig", LISTING)
    assert cli("snapshot", "create", "orig", "--name", "s1").returncode == 0
    exports = tmp_path / "exports"
    exports.mkdir()
    archive = exports / "s1.tar"
    assert cli("snapshot", "export", "s1", "-o", str(archive)).returncode == 0
    state.joinpath("config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
        f"security:\n  allowedHostPaths: ['{exports}']\n")
    os.chmod(state / "config.yaml", 0o600)

    made = cli("apply", "-f", str(_manifest(tmp_path, "copy", f"{{source: {{archive: "
                                             f"{{path: '{archive}'}}}}}}")))
    assert made.returncode == 0, made.stderr
    assert _sh(cli, "copy", LISTING) == listing
    assert _sh(cli, "copy", "stat -c %h /workspace/hard") == "2\n"  # still one file

    damaged = exports / "damaged.tar"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside blob.bin's contents: only the checksum tells
    damaged.write_bytes(bytes(data))
    volumes_before = sorted(p.name for p in (state / "volumes").iterdir())
    refused = cli("apply", "-f", str(_manifest(tmp_path, "bad", f"{{source: {{archive: "
                                                f"{{path: '{damaged}'}}}}}}")))
    assert refused.returncode != 0, refused.stdout
    said = refused.stdout + refused.stderr
    assert "checksum mismatch" in said and "no workspace made" in said, said
    assert "Traceback" not in said
    assert sorted(p.name for p in (state / "volumes").iterdir()) == volumes_before
    assert sorted(p.name for p in (state / "volumes").iterdir()) == volumes_before  # no temp
    shown = cli("describe", "cell", "bad").stdout
    assert "ArchiveRefused" in shown and "Workspace on host:  <none>" in shown, shown
    assert "2. create           Skipped" in shown  # no container was made
