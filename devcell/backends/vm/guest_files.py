"""DevCell's guest files placed into an unpacked image, which is hostile input.

An image can hold anything at the paths DevCell writes: a link to a host file where the init
goes, a link to a host directory where the guest directory goes, a plain file where a mount
point goes. Path calls would follow those links and write host files as root. So whatever the
image holds at DevCell's guest directory is removed (never entered), the directory is made
afresh, and every file in it is created with O_EXCL relative to a descriptor of a directory
DevCell just made; a mount point that is not a real directory (a link, dangling or not, a file,
a FIFO) is replaced by one. Nothing the image planted is followed or written through.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from devcell.backends.host import children
from devcell.errors import BackendError

MOUNT_POINTS = ("dev", "proc", "sys", "run", "tmp", "devcell")
"""Where the guest's init mounts its filesystems and DevCell's config disk."""
APPLETS = ("sh", "mount", "sleep", "cat", "date", "mkdir", "sync", "hostname", "ip", "ifconfig")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def add(root: Path, guest_dir: str, *, busybox: Path, agent_files: Iterable[Path],
        init: str, clock: bytes, streams: bytes | None = None,
        sftp_files: Iterable[Path] = ()) -> None:
    """`guest_dir` (one name) under `root` holding busybox and its applets, the agent and its
    libraries (`ga/`), the init, the clock program, the stream helper (`streams`) and
    OpenSSH's sftp-server with its libraries (`sftp/`); the mount points made real directories.
    `root` is DevCell's own directory; only what is inside it came from the image."""
    if "/" in guest_dir or guest_dir in ("", ".", ".."):
        raise ValueError(f"not one name: {guest_dir!r}")
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        _clear(root_fd, root, guest_dir)
        _mkdir(root_fd, guest_dir)
        guest = os.open(guest_dir, _DIR_FLAGS, dir_fd=root_fd)
        try:
            _fill(guest, busybox=busybox, agent_files=agent_files, init=init, clock=clock)
            if streams is not None:
                _write_new(guest, "streams", streams, 0o700)
            _copy_dir(guest, "sftp", sftp_files)
        finally:
            os.close(guest)
        for name in MOUNT_POINTS:
            _real_directory(root_fd, root, name)
    finally:
        os.close(root_fd)


def _fill(guest: int, *, busybox: Path, agent_files: Iterable[Path], init: str,
          clock: bytes) -> None:
    _copy_in(busybox, guest, "busybox", 0o755)
    _mkdir(guest, "bin")
    bin_fd = os.open("bin", _DIR_FLAGS, dir_fd=guest)
    try:
        for applet in APPLETS:
            os.symlink("../busybox", applet, dir_fd=bin_fd)
    finally:
        os.close(bin_fd)
    _copy_dir(guest, "ga", agent_files)
    _write_new(guest, "init", init.encode(), 0o755)
    _write_new(guest, "clock", clock, 0o700)


def _copy_dir(guest: int, name: str, files: Iterable[Path]) -> None:
    """A new directory `name` holding copies of `files` (host programs and their libraries)."""
    files = list(files)
    if not files:
        return
    _mkdir(guest, name)
    fd = os.open(name, _DIR_FLAGS, dir_fd=guest)
    try:
        for path in files:
            _copy_in(path, fd, path.name, 0o755)
    finally:
        os.close(fd)


def _mkdir(directory: int, name: str) -> None:
    """A new directory, 0755 whatever the umask (the guest's users read it)."""
    os.mkdir(name, 0o755, dir_fd=directory)
    os.chmod(name, 0o755, dir_fd=directory)  # just made here, by this process: no link


def _copy_in(source: Path, directory: int, name: str, mode: int) -> None:
    """A host file (DevCell's own: busybox, the agent) copied to a new file `name`."""
    with open(source, "rb") as src:
        fd = os.open(name, _NEW_FILE, mode, dir_fd=directory)
        with os.fdopen(fd, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    os.chmod(name, mode, dir_fd=directory)  # the umask narrowed the creation mode


def _write_new(directory: int, name: str, data: bytes, mode: int) -> None:
    fd = os.open(name, _NEW_FILE, mode, dir_fd=directory)
    with os.fdopen(fd, "wb") as dst:
        dst.write(data)
    os.chmod(name, mode, dir_fd=directory)


def _lstat(directory: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _clear(directory: int, path: Path, name: str) -> None:
    """Whatever `name` is in `directory` removed: a link or file unlinked (its target never
    touched), a directory removed with all it holds by `rm`, which walks by descriptors, follows
    no link and is not bounded by Python's recursion."""
    st = _lstat(directory, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=directory)
        return
    done = children.run(["rm", "-rf", "--one-file-system", "--", str(path / name)])
    if done.returncode != 0 or _lstat(directory, name) is not None:
        raise BackendError(f"the image's {name} could not be replaced by DevCell's guest "
                           f"files: {done.stderr.strip()[-300:]}")


def _real_directory(directory: int, path: Path, name: str) -> None:
    st = _lstat(directory, name)
    if st is not None and stat.S_ISDIR(st.st_mode):
        return  # the image's own directory: the guest mounts over it
    if st is not None:
        _clear(directory, path, name)
    try:
        _mkdir(directory, name)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            raise
        raise BackendError(f"the image's /{name} changed while DevCell replaced it") from None
