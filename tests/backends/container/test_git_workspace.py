"""A container cell whose workspace comes from a git repository, on the real Docker engine
and with the real git: the files are there at the first start (the clone is part of making
the workspace), from a local bare repository and from git servers on 127.0.0.1 (git daemon,
git-http-backend), a bad ref fails the cell with why and leaves no workspace volume behind, and
a fork keeps its snapshot's files (no second clone)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import git_servers
from tests.backends.container.support import IMAGE
from tests.conftest import Cli


def _repo(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "one"]):
        if args[0] == "add":
            (work / "README").write_text("from git\n")
            (work / "src").mkdir()
            (work / "src" / "main.py").write_text("print('hi')\n")
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    bare = tmp_path / "repos" / "project.git"
    bare.parent.mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    return bare


def _manifest(tmp_path: Path, url: str, ref: str = "main") -> Path:
    path = tmp_path / "box.yaml"
    path.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: box}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        f"  workspace: {{source: {{git: {{url: '{url}', ref: {ref}, depth: 1}}}}}}\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    return path


@pytest.fixture
def allowed(state: Path, tmp_path: Path) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
        f"security:\n  allowedHostPaths: ['{tmp_path / 'repos'}']\n")
    os.chmod(state / "config.yaml", 0o600)


def test_a_cell_starts_with_its_repository_in_the_workspace(
        engine: None, cli: Cli, tmp_path: Path, state: Path, allowed: None) -> None:
    bare = _repo(tmp_path)
    done = cli("apply", "-f", str(_manifest(tmp_path, str(bare))))
    assert done.returncode == 0, done.stderr
    shown = cli("exec", "box", "--", "sh", "-c", "cat README src/main.py; git -v 2>/dev/null; "
                "test -d .git && echo has-git")
    assert shown.stdout.startswith("from git\nprint('hi')\n"), shown
    assert "has-git" in shown.stdout
    snap = cli("snapshot", "create", "box", "--name", "s1")
    assert snap.returncode == 0, snap.stderr
    fork = cli("cell", "fork", "box", "--snapshot", "s1", "--name", "f1")
    assert fork.returncode == 0, fork.stderr
    assert cli("exec", "f1", "--", "cat", "README").stdout == "from git\n"


def test_a_bad_ref_fails_the_cell_with_why_and_leaves_no_workspace(
        engine: None, cli: Cli, tmp_path: Path, state: Path, allowed: None) -> None:
    bare = _repo(tmp_path)
    done = cli("apply", "-f", str(_manifest(tmp_path, str(bare), ref="nosuch")),
               "--timeout", "30s")
    assert done.returncode != 0
    assert "the ref nosuch is not in the repository" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    volumes = state / "volumes"
    assert not volumes.exists() or not [p for p in volumes.iterdir()
                                        if not p.name.startswith(".")]


@pytest.mark.parametrize("server", ["git-daemon", "git-http-backend"])
def test_a_cell_clones_its_workspace_from_a_git_server_on_loopback(
        engine: None, cli: Cli, tmp_path: Path, state: Path, server: str) -> None:
    bare = _repo(tmp_path)
    serve = git_servers.git_daemon if server == "git-daemon" else git_servers.git_http
    with serve(bare.parent) as base:
        done = cli("apply", "-f", str(_manifest(tmp_path, f"{base}/{bare.name}")))
    assert done.returncode == 0, done.stderr
    assert cli("exec", "box", "--", "cat", "README").stdout == "from git\n"


def test_a_cell_of_another_user_clones_without_the_hosts_credentials(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    """The host's user reaches a private repository with a credential helper: their cell
    starts with its files; a cell recorded as another user's (metadata.owner, as a developer's
    cell sent through the API is) is cloned without those credentials and fails saying so."""
    bare = _repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    with git_servers.git_http(bare.parent, basic="owner:s3cret") as base:
        url = f"{base}/{bare.name}"
        (home / ".git-credentials").write_text(f"http://owner:s3cret@{base[len('http://'):]}\n")
        (home / ".gitconfig").write_text("[credential]\n\thelper = store\n")
        env = {"HOME": str(home)}
        done = cli("apply", "-f", str(_manifest(tmp_path, url)), env=env)
        assert done.returncode == 0, done.stderr
        assert cli("exec", "box", "--", "cat", "README").stdout == "from git\n"
        other = tmp_path / "other.yaml"
        other.write_text(_manifest(tmp_path, url).read_text()
                         .replace("metadata: {name: box}", "metadata: {name: anas, owner: ana}"))
        done = cli("apply", "-f", str(other), "--timeout", "30s", env=env)
        assert done.returncode != 0
        said = done.stderr + done.stdout
        assert "cloned without the host's git credentials" in said, said
        assert "Traceback" not in done.stderr
        # the host's user's cell shared with a developer, who may change its git URLs
        # (developer-shared), is cloned without them too (found by attack-git)
        shared = tmp_path / "shared.yaml"
        shared.write_text(_manifest(tmp_path, url).read_text()
                          .replace("metadata: {name: box}", "metadata: {name: ours}")
                          + "  sharedWith: [ana]\n")
        done = cli("apply", "-f", str(shared), "--timeout", "30s", env=env)
        assert done.returncode != 0
        assert "cloned without the host's git credentials" in done.stderr + done.stdout
