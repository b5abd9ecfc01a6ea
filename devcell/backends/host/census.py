"""Counting the bytes of several trees at once, each inode once, as `du` does.

Checkpoints of one cell share unchanged files by hard links, so adding up each checkpoint's
own size counts a shared file once per checkpoint and overstates the disk by as many times.
A census walks trees (treewalk: no link followed, no recursion, never leaves a filesystem)
and counts each inode once per tree and once over all of them, as `du -s A B C` does, both in
blocks allocated (`du -B1`) and in apparent size (`du --apparent-size`). It also keeps, for
each inode with several links, how many of its links each tree holds, which answers what
removing a tree, or a set of them, would free: an inode whose every link (st_nlink) lies in
the trees removed; a link anywhere else (another checkpoint, a file outside) keeps it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from devcell.backends.capacity import Usage
from devcell.backends.host import treewalk
from devcell.errors import BackendError

BLOCK = 512
"""st_blocks is counted in 512-byte units whatever the filesystem's block size."""


@dataclass
class _Tree:
    logical: int = 0
    disk: int = 0
    files: int = 0
    single_disk: int = 0
    """Blocks of the inodes with one name (directories included): freed with the tree."""
    error: str | None = None


@dataclass
class _Inode:
    nlink: int
    disk: int
    logical: int
    links: dict[str, int] = field(default_factory=dict)
    """Tree -> links of this inode found in it."""


class Census:
    """Trees measured together; ask each one's usage, the total, and what removal frees."""

    def __init__(self) -> None:
        self._trees: dict[str, _Tree] = {}
        self._shared: dict[tuple[int, int], _Inode] = {}
        self._total = _Tree()
        self._sole: dict[str, int] | None = None

    def add(self, name: str, root: Path) -> None:
        """Walk `root` under `name`. A tree that is missing counts nothing; one that changed
        or could not be read while walked keeps what was counted and records why."""
        tree = self._trees.setdefault(name, _Tree())
        if not root.is_dir() or root.is_symlink():
            return
        self._sole = None
        try:
            for directory in treewalk.walk(root):
                self._count(tree, directory.st, 0)  # a directory has no other name
                for _, st in directory.entries:
                    if stat.S_ISDIR(st.st_mode):
                        continue  # counted when visited
                    if st.st_nlink <= 1:
                        self._count(tree, st, 1)
                    else:
                        self._shared_link(tree, name, st)
        except (OSError, BackendError) as exc:
            tree.error = str(exc)

    def _count(self, tree: _Tree, st: os.stat_result, files: int) -> None:
        disk, logical = st.st_blocks * BLOCK, st.st_size
        tree.logical += logical
        tree.disk += disk
        tree.files += files
        tree.single_disk += disk
        total = self._total
        total.logical += logical
        total.disk += disk
        total.files += files

    def _shared_link(self, tree: _Tree, name: str, st: os.stat_result) -> None:
        key = (st.st_dev, st.st_ino)
        inode = self._shared.get(key)
        disk, logical = st.st_blocks * BLOCK, st.st_size
        if inode is None:
            inode = self._shared[key] = _Inode(st.st_nlink, disk, logical)
            self._total.logical += logical
            self._total.disk += disk
            self._total.files += 1
        seen = inode.links.get(name, 0)
        inode.links[name] = seen + 1
        if seen == 0:
            tree.logical += logical
            tree.disk += disk
            tree.files += 1

    def usage(self, name: str) -> Usage:
        """The tree's own usage, each inode once within it (as `du -s TREE`)."""
        tree = self._trees.get(name, _Tree())
        return Usage(tree.logical, tree.disk, tree.files)

    def error(self, name: str) -> str | None:
        tree = self._trees.get(name)
        return tree.error if tree is not None else None

    def total(self) -> Usage:
        """Every tree added, each inode once over all of them (as `du -sc A B C`)."""
        return Usage(self._total.logical, self._total.disk, self._total.files)

    def freed(self, names: Iterable[str]) -> int:
        """Bytes on disk that removing all the trees `names` together would free."""
        chosen = set(names)
        total = sum(self._trees[n].single_disk for n in chosen if n in self._trees)
        if len(chosen) == 1:
            return total + self._sole_disk().get(next(iter(chosen)), 0)
        for inode in self._shared.values():
            if sum(count for tree, count in inode.links.items() if tree in chosen) >= inode.nlink:
                total += inode.disk
        return total

    def _sole_disk(self) -> dict[str, int]:
        """Tree -> blocks of its shared inodes whose every link lies in it (one pass, kept
        until another tree is added)."""
        if self._sole is None:
            self._sole = {}
            for inode in self._shared.values():
                if len(inode.links) == 1:
                    ((tree, count),) = inode.links.items()
                    if count >= inode.nlink:
                        self._sole[tree] = self._sole.get(tree, 0) + inode.disk
        return self._sole
