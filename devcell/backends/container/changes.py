"""What a workspace holds that its last checkpoint does not: the DIRTY figure of a cell.

A file is unchanged when its inode, size, mtime, ctime and mode are those the checkpoint
recorded when it copied the file (the checkpoint's sources record, as git's index detects
changes without reading contents); a file the record does not name (it had several links,
or was written in the checkpoint's own clock tick) is compared with the checkpoint's copy by
type, size, mtime and mode; a fork not yet checkpointed compares with the snapshot below it,
where a file its upper layer does not hold is the snapshot's own. Everything else counts as
changed, by its apparent size. One walk also measures the workspace, each inode once.

The workspace is the cell's to shape: treewalk walks it (no link followed, no recursion, one
descriptor), and a path too long to name is counted as changed, never followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devcell.backends.capacity import Usage
from devcell.backends.host import treewalk
from devcell.backends.host.census import BLOCK
from devcell.errors import BackendError

Unchanged = Callable[[str, os.stat_result], bool]
"""Whether the entry at this relative path (its lstat given) is as the checkpoint holds it."""

NAMEABLE = 3072
"""Bytes of a relative path past which an entry is not compared (counted as changed)."""


@dataclass(frozen=True)
class Changes:
    since: str | None
    """The checkpoint compared with (None: never checkpointed; everything counts)."""
    files: int
    """Entries (not directories) new or changed since."""
    bytes: int
    """Their apparent size: what the next checkpoint copies rather than links."""
    removed: int | None = None
    """Files the checkpoint recorded that the workspace no longer has (None: not known)."""


def same_as(saved: Path | Callable[[str], str]) -> Unchanged:
    """Compare with the entry at the same path under `saved` (a checkpoint's tree, or what
    gives the real path of each of its files: a layer's, without mounting its view), by type,
    size, mtime and mode: what `cp -a` keeps, so an untouched copy compares equal."""
    base = str(saved) if isinstance(saved, Path) else ""
    where = saved if not isinstance(saved, Path) else (lambda rel: f"{base}/{rel}")

    def unchanged(rel: str, st: os.stat_result) -> bool:
        try:
            there = os.lstat(where(rel))
        except OSError:
            return False
        return (stat.S_IFMT(there.st_mode) == stat.S_IFMT(st.st_mode)
                and there.st_size == st.st_size and there.st_mtime_ns == st.st_mtime_ns
                and there.st_mode == st.st_mode)
    return unchanged


def by_record(recorded: dict[str, tuple[int, ...]], fallback: Unchanged) -> Unchanged:
    """A file recorded by the checkpoint is unchanged exactly when its identity is as recorded;
    anything else is judged by `fallback`."""
    def unchanged(rel: str, st: os.stat_result) -> bool:
        seen = recorded.get(rel)
        if seen is not None and stat.S_ISREG(st.st_mode):
            return seen == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
        return fallback(rel, st)
    return unchanged


def either(first: Unchanged, second: Unchanged) -> Unchanged:
    return lambda rel, st: first(rel, st) or second(rel, st)


@dataclass(frozen=True)
class Measured:
    usage: Usage
    changes: Changes
    exclusive_disk: int
    """Blocks removing the tree would free (inodes with no link outside it)."""


def measure(workspace: Path, unchanged: Unchanged | None, *, since: str | None,
            recorded: set[str] | None = None) -> Measured:
    """The workspace's usage and what changed in it (everything, with `unchanged` None).
    `recorded`: the paths the checkpoint holds, to count the files removed since."""
    logical = disk = files = changed = changed_bytes = exclusive = 0
    seen_inodes: dict[tuple[int, int], int] = {}
    present = 0
    try:
        for directory in treewalk.walk(workspace):
            logical += directory.st.st_size
            disk += directory.st.st_blocks * BLOCK
            exclusive += directory.st.st_blocks * BLOCK
            deep = directory.path_bytes > NAMEABLE
            rel_dir = "" if deep else directory.path()
            for name, st in directory.entries:
                if stat.S_ISDIR(st.st_mode):
                    continue
                blocks = st.st_blocks * BLOCK
                if st.st_nlink <= 1:
                    logical += st.st_size
                    disk += blocks
                    exclusive += blocks
                    files += 1
                else:
                    key = (st.st_dev, st.st_ino)
                    links = seen_inodes.get(key, 0) + 1
                    seen_inodes[key] = links
                    if links == 1:
                        logical += st.st_size
                        disk += blocks
                        files += 1
                    if links == st.st_nlink:  # its last link: no name outside the tree
                        exclusive += blocks
                rel = "" if deep else (f"{rel_dir}/{name}" if rel_dir else name)
                if recorded is not None and rel in recorded:
                    present += 1
                if deep or unchanged is None or not unchanged(rel, st):
                    changed += 1
                    changed_bytes += st.st_size if stat.S_ISREG(st.st_mode) else 0
    except (OSError, BackendError) as exc:
        raise BackendError(f"measuring {workspace}: {exc}") from None
    removed = None if recorded is None else len(recorded) - present
    return Measured(Usage(logical, disk, files), Changes(since, changed, changed_bytes, removed),
                    exclusive)
