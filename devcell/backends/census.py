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

from devcell.backends import treewalk
from devcell.backends.base import Usage
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

    def add(self, name: str, root: Path) -> None:
        """Walk `root` under `name`. A tree that is missing counts nothing; one that changed
        or could not be read while walked keeps what was counted and records why."""
        tree = self._trees.setdefault(name, _Tree())
        if not root.is_dir() or root.is_symlink():
            return
        try:
            for directory in treewalk.walk(root):
                self._one(tree, name, directory.st, is_dir=True)
                for _, st in directory.entries:
                    if not stat.S_ISDIR(st.st_mode):  # a directory: counted when visited
                        self._one(tree, name, st, is_dir=False)
        except (OSError, BackendError) as exc:
            tree.error = str(exc)

    def _one(self, tree: _Tree, name: str, st: os.stat_result, *, is_dir: bool) -> None:
        disk, logical = st.st_blocks * BLOCK, st.st_size
        files = 0 if is_dir else 1
        if is_dir or st.st_nlink <= 1:
            for into in (tree, self._total):
                into.logical += logical
                into.disk += disk
                into.files += files
            tree.single_disk += disk
            return
        key = (st.st_dev, st.st_ino)
        inode = self._shared.get(key)
        if inode is None:
            inode = self._shared[key] = _Inode(st.st_nlink, disk, logical)
            self._total.logical += logical
            self._total.disk += disk
            self._total.files += files
        seen = inode.links.get(name, 0)
        inode.links[name] = seen + 1
        if seen == 0:
            tree.logical += logical
            tree.disk += disk
            tree.files += files

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
        for inode in self._shared.values():
            if sum(count for tree, count in inode.links.items() if tree in chosen) >= inode.nlink:
                total += inode.disk
        return total
