"""Opening files a cell can write, from the host: never through a link, only regular files,
never blocking, and read in bounded amounts.

A cell writes its workspace and its log directory; whatever it plants there (a symbolic link
to /etc/shadow, a FIFO, a directory, a sparse 1 GiB file) must not make a host-side command
read a host file, hang, crash or fill memory. So the directory is opened once without
following links, the file is opened relative to it with O_NOFOLLOW and O_NONBLOCK, and fstat
decides: a regular file or nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from devcell.errors import DevCellError


class UnsafeFile(DevCellError):
    """Something other than a regular file where the host expected one (planted by a cell)."""


_KIND = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFDIR: "a directory",
         stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket"}


def describe_mode(mode: int) -> str:
    return _KIND.get(stat.S_IFMT(mode), "not a regular file")


MACHINE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EIO, errno.EINTR})
"""Failures of this process or machine, not of the file: raised as they are, never reported
as a file that is unsafe to read (1,100 logs open at once once made a service's real log
"not a regular file")."""


def open_regular(directory: Path, name: str) -> int:
    """A read-only descriptor of the regular file `name` directly inside `directory`.

    FileNotFoundError when there is none; UnsafeFile when `name` (or `directory`) is a link,
    a FIFO, a device, a directory: nothing of it is read, and opening never blocks.
    """
    if not name or "/" in name or name in (".", ".."):
        raise UnsafeFile(f"{name!r} is not a plain file name")
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        dir_fd = os.open(directory, flags | os.O_DIRECTORY)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in MACHINE_ERRNOS:
            raise
        raise UnsafeFile(f"{directory} is not a directory DevCell can read safely "
                         f"({exc.strerror})") from None
    try:
        try:
            fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError) or exc.errno in MACHINE_ERRNOS:
                raise
            # ELOOP: a symbolic link (O_NOFOLLOW); ENXIO: a FIFO or socket nobody writes.
            try:
                mode = os.lstat(name, dir_fd=dir_fd).st_mode
                what = describe_mode(mode)
            except OSError:
                mode, what = 0, f"unreadable ({exc.strerror})"
            if stat.S_ISREG(mode):  # a regular file this process may not open (EACCES)
                what = f"a regular file that cannot be opened ({exc.strerror})"
            raise UnsafeFile(f"{directory / name} is {what}; not read") from None
    finally:
        os.close(dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnsafeFile(f"{directory / name} is {describe_mode(mode)}; not read")
    return fd


def read_some(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from the descriptor's position (less at the end of the file)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def open_given(path: str | os.PathLike[str]) -> int:
    """Open a path a user gave on the command line for reading without waiting for a writer
    (opening a FIFO nobody writes blocks for ever); reads then block as usual, and such a
    FIFO reads as empty. A pipe with its writer (`-f <(cmd)`) reads as it comes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(fd, True)
    return fd


def read_given(path: str) -> BinaryIO:
    """The file a user gave on the command line (open_given), open for reading in binary;
    one error line naming it when it cannot be opened (`snapshot import FILE`, direct and
    through a server)."""
    from devcell.names import printable

    try:
        return open(open_given(path), "rb")  # noqa: SIM115 (the caller closes it)
    except OSError as exc:
        raise DevCellError(f"cannot read {printable(path)}: {exc.strerror}") from None


def wait_for_writer(fd: int, seconds: float) -> bytes | None:
    """For `fd` from open_given: a named FIFO no program has opened for writing yet read as
    empty at once (a writer started a moment later, `(sleep 1; cat m.yaml > ff) & devcell
    diff -f ff`, met "no objects": attack43, H), and clearing O_NONBLOCK does not help (a
    read with no writer is end of file). So wait for one, up to `seconds`: never for ever,
    as a FIFO nobody writes once held `apply -f` (the fuzz test). The bytes already taken
    from the FIFO (at most one) to tell a silent writer from none; None when no writer came.
    A file, or a pipe (`-f <(cmd)`, whose writer is there from the start): b"" at once."""
    found = os.fstat(fd)
    if not stat.S_ISFIFO(found.st_mode) or found.st_dev == _pipe_device():
        return b""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if poller.poll(int(seconds * 1000)):  # written to, or a writer came and went
        return b""
    os.set_blocking(fd, False)
    try:
        first = os.read(fd, 1)
    except BlockingIOError:  # a writer has it open and has said nothing yet: read as it comes
        return b""
    finally:
        os.set_blocking(fd, True)
    return first or None


def _pipe_device() -> int:
    """The device of pipes (pipefs), which a named FIFO's file system never is."""
    read, write = os.pipe()
    try:
        return os.fstat(read).st_dev
    finally:
        os.close(read)
        os.close(write)


def read_json_object(path: Path, limit: int) -> dict[str, Any] | None:
    """A small JSON object DevCell wrote (a cache entry): read from a regular file, never
    through a link, never blocking on a FIFO, at most `limit` bytes; None when there is none,
    or it is anything else (a damaged cache is a miss, not an error)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        raw = f.read(limit)
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@contextlib.contextmanager
def destination(out: Path | BinaryIO) -> Iterator[BinaryIO]:
    """Where an archive (or any output made whole or not at all) is written: an open stream
    as it is; a regular file (or none yet) written beside it and renamed over it once
    complete (a link to one: the file it names), never left half-written; a device or FIFO
    (`/dev/null`, `/dev/stdout`, a named pipe) written to, as tar -f does, never replaced.
    A failure to write is a DevCellError naming the file."""
    if not isinstance(out, Path):
        yield out
        out.flush()
        return
    try:
        existing = out.stat()  # through a link: what the user's path names
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        raise DevCellError(f"cannot write {out}: {exc.strerror or exc}") from None
    if existing is not None and not stat.S_ISREG(existing.st_mode) \
            and not stat.S_ISDIR(existing.st_mode):
        # A device, a FIFO (`-o /dev/null`, `-o /dev/stdout`, a named pipe): written to, as
        # tar -f does; never replaced by a rename, which would put a regular file in place
        # of the machine's /dev/null.
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CLOEXEC)
            with os.fdopen(fd, "wb") as stream:
                yield stream
                stream.flush()
        except OSError as exc:
            raise DevCellError(f"cannot write {out}: {exc.strerror or exc}") from None
        return
    if out.is_symlink():  # a link to a regular file: the file it names is replaced
        out = Path(os.path.realpath(out))
    # os.urandom, not secrets: safeio is on the snapshot and sleep paths, which import
    # neither secrets nor its hmac/base64 (tests/backends/container/test_engine_socket.py)
    tmp = out.with_name(f".{out.name}.{os.urandom(4).hex()}.partial")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.rename(tmp, out)
    except OSError as exc:
        raise DevCellError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
