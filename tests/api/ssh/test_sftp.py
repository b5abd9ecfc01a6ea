"""The sftp server on a cell's root, without a container: a directory stands for the cell's
`/` (as /proc/PID/root does for a running container). What a hostile cell plants never
leads the host out of that root, never blocks it, and never gains a set-user-ID bit."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from devcell.api.ssh.sftp import CellSFTPServer
from devcell.backends.interactive import CellRoot


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "cell"
    (root / "workspace").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text("cell\n")
    (tmp_path / "host-secret").write_text("host only\n")
    return root


def _server(tree: Path, owner: tuple[int, int] | None = None) -> Iterator[CellSFTPServer]:
    fd = os.open(tree, os.O_PATH | os.O_DIRECTORY)
    try:
        yield CellSFTPServer(None, CellRoot(fd, owner, "/workspace"))  # type: ignore[arg-type]
    finally:
        os.close(fd)


@pytest.fixture
def server(tree: Path) -> Iterator[CellSFTPServer]:
    yield from _server(tree)


@pytest.fixture
def unprivileged(tree: Path) -> Iterator[CellSFTPServer]:
    yield from _server(tree, (65534, 65534))


def _attrs(**fields: object) -> asyncssh.SFTPAttrs:
    return asyncssh.SFTPAttrs(**fields)  # type: ignore[arg-type]


def _write(server: CellSFTPServer, path: bytes, data: bytes, **attrs: object) -> None:
    handle = server.open(path, asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_TRUNC,
                         _attrs(**attrs))
    server.write(handle, 0, data)
    server.close(handle)


def _read(server: CellSFTPServer, path: bytes) -> bytes:
    handle = server.open(path, asyncssh.FXF_READ, _attrs())
    try:
        return server.read(handle, 0, 1 << 16)
    finally:
        server.close(handle)


def test_relative_paths_start_in_the_workspace_and_links_resolve_in_the_cell(
        server: CellSFTPServer, tree: Path, tmp_path: Path) -> None:
    _write(server, b"notes.txt", b"hello")
    assert (tree / "workspace" / "notes.txt").read_bytes() == b"hello"
    assert server.realpath(b".") == b"/workspace"
    (tree / "workspace" / "pw").symlink_to("/etc/passwd")
    (tree / "workspace" / "secret").symlink_to(tmp_path / "host-secret")
    (tree / "workspace" / "up").symlink_to("../../../../..")
    assert _read(server, b"pw") == b"cell\n"
    assert server.realpath(b"/workspace/up/workspace/pw") == b"/etc/passwd"
    with pytest.raises(FileNotFoundError):
        _read(server, b"secret")
    with pytest.raises(FileNotFoundError):
        _read(server, f"/workspace/up{tmp_path}/host-secret".encode())
    with pytest.raises(FileNotFoundError):  # writing through the link: no host file made
        _write(server, b"secret", b"overwritten")
    assert (tmp_path / "host-secret").read_text() == "host only\n"
    server.remove(b"secret")  # the link goes, not what it names
    assert (tmp_path / "host-secret").exists()


def test_fifos_and_devices_are_refused_without_blocking(server: CellSFTPServer, tree: Path
                                                        ) -> None:
    os.mkfifo(tree / "workspace" / "fifo")
    os.mknod(tree / "workspace" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    began = time.monotonic()
    for name in (b"fifo", b"null"):
        for flags in (asyncssh.FXF_READ, asyncssh.FXF_WRITE | asyncssh.FXF_TRUNC):
            with pytest.raises((asyncssh.SFTPError, OSError)):
                server.open(name, flags, _attrs())
    assert time.monotonic() - began < 5
    with pytest.raises(asyncssh.SFTPError):  # nothing inherited from asyncssh touches the host
        server.map_path(b"/etc/passwd")


def test_set_id_bits_are_never_set(server: CellSFTPServer, tree: Path) -> None:
    _write(server, b"tool", b"#!/bin/sh\n", permissions=0o4755)
    assert stat.S_IMODE((tree / "workspace" / "tool").stat().st_mode) == 0o755
    server.setstat(b"tool", _attrs(permissions=0o6755))
    assert stat.S_IMODE((tree / "workspace" / "tool").stat().st_mode) == 0o755
    server.mkdir(b"dir", _attrs(permissions=0o2775))
    assert stat.S_IMODE((tree / "workspace" / "dir").stat().st_mode) & 0o6000 == 0


def test_a_cell_that_does_not_run_as_root_owns_what_sftp_makes(
        unprivileged: CellSFTPServer, tree: Path) -> None:
    _write(unprivileged, b"made", b"x")
    unprivileged.mkdir(b"d", _attrs())
    unprivileged.symlink(b"made", b"alias")
    for name in ("made", "d", "alias"):
        info = os.lstat(tree / "workspace" / name)
        assert (info.st_uid, info.st_gid) == (65534, 65534), name
    with pytest.raises(asyncssh.SFTPError):
        unprivileged.setstat(b"made", _attrs(uid=0, gid=0))


def test_rename_keeps_sftps_rule_and_listing_shows_the_cells_names(
        server: CellSFTPServer, tree: Path) -> None:
    _write(server, b"a", b"1")
    _write(server, b"b", b"2")
    with pytest.raises(asyncssh.SFTPError):
        server.rename(b"a", b"b")
    server.posix_rename(b"a", b"b")
    assert (tree / "workspace" / "b").read_bytes() == b"1"

    async def listing() -> list[bytes]:
        return [entry.filename async for entry in server.scandir(b"/workspace")]

    names = asyncio.run(listing())
    assert set(names) == {b".", b"..", b"b"}
    assert server.format_user(0) == "0"
