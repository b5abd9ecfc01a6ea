"""`spec.user` on the real engine: a cell given the developer's uid (4321) writes workspace
files that are the developer's on the host, so a non-root process of that uid (their editor)
changes them and the cell reads the change, where a cell running as root leaves files that
editor cannot write; a user named as the image names it owns the top of the workspace and
what sftp makes; a name the image does not know is refused with the fix."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.backends.container.support import IMAGE
from tests.conftest import Cli

DEVELOPER = 4321


def _manifest(path: Path, name: str, user: str) -> None:
    path.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
        f"metadata: {{name: {name}}}\nspec:\n  backend: container\n  image: {IMAGE}\n"
        f"  network: {{mode: none}}\n  user: \"{user}\"\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")


def _as_developer(*argv: str) -> subprocess.CompletedProcess[str]:
    """A process of uid DEVELOPER, not root: it may reach any path (CAP_DAC_READ_SEARCH, as
    the owner of the state directory would) but writes only what its uid may write."""
    return subprocess.run(["setpriv", f"--reuid={DEVELOPER}", f"--regid={DEVELOPER}",
                           "--clear-groups", "--inh-caps=+dac_read_search",
                           "--ambient-caps=+dac_read_search", "--", *argv],
                          capture_output=True, text=True, timeout=60)


def _workspace(cli: Cli, name: str) -> Path:
    described = cli("describe", "cell", name).stdout
    line = next(x for x in described.splitlines() if x.startswith("Workspace on host:"))
    return Path(line.split(":", 1)[1].strip())


def test_the_developers_uid_owns_what_the_cell_writes_and_both_edit_it(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is missing")
    mine, roots = tmp_path / "mine.yaml", tmp_path / "roots.yaml"
    _manifest(mine, "mine", f"{DEVELOPER}:{DEVELOPER}")
    roots.write_text(mine.read_text().replace("mine", "roots").replace(
        f'  user: "{DEVELOPER}:{DEVELOPER}"\n', ""))
    for manifest in (mine, roots):
        applied = cli("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
    for name in ("mine", "roots"):
        wrote = cli("exec", name, "--", "sh", "-c",
                    "id -u; echo from-the-cell > /workspace/notes.txt")
        assert wrote.returncode == 0, wrote.stderr
    assert cli("exec", "mine", "--", "id", "-u").stdout.strip() == str(DEVELOPER)
    notes = _workspace(cli, "mine") / "notes.txt"
    assert (notes.stat().st_uid, notes.stat().st_gid) == (DEVELOPER, DEVELOPER)
    edited = _as_developer("sh", "-c", f"echo from-the-editor >> {notes}")
    assert edited.returncode == 0, edited.stderr  # the developer's file: no root needed
    back = cli("exec", "mine", "--", "cat", "/workspace/notes.txt")
    assert back.stdout == "from-the-cell\nfrom-the-editor\n", back.stderr
    # Without spec.user the cell writes as root, and the same editor cannot change its file.
    theirs = _workspace(cli, "roots") / "notes.txt"
    assert theirs.stat().st_uid == 0
    refused = _as_developer("sh", "-c", f"echo from-the-editor >> {theirs}")
    assert refused.returncode != 0 and "Permission denied" in refused.stderr


def test_a_named_user_owns_the_workspace_and_what_sftp_makes(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    manifest = tmp_path / "cell.yaml"
    _manifest(manifest, "named", "nobody")
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    shown = cli("exec", "named", "--", "sh", "-c", "id -u; touch /workspace/by-cell")
    assert shown.stdout.strip() == "65534", shown.stderr
    described = cli("describe", "cell", "named").stdout
    assert "User:               nobody" in described
    workspace = Path(next(x for x in described.splitlines()
                          if x.startswith("Workspace on host:")).split(":", 1)[1].strip())
    assert workspace.stat().st_uid == 65534
    if shutil.which("scp"):
        config = tmp_path / "ssh_config"
        config.write_text(cli("ssh-config", "named").stdout)
        (tmp_path / "up.txt").write_text("up\n")
        copied = subprocess.run(["scp", "-F", str(config), str(tmp_path / "up.txt"),
                                 "named.devcell:"], capture_output=True, timeout=60)
        assert copied.returncode == 0, copied.stderr
        assert (workspace / "up.txt").stat().st_uid == 65534


def test_a_user_the_image_does_not_know_is_refused_with_the_fix(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    manifest = tmp_path / "cell.yaml"
    _manifest(manifest, "ghostly", "ghost")
    applied = cli("apply", "-f", str(manifest))
    assert applied.returncode != 0
    said = applied.stdout + applied.stderr
    assert "spec.user ghost" in said and "uid[:gid]" in said, said
    assert "Traceback" not in said
