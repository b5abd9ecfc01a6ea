"""host/rooted.py: every path resolved inside the given root, as the cell would resolve it;
links planted to host files, links that climb, and magic links never lead out."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.host import rooted


@pytest.fixture
def root(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    tree = tmp_path / "cell"
    (tree / "workspace" / "sub").mkdir(parents=True)
    (tree / "etc").mkdir()
    (tree / "etc" / "passwd").write_text("cell's passwd\n")
    (tmp_path / "host-secret").write_text("host only\n")
    fd = os.open(tree, os.O_PATH | os.O_DIRECTORY)
    yield tree, fd
    os.close(fd)


def _read(fd: int, path: str) -> str:
    opened = rooted.open_at(fd, path, os.O_RDONLY)
    try:
        return os.read(opened, 100).decode()
    finally:
        os.close(opened)


def test_absolute_and_climbing_links_resolve_inside_the_root(root: tuple[Path, int],
                                                             tmp_path: Path) -> None:
    tree, fd = root
    (tree / "workspace" / "pw").symlink_to("/etc/passwd")
    (tree / "workspace" / "up").symlink_to("../../../../../..")
    (tree / "workspace" / "secret").symlink_to(tmp_path / "host-secret")
    assert _read(fd, "/workspace/pw") == "cell's passwd\n"
    assert _read(fd, "/workspace/up/etc/passwd") == "cell's passwd\n"
    assert _read(fd, "/../../etc/passwd") == "cell's passwd\n"
    with pytest.raises(FileNotFoundError):
        rooted.open_at(fd, "/workspace/secret", os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        rooted.open_at(fd, f"/workspace/up{tmp_path}/host-secret", os.O_RDONLY)
    assert rooted.resolve(fd, "/workspace/up/workspace/pw") == "/etc/passwd"
    assert rooted.resolve(fd, "/workspace/sub/../pw") == "/etc/passwd"
    assert rooted.resolve(fd, "/workspace/new-file") == "/workspace/new-file"


def test_magic_links_and_loops_are_refused(root: tuple[Path, int]) -> None:
    tree, fd = root
    (tree / "workspace" / "self").symlink_to("/proc/self/root/etc/passwd")
    (tree / "workspace" / "a").symlink_to("b")
    (tree / "workspace" / "b").symlink_to("a")
    with pytest.raises(FileNotFoundError):  # no /proc inside this root
        rooted.open_at(fd, "/workspace/self", os.O_RDONLY)
    with pytest.raises(OSError) as loop:
        rooted.open_at(fd, "/workspace/a", os.O_RDONLY)
    assert loop.value.errno == errno.ELOOP
    with pytest.raises(OSError) as again:
        rooted.resolve(fd, "/workspace/a")
    assert again.value.errno == errno.ELOOP
    with pytest.raises(OSError):
        rooted.open_at(fd, "bad\0path", os.O_RDONLY)


def test_the_final_name_is_acted_on_not_what_it_links_to(root: tuple[Path, int],
                                                          tmp_path: Path) -> None:
    tree, fd = root
    (tree / "workspace" / "secret").symlink_to(tmp_path / "host-secret")
    with rooted.parent_of(fd, "/workspace/secret") as (parent, name):
        os.unlink(name, dir_fd=parent)
    assert (tmp_path / "host-secret").read_text() == "host only\n"
    assert not (tree / "workspace" / "secret").is_symlink()
    assert rooted.lstat(fd, "/").st_ino == os.stat(tree).st_ino
    with pytest.raises(PermissionError):
        rooted.split("/")
    assert rooted.normal("a/../../b//c") == "/b/c"
