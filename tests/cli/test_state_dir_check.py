"""One check of the state directory before every command that uses it (issue 31 item 3): a
regular file, a FIFO, a missing directory under a file, another user's directory or the root
of a read-only mount is refused with one line naming the path, what is wrong and the fix,
exit 1, no traceback and nothing made. `apply` gave a FileExistsError traceback, and `get
cells` said "No resources found." with exit 0, on a state directory that was a file."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.cli import commands
from devcell.cli.main import ERRORS_ABOVE_ONE, main
from tests.conftest import EXAMPLES
from tests.store import faulty

EVERY_COMMAND = {
    ("apply",): ["apply", "-f", str(EXAMPLES / "api.yaml")],
    ("get",): ["get", "cells"],
    ("describe",): ["describe", "cell", "api"],
    ("delete",): ["delete", "cell", "api"],
    ("diff",): ["diff", "-f", str(EXAMPLES / "api.yaml")],
    ("snapshot", "create"): ["snapshot", "create", "api", "--name", "s"],
    ("snapshot", "export"): ["snapshot", "export", "s", "-o", "-"],
    ("snapshot", "import"): ["snapshot", "import", "-"],
    ("snapshot", "push"): ["snapshot", "push", "s", "127.0.0.1:9/team/s:v1"],
    ("snapshot", "pull"): ["snapshot", "pull", "127.0.0.1:9/team/s:v1"],
    ("snapshot", "restore"): ["snapshot", "restore", "s"],
    ("snapshot", "list"): ["snapshot", "list", "api"],
    ("cell", "fork"): ["cell", "fork", "api", "--snapshot", "s", "--name", "f"],
    ("cell", "sleep"): ["cell", "sleep", "api"],
    ("cell", "start"): ["cell", "start", "api"],
    ("cell", "restart"): ["cell", "restart", "api"],
    ("cell", "rerun-hooks"): ["cell", "rerun-hooks", "api"],
    ("wait",): ["wait", "cell", "api", "--timeout", "0"],
    ("controller", "run"): ["controller", "run", "--manifests", str(EXAMPLES)],
    ("op", "resume"): ["op", "resume", "op_x"],
    ("op", "cancel"): ["op", "cancel", "op_x"],
    ("image", "build-base"): ["image", "build-base"],
    ("image", "ls"): ["image", "ls"],
    ("image", "prune"): ["image", "prune", "--dry-run"],
    ("gc",): ["gc", "--dry-run"],
    ("df",): ["df"],
    ("exec",): ["exec", "api", "--", "true"],
    ("logs",): ["logs", "api"],
    ("port-forward",): ["port-forward", "api", "8080"],
    ("ssh",): ["ssh", "api"],
    ("ssh-config",): ["ssh-config"],
    ("ssh-proxy",): ["ssh-proxy", "api"],
    ("code",): ["code", "api", "--print"],
    ("token", "create"): ["token", "create", "--user", "ana", "--role", "viewer"],
    ("token", "list"): ["token", "list"],
    ("token", "revoke"): ["token", "revoke", "0123456789ab"],
    ("node", "cordon"): ["node", "cordon", "n1"],
    ("node", "uncordon"): ["node", "uncordon", "n1"],
    ("node", "drain"): ["node", "drain", "n1"],
}
"""A command line of every command that uses the state directory."""


def test_every_command_of_the_table_is_tried() -> None:
    stateful = {entry.words for entry in commands.TABLE if entry.state}
    assert stateful == set(EVERY_COMMAND)


@pytest.fixture(params=["regular file", "FIFO", "under a file", "dangling link", "another user's"])
def bad_state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(state directory, what the error says of it)."""
    path = tmp_path / "state"
    if request.param == "regular file":
        path.write_text("not a directory")
        yield path, f"the state directory {path} is a regular file, not a directory"
    elif request.param == "FIFO":
        os.mkfifo(path)
        yield path, f"the state directory {path} is a FIFO, not a directory"
    elif request.param == "dangling link":
        path.symlink_to(tmp_path / "gone")
        yield path, (f"the state directory {path} is a symbolic link to {tmp_path / 'gone'}, "
                     "which does not exist")
    elif request.param == "under a file":
        path.write_text("")
        yield path / "sub", (f"the state directory {path / 'sub'} cannot be made: {path} is a "
                             "regular file, not a directory")
    else:
        path.mkdir(mode=0o700)
        os.chown(path, 65534, 65534) if os.geteuid() == 0 else pytest.skip("needs root")
        yield path, f"the state directory {path} belongs to {pwd.getpwuid(65534).pw_name} (uid 65534)"


def _snapshot(path: Path) -> list[tuple[str, int]]:
    """What is at and under the parent of `path`: names and types (nothing may be made)."""
    top = path.parent if path.parent.is_dir() else path.parent.parent
    return sorted((str(p), stat.S_IFMT(p.lstat().st_mode)) for p in [top, *top.rglob("*")])


@pytest.mark.parametrize("words", sorted(EVERY_COMMAND))
def test_a_state_directory_that_cannot_be_one_is_refused_by_every_command(
        words: tuple[str, ...], bad_state: tuple[Path, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    path, said = bad_state
    before = _snapshot(path)
    code = main(["--state-dir", str(path), *EVERY_COMMAND[words]])
    out, err = capsys.readouterr()
    failed = 2 if words[0] in ERRORS_ABOVE_ONE else 1  # diff's 1 says "differs"
    assert (code, out) == (failed, ""), err
    assert err.count("\n") == 1 and err.startswith(f"error: {said}"), err
    assert "--state-dir" in err  # the fix
    assert _snapshot(path) == before


def test_the_root_of_a_read_only_mount_is_named_not_its_parent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    disk = tmp_path / "disk"
    with faulty.small_disk(disk):
        faulty.remount(disk, "ro")
        try:
            code = main(["--state-dir", str(disk), "get", "cells"])
        finally:
            faulty.remount(disk, "rw")
    out, err = capsys.readouterr()
    assert (code, out) == (1, ""), err
    assert err == (f"error: the state directory {disk} is on a read-only file system (mounted "
                   f"read-only at {disk}): remount it read-write, or point --state-dir (or "
                   "$DEVCELL_HOME) at a writable directory\n")
