"""A hostile cell: what it plants where it can write must not reach, hang or exhaust the host.

A cell writes its workspace and its service log directory. It plants links to host files and
directories, FIFOs, sockets, device nodes (if it ever had CAP_MKNOD), sparse files of
gigabytes, trees deeper than PATH_MAX and Python's recursion limit, names with newlines and
escape sequences. The host's own commands that read those places (checkpoint for `snapshot
create` and `cell sleep`, restore for `cell fork`, the change check before `delete`, the
removal, `logs`, `exec`) must never follow a link, never hang, never read a file whole, and
never end in a traceback: they succeed, or fail with a clear message and leave the cell as
it was.

The host-side code is backend-independent (devcell.backends.container.workspaces and treecopy, no
engine), so the first part plants with the host's own system calls, as root in a cell
would; the second part plants from inside a real container cell and drives the CLI.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.backends.host import treecopy
from devcell.errors import BackendError
from tests.backends.container.support import box_manifest
from tests.backends.engine import remove_containers, require_engine
from tests.conftest import Cli

HOST_SECRET = "host-only-5e1f"
DEEP = 3000
"""Levels of a deep tree: past PATH_MAX (with one-byte names) and Python's recursion limit."""


@pytest.fixture(autouse=True)
def _removed_whatever_happens(tmp_path: Path) -> Iterator[None]:
    """A deep tree left behind would break pytest's own clean-up of old temporary
    directories (shutil.rmtree recurses) in every later run on this machine."""
    yield
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(tmp_path)], check=False)


@pytest.fixture(autouse=True)
def _bounded_time() -> Iterator[None]:
    """Each test ends within its bound: a hang is a failure, not a stuck suite."""
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("a host command hung on what the cell planted")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(240)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _host_secret(tmp_path: Path) -> Path:
    path = tmp_path / "host-secret"
    path.write_text(HOST_SECRET + "\n")
    return path


def _deep(root: Path, levels: int = DEEP) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def _plant(workspace: Path, secret: Path) -> None:
    """Everything but the deep tree (which a copy refuses: tested apart)."""
    (workspace / "leak").symlink_to(secret)
    (workspace / "etc").symlink_to("/etc")
    (workspace / "up").symlink_to("../../..")
    os.mkfifo(workspace / "fifo")
    here = os.getcwd()
    os.chdir(workspace)  # a socket's path is limited to 108 bytes
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind("sock")
        sock.close()
    finally:
        os.chdir(here)
    if os.geteuid() == 0:
        os.mknod(workspace / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with open(workspace / "sparse", "wb") as out:
        out.truncate(64 * 2**30)  # 64 GiB of nothing
    (workspace / "new\nline\x1b[31m").write_text("odd name\n")
    (workspace / "file").write_text("data\n")
    os.link(workspace / "file", workspace / "hardlink")


@pytest.fixture
def store(tmp_path: Path) -> WorkspaceStore:
    return WorkspaceStore(Layout(tmp_path / "state"))


def test_checkpoint_fork_and_delete_of_a_planted_workspace(
        store: WorkspaceStore, tmp_path: Path) -> None:
    store.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a", from_checkpoint=None)
    workspace = store.layout.workspace("vol_a")
    _plant(workspace, _host_secret(tmp_path))
    tracemalloc.start()
    try:
        meta = store.checkpoint(checkpoint_id="chk_1", cell_id="cell_a", volume_id="vol_a")
        store.create_volume(cell_id="cell_b", cell_name="b", volume_id="vol_b",
                            from_checkpoint="chk_1")
        changed = store.changed_since("vol_a", "chk_1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"{peak} bytes allocated for a 64 GiB sparse file"
    assert changed is False
    for copy in (store.layout.checkpoint("chk_1") / "workspace", store.layout.workspace("vol_b")):
        assert os.readlink(copy / "leak") == str(tmp_path / "host-secret")  # a link, kept
        assert os.readlink(copy / "etc") == "/etc"
        assert stat.S_ISFIFO(os.lstat(copy / "fifo").st_mode)
        assert (copy / "new\nline\x1b[31m").read_text() == "odd name\n"
        assert os.lstat(copy / "sparse").st_blocks < 1024  # still sparse
        assert os.lstat(copy / "hardlink").st_ino == os.lstat(copy / "file").st_ino
    assert meta["files"] >= 9
    assert not any(p.name == "passwd" for p in (store.layout.checkpoint("chk_1")).rglob("*"))
    (workspace / "file").write_text("changed\n")
    assert store.changed_since("vol_a", "chk_1") is True
    store.delete_volume("vol_a")
    store.delete_checkpoint("chk_1")
    assert not store.layout.volume("vol_a").exists()
    assert (tmp_path / "host-secret").read_text() == HOST_SECRET + "\n"  # never touched
    assert os.path.exists("/etc/passwd")


def test_a_tree_deeper_than_path_max_and_the_recursion_limit(
        store: WorkspaceStore, tmp_path: Path) -> None:
    """Was: RecursionError from the change check (delete's approval) and the removal,
    'File name too long' from deep inside cp for a checkpoint."""
    store.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a", from_checkpoint=None)
    workspace = store.layout.workspace("vol_a")
    _deep(workspace)
    (workspace / "escape").symlink_to("/")
    tracemalloc.start()
    try:
        assert store.changed_since("vol_a", None) is True
        assert treecopy.measure(workspace).files == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20
    with pytest.raises(BackendError, match="longer than .*PATH_MAX"):
        store.checkpoint(checkpoint_id="chk_1", cell_id="cell_a", volume_id="vol_a")
    assert store.find_checkpoint("chk_1") is None
    assert not list(store.layout.checkpoints.iterdir())  # no temporary left behind
    store.delete_volume("vol_a")
    assert not store.layout.volume("vol_a").exists()
    assert not [p for p in store.layout.volumes.iterdir() if p.name.startswith(".trash")]


def test_a_directory_swapped_for_a_link_mid_walk_is_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    walked = []
    from devcell.backends.host import treewalk

    with pytest.raises(treewalk.TreeChanged):  # refused, never followed into /etc
        for directory in treewalk.walk(root):
            walked.append(directory.path())
            if directory.path() == "a":  # the cell moves b away and plants a link in its place
                os.rename(root / "a" / "b", root / "moved")
                (root / "a" / "b").symlink_to("/etc")
    assert walked == ["", "a"]


# -- a real container cell, driven through the CLI ---------------------------------------


@pytest.fixture
def box(cli: Cli, tmp_path: Path, state_dir: Path) -> Iterator[str]:
    require_engine()
    manifest = box_manifest(tmp_path, service="talker",
                            command='[sh, -c, "echo hello; sleep 600"]')
    try:
        applied = cli("apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        yield "box"
    finally:
        remove_containers(state_dir)


def _ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_every_host_command_over_a_hostile_container_cell(
        cli: Cli, box: str, tmp_path: Path, state_dir: Path) -> None:
    secret = _host_secret(tmp_path)
    secret.chmod(0o644)
    plant = (f"cd /workspace && ln -s {secret} leak && ln -s /etc etc && mkfifo fifo && "
             "dd if=/dev/zero of=sparse bs=1 count=0 seek=8G 2>/dev/null && "
             "echo odd > \"$(printf 'new\\nline\\033[31m')\" && "
             "ln -s /etc/shadow /var/log/devcell/talker.log.1 && mkfifo /var/log/devcell/x.log && "
             "ln /etc/passwd /workspace/hard 2>/dev/null; true")
    _ok(cli("exec", box, "--", "sh", "-c", plant, timeout=60))
    _ok(cli("snapshot", "create", box, "--name", "s1", timeout=120))
    checkpoint = next(state_dir.glob("images/checkpoints/*/workspace"))
    assert os.readlink(checkpoint / "leak") == str(secret)
    assert not (checkpoint / "hard").exists()  # no hard link across the mount
    _ok(cli("cell", "fork", box, "--snapshot", "s1", "--name", "fork", timeout=120))
    inside = cli("exec", "fork", "--", "cat", "/workspace/leak", timeout=60)
    assert HOST_SECRET not in inside.stdout + inside.stderr
    _ok(cli("cell", "sleep", box, timeout=120))
    _ok(cli("cell", "start", box, timeout=120))
    logs = cli("logs", box, timeout=60)
    _ok(logs)
    assert HOST_SECRET not in logs.stdout + logs.stderr and "root:" not in logs.stdout
    # Deeper than PATH_MAX: a snapshot is refused with the reason, and the cell keeps running.
    deep = f"cd /workspace && i=0; while [ $i -lt {DEEP} ]; do mkdir d && cd d; i=$((i+1)); done"
    _ok(cli("exec", box, "--", "sh", "-c", deep, timeout=120))
    refused = cli("snapshot", "create", box, "--name", "s2", timeout=120)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "PATH_MAX" in refused.stdout + refused.stderr
    _ok(cli("exec", box, "--", "true", timeout=60))  # resumed, not left frozen
    _ok(cli("delete", "cell", box, "--approve", timeout=120))
    assert not [p for p in state_dir.glob("volumes/*") if not p.name.startswith(".")
                and (p / "volume.json").exists()
                and "box" in (p / "volume.json").read_text()]
    assert secret.read_text() == HOST_SECRET + "\n"
