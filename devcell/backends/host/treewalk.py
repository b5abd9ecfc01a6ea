"""Walking a tree a cell shaped, from the host: no recursion, no link followed, few descriptors.

A cell can make its workspace as deep as it likes (`mkdir d; cd d` three thousand times takes
a second), plant links where directories were, and name files with newlines. Python's own
walkers recurse (RecursionError past ~1000 levels), `os.fwalk` holds one descriptor per level,
and full paths stop working past PATH_MAX. This walker keeps an explicit stack, holds one
directory descriptor at a time (it climbs back with `..` and checks it arrived where it left,
so a tree changed under it is an error, never a wrong turn), opens every directory with
O_NOFOLLOW relative to its parent, and never leaves the root's filesystem.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from devcell.errors import BackendError

_IFMT, _IFDIR = 0o170000, stat.S_IFDIR
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class TreeChanged(BackendError):
    """The tree changed while it was walked (a directory moved away under the walker)."""


class Directory:
    """One directory of the walk: where it is and what it holds (lstat of each entry).

    Its path is kept as a link to its parent, not as a string, so a deep tree costs memory in
    proportion to its depth, not to the square of it; `path()` builds the string when the
    caller has checked `path_bytes` is reasonable. A plain class (compared by identity):
    the walk makes one per directory, and a dataclass would cost its import.
    """

    __slots__ = ("parent", "name", "st", "path_bytes", "entries", "pending", "key", "depth",
                 "fd")

    def __init__(self, parent: Directory | None, name: str, st: os.stat_result,
                 path_bytes: int, *, depth: int = 0) -> None:
        self.parent = parent
        self.name = name
        self.st = st
        self.path_bytes = path_bytes
        """Length of the path below the root in bytes (0 for the root)."""
        self.entries: list[tuple[str, os.stat_result]] = []
        self.pending: list[str] = []
        self.key = b""
        """Free for the caller (e.g. a digest of the path)."""
        self.depth = depth
        """Levels below the root (0 for the root)."""
        self.fd = -1
        """The directory's open descriptor while the walk yields it (-1 after): the caller
        opens its entries relative to it (dir_fd, O_NOFOLLOW) instead of by a path a link
        could bend. The walk owns it: never closed by the caller."""

    def path(self) -> str:
        names: list[str] = []
        node: Directory | None = self
        while node is not None and node.parent is not None:
            names.append(node.name)
            node = node.parent
        return "/".join(reversed(names))


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _list(fd: int, device: int) -> tuple[list[tuple[str, os.stat_result]], list[str]]:
    entries: list[tuple[str, os.stat_result]] = []
    subdirs: list[str] = []
    add = entries.append
    with os.scandir(fd) as found:
        for entry in found:  # one lstat each (fstatat): the kind comes from it, not d_type
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # removed while we listed
                continue
            add((entry.name, st))
            if st.st_mode & _IFMT == _IFDIR and st.st_dev == device:
                subdirs.append(entry.name)
    subdirs.reverse()  # popped from the end: visited in listing order
    return entries, subdirs


Lister = Callable[[int, int, "Directory"], list[str]]
"""Lists the directory open at a descriptor itself (given the root's device and the
Directory): returns the names of the subdirectories to enter, in the order to enter them
reversed, as `_list` orders them. The Directory's `entries` are then left empty."""


def walk(root: Path, lister: Lister | None = None) -> Iterator[Directory]:
    """Every directory under `root` (itself first), parents before children, depth first.

    Entries are lstat results: a symbolic link is reported as a link, never followed, and a
    directory on another filesystem is reported but not entered. TreeChanged if a directory
    moved while it was walked; BackendError if the root cannot be opened as a directory.
    `lister`: the caller's own listing of each directory (treecopy.scan: one pass over the
    entries, not two), which must enter only directories on the root's device.
    """
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise BackendError(f"cannot walk {root}: {exc.strerror}") from None
    try:
        top = os.fstat(fd)
        stack: list[Directory] = []
        current: Directory | None = Directory(None, "", top, 0)
        while current is not None:
            if lister is None:
                current.entries, current.pending = _list(fd, top.st_dev)
            else:
                current.pending = lister(fd, top.st_dev, current)
            current.fd = fd
            yield current
            current.fd = -1
            current.entries = []
            stack.append(current)
            current = None
            while stack and current is None:  # fd is the directory of stack[-1]
                frame = stack[-1]
                if frame.pending:
                    name = frame.pending.pop()
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except FileNotFoundError:
                        continue
                    except OSError as exc:  # replaced by a link or a file since listed
                        raise TreeChanged(f"{name!r} in {root} changed while DevCell walked "
                                          f"it ({exc.strerror})") from None
                    os.close(fd)
                    fd = child
                    current = Directory(frame, name, os.fstat(fd),
                                        frame.path_bytes + len(os.fsencode(name)) + 1,
                                        depth=frame.depth + 1)
                    continue
                stack.pop()
                if stack:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = parent
                    if not _same(os.fstat(fd), stack[-1].st):
                        raise TreeChanged(f"a directory under {root} moved while DevCell "
                                          "walked it")
    finally:
        os.close(fd)


def open_beneath(root: int, path: bytes) -> int:
    """A descriptor of the directory `path` (`/`-separated, from the directory `root`),
    opened a name at a time with O_NOFOLLOW: no link on the way is ever followed."""
    fd = os.dup(root)
    for name in path.split(b"/"):
        if not name:
            continue
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            os.close(fd)
        fd = sub
    return fd
