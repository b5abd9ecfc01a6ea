"""spec.dotfiles on a real container cell, with the real git, a git server on 127.0.0.1
(git-http-backend) and the image's own sh and tar: the repository lands at ~/dotfiles and
its install script runs as the cell's user after the first start; a new ref installs again
over the earlier install (no script there: the dotfiles are linked into the home); a
failing script leaves the cell running and reachable, not Ready, its output in describe."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import git_servers
from tests.backends.container.support import IMAGE
from tests.conftest import Cli


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                            GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t"))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """dotfiles.git: main runs install.sh (fails when ~/fail exists), tag links has none."""
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    (work / ".profile").write_text("export EDITOR=vi\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "links")
    _git(work, "tag", "links")
    script = work / "install.sh"
    script.write_text("#!/bin/sh\nif [ -e \"$HOME/fail\" ]; then echo 'error: no zsh here' >&2;"
                      " exit 7; fi\nid -u > \"$HOME/.installed\"; pwd >> \"$HOME/.installed\"\n")
    _git(work, "add", ".")
    _git(work, "commit", "-q", "-m", "script")
    repos = tmp_path / "repos"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repos / "dotfiles.git")],
                   check=True)
    with git_servers.git_http(repos) as base:
        yield f"{base}/dotfiles.git"


def _manifest(tmp_path: Path, url: str, ref: str, state: str = "Running") -> Path:
    path = tmp_path / "box.yaml"
    path.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: box}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        f"  state: {state}\n"
        f"  dotfiles: {{git: {{url: '{url}', ref: {ref}, depth: 1}}}}\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    return path


def test_dotfiles_are_cloned_and_installed_once_then_replaced_on_a_new_ref(
        engine: None, cli: Cli, tmp_path: Path, served: str) -> None:
    done = cli("apply", "-f", str(_manifest(tmp_path, served, "main")))
    assert done.returncode == 0, done.stderr
    shown = cli("exec", "box", "--", "sh", "-c", "cat ~/.installed; ls -a ~/dotfiles")
    assert shown.stdout.startswith("0\n/root/dotfiles\n"), shown
    assert ".git" in shown.stdout and "install.sh" in shown.stdout
    stopped = cli("apply", "-f", str(_manifest(tmp_path, served, "main", "Stopped")))
    assert stopped.returncode == 0, stopped.stderr
    assert cli("exec", "box", "--", "true").returncode != 0
    assert cli("apply", "-f", str(_manifest(tmp_path, served, "main"))).returncode == 0
    again = cli("exec", "box", "--", "sh", "-c", "cat ~/.installed | wc -l")
    assert again.stdout.strip() == "2"  # not run again at a start
    done = cli("apply", "-f", str(_manifest(tmp_path, served, "links")))
    assert done.returncode == 0, done.stderr
    linked = cli("exec", "box", "--", "sh", "-c",
                 "readlink ~/.profile; test -e ~/dotfiles/install.sh || echo replaced")
    assert linked.stdout == "/root/dotfiles/.profile\nreplaced\n", linked
    described = cli("describe", "cell", "box")
    assert "DotfilesInstalled" in described.stdout, described.stdout


def test_a_failing_install_leaves_the_cell_running_not_ready_with_its_output(
        engine: None, cli: Cli, tmp_path: Path, served: str) -> None:
    manifest = _manifest(tmp_path, served, "links")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    assert cli("exec", "box", "--", "touch", "/root/fail").returncode == 0
    done = cli("apply", "-f", str(_manifest(tmp_path, served, "main")))
    assert "Traceback" not in done.stderr
    assert done.returncode != 0 and "error: no zsh here" in done.stderr, done
    described = cli("describe", "cell", "box")
    assert "DotfilesFailed" in described.stdout, described.stdout
    assert "exited with status 7" in described.stdout
    assert "error: no zsh here" in described.stdout
    got = cli("get", "cell", "box", "-o", "jsonpath={.status.phase}")
    assert got.stdout.strip() == "Running", got
    assert cli("exec", "box", "--", "true").returncode == 0  # reachable: fix it in place


def test_the_install_runs_as_the_cells_user_and_the_files_are_theirs(
        engine: None, cli: Cli, tmp_path: Path, served: str) -> None:
    manifest = tmp_path / "box.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: box}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        '  user: "4321:4321"\n  env: [{name: HOME, value: /workspace}]\n'
        f"  dotfiles: {{git: {{url: '{served}'}}}}\n"
        "  services:\n    - name: idle\n      command: [sleep, '600']\n")
    done = cli("apply", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    shown = cli("exec", "box", "--", "sh", "-c",
                "cat /workspace/.installed; stat -c %u /workspace/dotfiles/install.sh")
    assert shown.stdout == "4321\n/workspace/dotfiles\n4321\n", shown


def test_dotfiles_never_go_into_the_developers_live_folder(
        engine: None, cli: Cli, tmp_path: Path, served: str, state: Path) -> None:
    """A live workspace folder is the developer's: the dotfiles are neither unpacked there
    (nor, at a later install, removed from there), whether targetPath names it or the
    home lies in it."""
    root = tmp_path / "projects"
    (root / "app").mkdir(parents=True)
    (root / "app" / "main.py").write_text("print('mine')\n")
    os.chown(root / "app", 1000, 1000)
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       f"security:\n  allowedHostPaths: ['{root}']\n")
    os.chmod(state / "config.yaml", 0o600)

    def manifest(dotfiles: str) -> Path:
        path = tmp_path / "live.yaml"
        path.write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: live}\nspec:\n"
            f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
            f"  workspace: {{source: {{hostPath: {{path: '{root / 'app'}'}}}}}}\n"
            f"  env: [{{name: HOME, value: /workspace}}]\n"
            f"  dotfiles: {{git: {{url: '{served}'}}{dotfiles}}}\n"
            "  services:\n    - name: idle\n      command: [sleep, '600']\n")
        return path

    refused = cli("apply", "-f", str(manifest(", targetPath: /workspace/dots")))
    assert refused.returncode != 0 and "spec.dotfiles.targetPath" in refused.stderr, refused
    assert "live.yaml:" in refused.stderr and "Traceback" not in refused.stderr
    done = cli("apply", "-f", str(manifest("")))  # ~/dotfiles, and the home is /workspace
    assert done.returncode != 0 and "a host folder the cell writes" in done.stderr, done
    assert "Traceback" not in done.stderr
    # a home that leads there through a link (the exec's cwd is the workspace)
    linked = cli("apply", "-f", str(_home(manifest(""), "/proc/self/cwd")))
    assert linked.returncode != 0 and "a host folder the cell writes" in linked.stderr, linked
    assert sorted(p.name for p in (root / "app").iterdir()) == ["main.py"]
    assert cli("exec", "live", "--", "true").returncode == 0  # the cell itself runs


def _home(manifest: Path, home: str) -> Path:
    """`manifest` with the cell's HOME set to `home`."""
    manifest.write_text(manifest.read_text().replace("value: /workspace", f"value: {home}"))
    return manifest
