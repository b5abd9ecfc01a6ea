"""`devcell import devcontainer` in a git work tree: the Cell's workspace is cloned from the
repository it was run in (api/devcontainer_source.py), with the real git. Its remote at the
current branch (or the commit when detached), credentials taken out; no remote: the
repository's own path when the host-path rules allow it, else an empty workspace and why;
outside a work tree, nothing. What was chosen is said, and what is written applies."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devcell.api import devcontainer
from devcell.backends.host import git_source
from tests.conftest import Cli, allow_host_paths

SAMPLE = '{"name": "web", "image": "devcell/busybox:latest"}\n'


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True,
                          env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                                   GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
                          ).stdout.strip()


def _project(root: Path, remote: str | None = None) -> Path:
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(SAMPLE)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "one")
    if remote is not None:
        _git(root, "remote", "add", "origin", remote)
    return root / ".devcontainer" / "devcontainer.json"




def _convert(path: Path, state: Path) -> devcontainer.Conversion:
    result = devcontainer.convert(path, name=None, out_dir=path.parent.parent, state_dir=state)
    assert result.problems == []  # what is written applies
    return result


def test_the_remote_at_the_current_branch_without_its_credentials(tmp_path: Path) -> None:
    path = _project(tmp_path / "web", "https://bob:s3cret@git.example.com/acme/web.git")
    result = _convert(path, tmp_path / "state")
    workspace = result.manifest["spec"]["workspace"]
    assert workspace["source"] == {"git": {"url": "https://git.example.com/acme/web.git",
                                           "ref": "main"}}
    text = devcontainer.render(result, path)
    assert "s3cret" not in text and "bob" not in text
    assert "s3cret" not in "".join(result.said + result.notes)
    assert any("holds credentials; they were left out" in n for n in result.notes)
    assert any("main may not be on remote origin yet" in n for n in result.notes)
    assert result.said[0] == (f"workspace: cloned from https://git.example.com/acme/web.git "
                              f"(remote origin of {tmp_path / 'web'}) at branch main; changes "
                              "not pushed are not in it")
    assert f"# {result.said[0]}\n" in text


def test_a_detached_head_is_its_commit_and_an_scp_like_remote_is_ssh(tmp_path: Path) -> None:
    path = _project(tmp_path / "web", "git@github.com:acme/web.git")
    commit = _git(tmp_path / "web", "rev-parse", "HEAD")
    _git(tmp_path / "web", "checkout", "-q", "--detach", "HEAD")
    result = _convert(path, tmp_path / "state")
    assert result.manifest["spec"]["workspace"]["source"] == {
        "git": {"url": "ssh://git@github.com/acme/web.git", "ref": commit}}
    assert f"at commit {commit} (HEAD is detached);" in result.said[0]


def test_a_branch_seen_on_the_remote_draws_no_warning(tmp_path: Path) -> None:
    bare = tmp_path / "repos" / "web.git"
    path = _project(tmp_path / "web", str(bare))
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "web"), str(bare)],
                   check=True)
    _git(tmp_path / "web", "fetch", "-q", "origin")
    allow_host_paths(tmp_path / "state", tmp_path / "repos")
    result = _convert(path, tmp_path / "state")
    assert result.manifest["spec"]["workspace"]["source"] == {
        "git": {"url": str(bare), "ref": "main"}}
    assert not [n for n in result.notes if "remote" in n]


def test_an_allowed_folder_of_roots_is_copied_in_and_its_remote_is_not_cloned(
        tmp_path: Path) -> None:
    path = _project(tmp_path / "web", "https://git.example.com/acme/web.git")
    allow_host_paths(tmp_path / "state", tmp_path / "web")
    result = _convert(path, tmp_path / "state")
    assert result.manifest["spec"]["workspace"]["source"] == {
        "directory": {"path": str(tmp_path / "web")}}
    assert result.said[0].startswith(f"workspace: a copy of the folder {tmp_path / 'web'}")
    assert not [n for n in result.notes if "workspace" in n]


def test_an_allowed_folder_of_a_users_is_bound_live_and_sudo_is_warned_about(
        tmp_path: Path) -> None:
    path = _project(tmp_path / "web")
    path.write_text('{"image": "devcell/busybox:latest", "postCreateCommand": "sudo apt-get '
                    'install -y jq"}')
    os.chown(tmp_path / "web", 1000, 1000)
    allow_host_paths(tmp_path / "state", tmp_path / "web")
    result = _convert(path, tmp_path / "state")
    assert result.manifest["spec"]["workspace"]["source"] == {
        "hostPath": {"path": str(tmp_path / "web")}}
    assert "bound live" in result.said[0] and "uid 1000" in result.said[0]
    assert [n for n in result.notes if n.startswith("postCreateCommand: uses sudo, which "
                                                    "cannot work here: the hooks run as uid "
                                                    "1000")]


def test_no_remote_outside_the_allowed_paths_leaves_the_workspace_empty_and_says_why(
        tmp_path: Path) -> None:
    path = _project(tmp_path / "web")
    result = _convert(path, tmp_path / "state")
    assert "source" not in result.manifest["spec"]["workspace"]
    assert result.said[0].startswith("workspace: empty; the repository")
    assert "allowedHostPaths" in result.said[0]
    assert [n for n in result.notes if n.startswith("workspace: the project's files are not "
                                                    "in the cell")]


def test_outside_a_work_tree_nothing_is_chosen(tmp_path: Path) -> None:
    path = tmp_path / "plain" / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir(parents=True)
    path.write_text(SAMPLE)
    result = _convert(path, tmp_path / "state")
    assert result.manifest["spec"]["workspace"] == {"mountPath": "/workspaces/plain"}
    assert "is not in a git work tree" in result.said[0]
    assert any(f"allow {tmp_path / 'plain'} in security.allowedHostPaths" in n
               for n in result.notes)


@pytest.mark.parametrize(("remote", "url", "stripped"), [
    ("git@github.com:acme/web.git", "ssh://git@github.com/acme/web.git", False),
    ("host:/srv/web.git", "ssh://host/srv/web.git", False),
    ("https://ghp_token@github.com/acme/web", "https://github.com/acme/web", True),
    ("ssh://git:pw@host/web.git", "ssh://host/web.git", True),
    ("ssh://git@host:2222/web.git", "ssh://git@host:2222/web.git", False),
    ("/srv/web.git", "/srv/web.git", False),
    ("file:///srv/web.git", "file:///srv/web.git", False),
])
def test_a_remote_becomes_a_clone_url_without_credentials(remote: str, url: str,
                                                          stripped: bool) -> None:
    assert git_source.as_clone_url(remote) == (url, stripped)


def test_the_cli_says_what_it_chose(cli: Cli, tmp_path: Path) -> None:
    _project(tmp_path / "web", "https://git.example.com/acme/web.git")
    done = cli("import", "devcontainer", str(tmp_path / "web"), "-o",
               str(tmp_path / "web" / "cell.yaml"))
    assert done.returncode == 0, done.stderr
    assert ("workspace: cloned from https://git.example.com/acme/web.git (remote origin of "
            in done.stderr)
    assert "url: https://git.example.com/acme/web.git" in (tmp_path / "web" / "cell.yaml"
                                                           ).read_text()
