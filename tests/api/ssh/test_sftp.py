"""The sftp server on a cell's root, without a container: a directory stands for the cell's
`/` (as /proc/PID/root does for a running container). What a hostile cell plants never
leads the host out of that root, never blocks it, and never gains a set-user-ID bit."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from devcell.api.ssh.sftp import CellSFTPServer
from devcell.backends.interactive import CellRoot


def _run(coroutine: Any) -> Any:
    """`coroutine` run to its end on a thread of its own: asyncio.run refuses a thread where
    an event loop runs, as the dashboard tests' Playwright leaves one on the main thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


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

    names = _run(listing())
    assert set(names) == {b".", b"..", b"b"}
    assert server.format_user(0) == "0"


def test_kernel_interfaces_that_look_like_files_are_refused() -> None:
    """With the host's own `/` as the root, /proc and /sys files (regular to stat) are never
    opened: the host's process would read them with the host's privileges."""
    yield_root = _server(Path("/"))
    server = next(yield_root)
    try:
        for path in (b"/proc/kallsyms", b"/proc/self/status", b"/sys/kernel/uevent_seqnum"):
            if not os.path.exists(path):
                continue
            with pytest.raises(asyncssh.SFTPError) as refused:
                server.open(path, asyncssh.FXF_READ, _attrs())
            assert refused.value.code == asyncssh.FX_PERMISSION_DENIED
    finally:
        yield_root.close()


def test_a_planted_link_never_gets_a_file_handed_to_the_cells_user(
        unprivileged: CellSFTPServer, tree: Path) -> None:
    (tree / "workspace" / "dangling").symlink_to("/etc/made-by-sftp")
    (tree / "workspace" / "pw").symlink_to("/etc/passwd")
    flags = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT
    with pytest.raises(FileNotFoundError):  # exists as a link: never created through it
        unprivileged.open(b"dangling", flags, _attrs())
    assert not (tree / "etc" / "made-by-sftp").exists()
    handle = unprivileged.open(b"pw", flags, _attrs())  # an existing file: opened, not given
    unprivileged.close(handle)
    assert os.stat(tree / "etc" / "passwd").st_uid == 0


def test_truncating_a_fifo_is_refused_without_blocking(server: CellSFTPServer, tree: Path
                                                       ) -> None:
    os.mkfifo(tree / "workspace" / "pipe")
    began = time.monotonic()
    with pytest.raises(asyncssh.SFTPError):
        server.setstat(b"pipe", _attrs(size=0))
    assert time.monotonic() - began < 5


def test_resolving_is_bounded_and_copy_data_is_not_offered(server: CellSFTPServer,
                                                            tree: Path) -> None:
    from devcell.api.ssh import sftp

    (tree / "workspace" / "b").mkdir()
    (tree / "workspace" / "l").symlink_to("/workspace/" + "b/../" * 300)  # 600 steps each
    began = time.monotonic()
    with pytest.raises(OSError):
        server.realpath(b"/workspace/l/l/l/l")
    assert time.monotonic() - began < 5
    sftp.drop_extensions()
    offered = [name for name, _ in asyncssh.sftp.SFTPServerHandler._extensions]
    assert b"copy-data" not in offered and b"posix-rename@openssh.com" in offered


def test_the_served_server_runs_its_calls_off_the_event_loop(tree: Path) -> None:
    from devcell.api.ssh.sftp import ServedSFTP

    fd = os.open(tree, os.O_PATH | os.O_DIRECTORY)
    served = ServedSFTP(None, CellRoot(fd, None, "/workspace"))  # type: ignore[arg-type]

    async def roundtrip() -> bytes:
        loop_thread = threading.get_ident()
        seen: list[int] = []
        original = os.pread

        def spy(*args: object) -> bytes:
            seen.append(threading.get_ident())
            return original(*args)  # type: ignore[arg-type]

        handle = await served.open(b"x", asyncssh.FXF_WRITE | asyncssh.FXF_CREAT, _attrs())
        await served.write(handle, 0, b"data")
        await served.close(handle)
        handle = await served.open(b"x", asyncssh.FXF_READ, _attrs())
        os.pread = spy  # type: ignore[assignment]
        try:
            data = await served.read(handle, 0, 10)
        finally:
            os.pread = original
        await served.close(handle)
        assert seen and loop_thread not in seen
        return bytes(data)

    try:
        assert _run(roundtrip()) == b"data"
    finally:
        served.exit()
        os.close(fd)


def test_a_file_made_has_the_mode_asked_for_whatever_the_umask_is_meanwhile(
        server: CellSFTPServer, tree: Path) -> None:
    """The process's umask is shared by its threads, and opening the state database sets it
    to 077 for a moment: a file scp made in that moment came out 0700."""
    old = os.umask(0o077)
    try:
        _write(server, b"script", b"#!/bin/sh\n", permissions=0o755)
        server.mkdir(b"shared", _attrs(permissions=0o775))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tree / "workspace" / "script").stat().st_mode) == 0o755
    assert stat.S_IMODE((tree / "workspace" / "shared").stat().st_mode) == 0o775
