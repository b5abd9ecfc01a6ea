"""What `mkfs.ext4 -d` does not carry, put right on the disk it made: a workspace disk says
exactly what its tree said, so an archive exported from it again is the archive imported.

mkfs.ext4 1.47 keeps whole seconds of each time (the nanoseconds are lost), stamps the root
directory with the time of the run, and adds `lost+found`, which no workspace asked for. On
DevCell's own disk (never a guest's), one debugfs batch sets every inode's access and
modification times to the nanosecond and the root's mode from the tree, and removes the
`lost+found` the tree did not hold. The disk is walked a level at a time, as vm/extract does,
and the tree (DevCell's own temporary) beside it, without following a link.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from devcell.backends.host import removal, treewalk
from devcell.backends.vm import debugfs
from devcell.backends.vm.debugfs import ROOT_INODE, S_IFDIR, S_IFMT

WRITE_BATCH = 1 << 16
"""Requests per writing run: their answers are empty, so a batch may be long."""
LOST_FOUND = b"lost+found"


def drop_lost_found(image: Path) -> None:
    """An empty workspace disk without the `lost+found` mkfs.ext4 made."""
    with tempfile.TemporaryDirectory(prefix=".exact-", dir=image.parent) as stage:
        debugfs.run(image, ["rmdir lost+found"], cwd=Path(stage), write=True)


Times = dict[int, tuple[int, int]]
"""Host inode -> (atime, mtime) in nanoseconds."""


def times_of(tree: Path) -> Times:
    """Every entry's times, taken before mkfs.ext4 reads the tree (its reads move the
    access times: relatime updates a file whose access time is older than its change)."""
    times: Times = {}
    for directory in treewalk.walk(tree):
        if directory.parent is None:
            times[directory.st.st_ino] = (directory.st.st_atime_ns, directory.st.st_mtime_ns)
        for _, st in directory.entries:
            times.setdefault(st.st_ino, (st.st_atime_ns, st.st_mtime_ns))
    return times


def match_tree(image: Path, tree: Path, times: Times) -> None:
    """Make `image` (just made by mkfs.ext4 -d from `tree`) hold the tree's times (`times`,
    taken before mkfs) to the nanosecond, its root's mode and times, and no `lost+found`
    the tree lacked."""
    stage = Path(tempfile.mkdtemp(prefix=".exact-", dir=image.parent))
    root = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        requests: list[str] = []
        top = os.fstat(root)
        if not _has(root, LOST_FOUND):
            requests.append("rmdir lost+found")
        _times(requests, ROOT_INODE, top, times)
        requests.append(f"sif <{ROOT_INODE}> mode 0{stat.S_IFDIR | stat.S_IMODE(top.st_mode):o}")
        requests.append(f"sif <{ROOT_INODE}> uid {top.st_uid}")
        requests.append(f"sif <{ROOT_INODE}> gid {top.st_gid}")
        seen: set[int] = set()
        level = [(ROOT_INODE, b"")]
        while level:
            level = _level(image, stage, root, level, requests, seen, times)
        for start in range(0, len(requests), WRITE_BATCH):
            debugfs.run(image, requests[start:start + WRITE_BATCH], cwd=stage, write=True)
    finally:
        os.close(root)
        removal.remove_quietly(stage)


def _level(image: Path, stage: Path, root: int, level: list[tuple[int, bytes]],
           requests: list[str], seen: set[int], times: Times) -> list[tuple[int, bytes]]:
    """The times of every entry of one level's directories; the next level's directories."""
    below: list[tuple[int, bytes]] = []
    for start in range(0, len(level), debugfs.BATCH):
        part = level[start:start + debugfs.BATCH]
        answers = debugfs.run(image, [f"ls -p <{ino}>" for ino, _ in part], cwd=stage)
        for (ino, path), answer in zip(part, answers, strict=True):
            fd = treewalk.open_beneath(root, path)
            try:
                for entry in debugfs.entries(answer, ino):
                    if entry.inode in seen:
                        continue
                    try:
                        st = os.stat(entry.name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # lost+found, removed by the batch
                    seen.add(entry.inode)
                    _times(requests, entry.inode, st, times)
                    if entry.mode & S_IFMT == S_IFDIR and stat.S_ISDIR(st.st_mode):
                        below.append((entry.inode, path + entry.name + b"/"))
            finally:
                os.close(fd)
    return below


def _times(requests: list[str], inode: int, st: os.stat_result, times: Times) -> None:
    atime, mtime = times.get(st.st_ino, (st.st_atime_ns, st.st_mtime_ns))
    for name, ns in (("atime", atime), ("mtime", mtime)):
        seconds, extra = debugfs.time_fields(ns)
        requests.append(f"sif <{inode}> {name} {seconds}")
        requests.append(f"sif <{inode}> {name}_extra {extra}")


def _has(fd: int, name: bytes) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
