"""Copying one regular file in process, keeping what `cp -a` keeps: the bytes (holes kept as
holes), owner, mode (set-id bits included), extended attributes (ACLs, capabilities) and
times.

A checkpoint after a small change copies a few dozen files: starting a `cp` per batch costs
more there than the copying (4 processes for 100 files of 100 KiB: ~36 ms of a ~180 ms
checkpoint, the same files in process ~10 ms). treecopy uses this for small copies and `cp`
for big ones, and for anything that is not a plain file with one name (links, devices,
FIFOs, files with several names), which `cp` copies as what they are.

The source is a cell's: it is opened without following a link and without blocking (a FIFO
put in a file's place), and used only if what was opened is the regular file with one name
that was looked at; otherwise the caller copies it with `cp`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

CHUNK = 8 * 2**20
_SEEK_DATA, _SEEK_HOLE = getattr(os, "SEEK_DATA", 3), getattr(os, "SEEK_HOLE", 4)


def copy_regular(src: str, dst: str) -> bool:
    """Copy the regular file `src` to the new path `dst`; False, having made nothing, when
    `src` is not a regular file with one name (copy it another way)."""
    seen = os.lstat(src)
    if not stat.S_ISREG(seen.st_mode) or seen.st_nlink != 1:
        return False  # never opened: opening a device node can act on the device
    try:
        fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            return False  # replaced meanwhile by a link or a socket
        raise
    try:
        st = os.fstat(fd_in)
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1
                or (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino)):
            return False
        copy_opened(fd_in, st, dst)
    finally:
        os.close(fd_in)
    return True


def copy_opened(fd_in: int, st: os.stat_result, dst: str) -> None:
    """The regular file open at `fd_in` (`st` its fstat) copied to the new path `dst`, with
    its mode, owner, extended attributes and times, holes kept."""
    fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    try:
        _copy_data(fd_in, fd_out, st.st_size)
        _copy_metadata(fd_in, fd_out, st)
    finally:
        os.close(fd_out)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _copy_data(fd_in: int, fd_out: int, size: int) -> None:
    """The data extents only (SEEK_DATA/SEEK_HOLE), so a sparse file stays sparse; then the
    length, which a trailing hole does not write."""
    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd_in, offset, _SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                break
            raise
        end = os.lseek(fd_in, start, _SEEK_HOLE)
        _copy_range(fd_in, fd_out, start, min(end, size) - start)
        offset = end
    os.ftruncate(fd_out, size)


def _copy_range(fd_in: int, fd_out: int, start: int, length: int) -> None:
    done = 0
    while done < length:
        want = min(CHUNK, length - done)
        try:
            copied = os.copy_file_range(fd_in, fd_out, want, start + done, start + done)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            copied = _copy_by_reading(fd_in, fd_out, start + done, want)
        if copied == 0:  # the file shrank under us: a cell is frozen while copied
            break
        done += copied


def _copy_by_reading(fd_in: int, fd_out: int, offset: int, length: int) -> int:
    data = os.pread(fd_in, length, offset)
    written = 0
    while written < len(data):
        written += os.pwrite(fd_out, data[written:], offset + written)
    return len(data)


def _copy_metadata(fd_in: int, fd_out: int, st: os.stat_result) -> None:
    """Owner first (changing it clears set-id bits and file capabilities), then the mode,
    then the extended attributes (an ACL sets the group bits the mode has anyway)."""
    if os.geteuid() == 0 or st.st_uid == os.geteuid():
        with contextlib.suppress(PermissionError):  # not root: the caller's, as with cp -a
            os.fchown(fd_out, st.st_uid, st.st_gid)
    os.fchmod(fd_out, stat.S_IMODE(st.st_mode))
    for name in os.listxattr(fd_in):
        try:
            os.setxattr(fd_out, name, os.getxattr(fd_in, name))
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP):
                raise  # one this process may not set (trusted.*, not root): as cp, skipped
