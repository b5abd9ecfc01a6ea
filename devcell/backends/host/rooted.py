"""Paths opened inside a cell's own root, as the cell's processes would resolve them.

A cell is hostile: any link in its filesystem may point anywhere. The kernel's openat2(2)
with RESOLVE_IN_ROOT resolves every component (`..`, absolute and relative links) as if the
given directory were `/`, so a link planted in the cell can at worst name another of the
cell's own files, never one of the host's. The root is a directory descriptor: for a running
container, `/proc/PID/root` of its init (its mount namespace, so the workspace volume mounted
at /workspace is crossed into as the cell sees it). Magic links (/proc/self/fd/N) are refused.

Every operation here takes the root descriptor and a cell path and works on the final
component through the descriptor of its parent with links not followed, so what is changed is
the entry the cell sees, never what a link names.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from stat import S_ISLNK, S_ISREG

_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic table)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10
MAX_PATH = 4096
MAX_RESOLVE_STEPS = 1024
"""Components `resolve` looks at, links' included: each is a walk from the root."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.syscall.restype = ctypes.c_long
    return _LIBC


def open_at(root: int, path: str | bytes, flags: int, mode: int = 0) -> int:
    """A descriptor of `path` (a cell path, absolute or relative to its `/`) resolved inside
    `root`; OSError as the kernel gives it (ELOOP for a magic link, ENOSYS before Linux 5.6)."""
    raw = os.fsencode(path)
    if b"\0" in raw or len(raw) > MAX_PATH:
        raise OSError(errno.EINVAL, "invalid path")
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & (os.O_CREAT | os.O_TMPFILE) else 0,
                   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
    fd = _libc().syscall(_SYS_OPENAT2, root, raw or b".", ctypes.byref(how),
                         ctypes.sizeof(how))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(raw))
    return int(fd)


def normal(path: str | bytes) -> str:
    """`path` as an absolute, normalised cell path (`..` can never climb above `/`)."""
    text = os.fsdecode(path)
    return posixpath.normpath(posixpath.join("/", text)).replace("//", "/", 1)


def split(path: str | bytes) -> tuple[str, str]:
    """(parent, name) of a cell path; the root itself has no name and is refused."""
    clean = normal(path)
    parent, name = posixpath.split(clean)
    if not name:
        raise OSError(errno.EPERM, "the cell's root itself cannot be changed", clean)
    return parent, name


@contextmanager
def parent_of(root: int, path: str | bytes) -> Iterator[tuple[int, str]]:
    """(descriptor of the parent directory, final name) of `path`, the parent resolved
    inside `root`; the caller acts on the name with dir_fd= and links not followed."""
    parent, name = split(path)
    fd = open_at(root, parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield fd, name
    finally:
        os.close(fd)


def lstat(root: int, path: str | bytes) -> os.stat_result:
    clean = normal(path)
    if clean == "/":
        return os.stat(root)
    with parent_of(root, clean) as (parent, name):
        return os.stat(name, dir_fd=parent, follow_symlinks=False)


def stat(root: int, path: str | bytes) -> os.stat_result:
    fd = open_at(root, path, os.O_PATH)
    try:
        return os.stat(fd)
    finally:
        os.close(fd)


def readlink(root: int, path: str | bytes) -> str:
    with parent_of(root, path) as (parent, name):
        return os.readlink(name, dir_fd=parent)


def resolve(root: int, path: str | bytes) -> str:
    """The cell path `path` names once its links are followed, each inside the root (a final
    component that does not exist yet is kept, as sftp's realpath expects)."""
    pending = [part for part in normal(path).split("/") if part]
    done: list[str] = []
    links = steps = 0
    while pending:
        steps += 1
        if steps > MAX_RESOLVE_STEPS:
            raise OSError(errno.ELOOP, "too many path components to resolve", normal(path))
        part = pending.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        candidate = "/" + "/".join([*done, part])
        try:
            found = lstat(root, candidate)
        except FileNotFoundError:
            if pending:
                raise
            done.append(part)
            break
        if not S_ISLNK(found.st_mode):
            done.append(part)
            continue
        links += 1
        if links > 40:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), normal(path))
        target = readlink(root, candidate)
        if target.startswith("/"):
            done = []
        pending = [piece for piece in target.split("/") if piece and piece != "."] + pending
    return "/" + "/".join(done)


PSEUDO_FILESYSTEMS = frozenset({
    0x9FA0,        # proc
    0x62656572,    # sysfs
    0x64626720,    # debugfs
    0x74726163,    # tracefs
    0x73636673,    # securityfs
    0x27E0EB,      # cgroup
    0x63677270,    # cgroup2
    0xCAFE4A11,    # bpf
    0xF97CFF8C,    # selinuxfs
    0xDE5E81E4,    # efivarfs
    0x6165676C,    # pstore
    0x62656570,    # configfs
    0x65735543,    # fusectl
    0x42494E4D,    # binfmt_misc
})
"""Kernel interfaces that look like regular files (/proc/kmsg, /proc/kallsyms, sysfs
attributes): the cell sees them through its own mounts, but the host's process reading them
would read, or act, with the host's privileges."""


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]


def filesystem_type(fd: int) -> int:
    found = _StatFs()
    if _libc().fstatfs(fd, ctypes.byref(found)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(found.f_type) & 0xFFFFFFFF


def open_regular(root: int, path: str | bytes, flags: int, mode: int = 0o644
                 ) -> tuple[int, bool]:
    """(descriptor, created) of the regular file `path`, opened with `flags` (O_CREAT,
    O_EXCL and O_TRUNC honoured) only once it is known to be a regular file on a real file
    system: located first with O_PATH (no driver's open runs, no FIFO blocks), checked, then
    reopened through its own descriptor, so nothing can be swapped in between. Always
    non-blocking (a lease the cell holds fails the open instead of holding the caller)."""
    access = flags & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR | os.O_APPEND)
    if flags & os.O_CREAT:
        try:
            fd = open_at(root, path, access | os.O_CREAT | os.O_EXCL | os.O_NONBLOCK
                         | os.O_NOCTTY, mode)
            return fd, True
        except FileExistsError:
            if flags & os.O_EXCL:
                raise
    located = open_at(root, path, os.O_PATH)
    try:
        info = os.fstat(located)
        if not S_ISREG(info.st_mode):
            raise OSError(errno.EPERM, "not a regular file", os.fsdecode(path))
        if filesystem_type(located) in PSEUDO_FILESYSTEMS:
            raise OSError(errno.EPERM, "a kernel interface, not a file", os.fsdecode(path))
        fd = os.open(f"/proc/self/fd/{located}", access | os.O_NONBLOCK | os.O_NOCTTY
                     | os.O_CLOEXEC)
    finally:
        os.close(located)
    try:
        if flags & os.O_TRUNC:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd, False


def read_regular(root: int, path: str, limit: int) -> bytes | None:
    """At most `limit` bytes of `path` in the root if it is a regular file, else None (a
    FIFO or device is never read: opened without blocking and checked first)."""
    try:
        fd, _ = open_regular(root, path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    finally:
        os.close(fd)
