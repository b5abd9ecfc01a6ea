"""sftp (and so OpenSSH's scp) on a cell's own files, every path resolved inside the cell.

The server works from the running cell's root descriptor (the backend's `open_root`) through
host/rooted.py: each path is resolved by the kernel as if that root were `/`, so a link the
cell planted names at worst another of its own files, never the host's. Files are opened only
if they are regular (a FIFO or a device the cell made is refused without blocking), new files
and directories belong to the user the cell runs as, set-user-ID and set-group-ID bits are
never set, and ownership changes are refused when the cell does not run as root. Relative
paths start at the workspace's mount path, where a session starts too.

`map_path` refuses everything: a method of asyncssh's base class not overridden here would
touch the host's files, so it fails instead of doing so.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import os
import stat as stat_mod
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncssh

from devcell.backends.host import rooted
from devcell.backends.interactive import CellRoot

MODE_BITS = 0o1777
"""Permission bits a client may set: never set-user-ID or set-group-ID."""
MAX_READ = 256 * 1024


class _Open:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """For asyncssh's ranges extension (SEEK_DATA/SEEK_HOLE on the file)."""
        return os.lseek(self.fd, offset, whence)


def _denied(why: str) -> asyncssh.SFTPError:
    return asyncssh.SFTPError(asyncssh.FX_PERMISSION_DENIED, why)


class CellSFTPServer(asyncssh.SFTPServer):
    """One sftp session on the cell's files."""

    def __init__(self, chan: Any, root: CellRoot) -> None:
        super().__init__(chan)
        self.root = root

    # -- paths -----------------------------------------------------------------------------

    def map_path(self, path: bytes) -> bytes:
        raise _denied("not served")

    def reverse_map_path(self, path: bytes) -> bytes:
        raise _denied("not served")

    def _path(self, path: bytes) -> str:
        text = os.fsdecode(path)
        if "\0" in text:
            raise asyncssh.SFTPError(asyncssh.FX_BAD_MESSAGE, "invalid path")
        if not text.startswith("/"):
            text = f"{self.root.home.rstrip('/')}/{text}"
        return rooted.normal(text)

    def format_user(self, uid: int | None) -> str:
        return "" if uid is None else str(uid)  # the cell's names are not the host's

    def format_group(self, gid: int | None) -> str:
        return "" if gid is None else str(gid)

    def realpath(self, path: bytes) -> bytes:
        return os.fsencode(rooted.resolve(self.root.fd, self._path(path)))

    # -- attributes ------------------------------------------------------------------------

    def stat(self, path: bytes) -> asyncssh.SFTPAttrs:
        return asyncssh.SFTPAttrs.from_local(rooted.stat(self.root.fd, self._path(path)))

    def lstat(self, path: bytes) -> asyncssh.SFTPAttrs:
        return asyncssh.SFTPAttrs.from_local(rooted.lstat(self.root.fd, self._path(path)))

    def fstat(self, file_obj: object) -> asyncssh.SFTPAttrs:
        return asyncssh.SFTPAttrs.from_local(os.fstat(self._fd(file_obj)))

    def setstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        fd = rooted.open_at(self.root.fd, self._path(path), os.O_PATH)
        try:
            self._apply(f"/proc/self/fd/{fd}", attrs, follow=True)
        finally:
            os.close(fd)

    def lsetstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        with rooted.parent_of(self.root.fd, self._path(path)) as (parent, name):
            if attrs.size is not None or attrs.permissions is not None:
                info = os.stat(name, dir_fd=parent, follow_symlinks=False)
                if stat_mod.S_ISLNK(info.st_mode):
                    raise asyncssh.SFTPError(asyncssh.FX_OP_UNSUPPORTED,
                                             "a link has no size or permissions of its own")
                fd = rooted.open_at(parent, name, os.O_PATH | os.O_NOFOLLOW)
                try:
                    self._apply(f"/proc/self/fd/{fd}", attrs, follow=True)
                finally:
                    os.close(fd)
                return
            self._apply(name, attrs, follow=False, dir_fd=parent)

    def fsetstat(self, file_obj: object, attrs: asyncssh.SFTPAttrs) -> None:
        self._apply(f"/proc/self/fd/{self._fd(file_obj)}", attrs, follow=True)

    def _apply(self, target: str, attrs: asyncssh.SFTPAttrs, *, follow: bool,
               dir_fd: int | None = None) -> None:
        """Set what `attrs` carries on `target` (a /proc/self/fd path of a descriptor
        resolved in the cell, or a name in `dir_fd` with links not followed)."""
        if attrs.uid is not None or attrs.gid is not None:
            if self.root.owner is not None:
                raise _denied("the cell does not run as root: ownership cannot be changed")
            os.chown(target, -1 if attrs.uid is None else attrs.uid,
                     -1 if attrs.gid is None else attrs.gid, dir_fd=dir_fd,
                     follow_symlinks=follow)
        if attrs.permissions is not None:
            os.chmod(target, attrs.permissions & MODE_BITS, dir_fd=dir_fd)
        if attrs.size is not None:
            self._truncate(target, attrs.size, dir_fd=dir_fd)
        if attrs.atime is not None or attrs.mtime is not None:
            current = os.stat(target, dir_fd=dir_fd, follow_symlinks=follow)
            atime = current.st_atime_ns if attrs.atime is None else \
                attrs.atime * 1_000_000_000 + (attrs.atime_ns or 0)
            mtime = current.st_mtime_ns if attrs.mtime is None else \
                attrs.mtime * 1_000_000_000 + (attrs.mtime_ns or 0)
            os.utime(target, ns=(atime, mtime), dir_fd=dir_fd, follow_symlinks=follow)

    @staticmethod
    def _truncate(target: str, size: int, *, dir_fd: int | None) -> None:
        """Only a regular file is truncated, opened without blocking (a lease the cell holds
        fails the request instead of holding every channel)."""
        if dir_fd is not None:
            raise asyncssh.SFTPError(asyncssh.FX_OP_UNSUPPORTED, "a link has no size")
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC) \
            if stat_mod.S_ISREG(os.stat(target).st_mode) else -1
        if fd < 0:
            raise asyncssh.SFTPError(asyncssh.FX_FAILURE, "not a regular file")
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    # -- files -----------------------------------------------------------------------------

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if pflags & asyncssh.FXF_READ and pflags & asyncssh.FXF_WRITE:
            flags = os.O_RDWR
        elif pflags & asyncssh.FXF_WRITE:
            flags = os.O_WRONLY
        else:
            flags = os.O_RDONLY
        for bit, flag in ((asyncssh.FXF_APPEND, os.O_APPEND), (asyncssh.FXF_CREAT, os.O_CREAT),
                          (asyncssh.FXF_TRUNC, os.O_TRUNC), (asyncssh.FXF_EXCL, os.O_EXCL)):
            if pflags & bit:
                flags |= flag
        perms = (0o644 if attrs.permissions is None else attrs.permissions) & 0o777
        try:
            fd, created = rooted.open_regular(self.root.fd, self._path(path), flags, perms)
        except OSError as exc:
            if exc.errno == errno.EPERM:
                raise asyncssh.SFTPError(asyncssh.FX_PERMISSION_DENIED,
                                         exc.strerror or "refused") from None
            raise
        try:
            if created and self.root.owner is not None:
                os.fchown(fd, *self.root.owner)  # the file just made, never a name
            if created:  # the mode asked for, whatever the process's umask is meanwhile
                os.fchmod(fd, perms)
        except BaseException:
            os.close(fd)
            raise
        return _Open(fd)

    def open56(self, path: bytes, desired_access: int, flags: int,
               attrs: asyncssh.SFTPAttrs) -> object:
        raise asyncssh.SFTPError(asyncssh.FX_OP_UNSUPPORTED, "use SFTP version 3")

    def read(self, file_obj: object, offset: int, size: int) -> bytes:
        return os.pread(self._fd(file_obj), min(size, MAX_READ), offset)

    def write(self, file_obj: object, offset: int, data: bytes) -> int:
        fd = self._fd(file_obj)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + written)
        return written

    def close(self, file_obj: object) -> None:
        fd = self._fd(file_obj)
        if isinstance(file_obj, _Open):
            file_obj.fd = -1
        os.close(fd)

    def fsync(self, file_obj: object) -> None:
        os.fsync(self._fd(file_obj))

    @staticmethod
    def _fd(file_obj: object) -> int:
        if not isinstance(file_obj, _Open) or file_obj.fd < 0:
            raise asyncssh.SFTPError(asyncssh.FX_FAILURE, "invalid handle")
        return file_obj.fd

    # -- directories -----------------------------------------------------------------------

    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        fd = rooted.open_at(self.root.fd, self._path(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield asyncssh.SFTPName(b".", attrs=asyncssh.SFTPAttrs.from_local(os.fstat(fd)))
            yield asyncssh.SFTPName(b"..", attrs=asyncssh.SFTPAttrs())
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        attrs = asyncssh.SFTPAttrs.from_local(entry.stat(follow_symlinks=False))
                    except OSError:
                        continue
                    yield asyncssh.SFTPName(os.fsencode(entry.name), attrs=attrs)
        finally:
            os.close(fd)

    def mkdir(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> None:
        mode = (0o755 if attrs.permissions is None else attrs.permissions) & MODE_BITS
        with rooted.parent_of(self.root.fd, self._path(path)) as (parent, name):
            os.mkdir(name, mode, dir_fd=parent)
            made = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                           dir_fd=parent)
            try:  # the directory just made (a swap for a link fails O_DIRECTORY)
                if self.root.owner is not None:
                    os.chown(f"/proc/self/fd/{made}", *self.root.owner)
                os.chmod(f"/proc/self/fd/{made}", mode)  # as asked, whatever the umask is
            finally:
                os.close(made)

    def rmdir(self, path: bytes) -> None:
        with rooted.parent_of(self.root.fd, self._path(path)) as (parent, name):
            os.rmdir(name, dir_fd=parent)

    def remove(self, path: bytes) -> None:
        with rooted.parent_of(self.root.fd, self._path(path)) as (parent, name):
            os.unlink(name, dir_fd=parent)

    def rename(self, oldpath: bytes, newpath: bytes) -> None:
        """SFTP's rename: refused when the new name exists (posix_rename replaces)."""
        with rooted.parent_of(self.root.fd, self._path(newpath)) as (parent, name):
            try:
                os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise asyncssh.SFTPError(asyncssh.FX_FAILURE, "the new name exists")
        self.posix_rename(oldpath, newpath)

    def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        with rooted.parent_of(self.root.fd, self._path(oldpath)) as (old_parent, old_name), \
                rooted.parent_of(self.root.fd, self._path(newpath)) as (new_parent, new_name):
            os.replace(old_name, new_name, src_dir_fd=old_parent, dst_dir_fd=new_parent)

    # -- links -----------------------------------------------------------------------------

    def readlink(self, path: bytes) -> bytes:
        return os.fsencode(rooted.readlink(self.root.fd, self._path(path)))

    def symlink(self, oldpath: bytes, newpath: bytes) -> None:
        """A link named `newpath` whose text is `oldpath`; it is resolved in the cell."""
        if b"\0" in oldpath:
            raise asyncssh.SFTPError(asyncssh.FX_BAD_MESSAGE, "invalid link text")
        with rooted.parent_of(self.root.fd, self._path(newpath)) as (parent, name):
            os.symlink(oldpath, name, dir_fd=parent)
            if self.root.owner is not None:
                os.chown(name, *self.root.owner, dir_fd=parent, follow_symlinks=False)

    def link(self, oldpath: bytes, newpath: bytes) -> None:
        with rooted.parent_of(self.root.fd, self._path(oldpath)) as (old_parent, old_name), \
                rooted.parent_of(self.root.fd, self._path(newpath)) as (new_parent, new_name):
            os.link(old_name, new_name, src_dir_fd=old_parent, dst_dir_fd=new_parent,
                    follow_symlinks=False)

    # -- file systems ----------------------------------------------------------------------

    def statvfs(self, path: bytes) -> asyncssh.SFTPVFSAttrs:
        fd = rooted.open_at(self.root.fd, self._path(path), os.O_PATH)
        try:
            return asyncssh.SFTPVFSAttrs.from_local(os.statvfs(fd))
        finally:
            os.close(fd)

    def fstatvfs(self, file_obj: object) -> asyncssh.SFTPVFSAttrs:
        return asyncssh.SFTPVFSAttrs.from_local(os.statvfs(self._fd(file_obj)))

    def exit(self) -> None:
        """The client ended the session: say it succeeded, as sshd's sftp-server does (scp
        and sftp -b treat a channel closed without an exit status as a failure)."""
        if self.channel is None:
            return
        try:
            self.channel.exit(0)
        except (OSError, asyncssh.Error):
            pass


OFF_LOOP = ("realpath", "stat", "lstat", "fstat", "setstat", "lsetstat", "fsetstat", "open",
            "read", "write", "close", "fsync", "mkdir", "rmdir", "remove", "rename",
            "posix_rename", "readlink", "symlink", "link", "statvfs", "fstatvfs")
"""Every call that touches the cell's files runs on one worker thread of the session: a slow
or hostile file system never holds the event loop (other channels, the other sessions of
the connection), and one thread keeps the client's order (a close never overtakes a read)."""

UNADVERTISED = (b"copy-data", b"ranges@asyncssh.com")
"""asyncssh's extensions left out: copy-data runs a whole copy inside one request (a file the
cell keeps appending to makes it endless), and OpenSSH's clients use neither."""


class Refusing(asyncssh.SFTPServer):
    """What a session gets when the cell's files cannot be opened (its channel is closed
    with the reason already): every path refused."""

    def map_path(self, path: bytes) -> bytes:
        raise _denied("the cell's files are not reachable")


class ServedSFTP(CellSFTPServer):
    """CellSFTPServer as the connection serves it: its calls on the session's worker."""

    def __init__(self, chan: Any, root: CellRoot) -> None:
        super().__init__(chan, root)
        self._worker = ThreadPoolExecutor(1, "devcell-sftp")

    def exit(self) -> None:
        super().exit()
        self._worker.shutdown(wait=False)


def _off_loop(name: str) -> Callable[..., Awaitable[Any]]:
    method = getattr(CellSFTPServer, name)

    @functools.wraps(method)
    async def run(self: ServedSFTP, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._worker, functools.partial(method, self, *args))
    return run


for _name in OFF_LOOP:
    setattr(ServedSFTP, _name, _off_loop(_name))


def drop_extensions() -> None:
    """Leave UNADVERTISED out of what the server offers (this process serves one client)."""
    handler = getattr(asyncssh.sftp, "SFTPServerHandler", None)
    offered = getattr(handler, "_extensions", None)
    if isinstance(offered, list):
        handler._extensions = [item for item in offered  # type: ignore[union-attr]
                               if item[0] not in UNADVERTISED]
