"""Copy, measure, compare and remove directory trees (the workspace's files).

The copy is `cp -a --reflink=auto` (GNU coreutils): it keeps modes, owners, times, symbolic
links and hard links, shares blocks where the filesystem can (btrfs, XFS), and is as fast as
anything Python could do with the same system calls. The tree is measured by a walk that runs
beside the copy (reading the same, frozen source), so counting costs no extra time.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from devcell.errors import BackendError


@dataclass(frozen=True)
class TreeStats:
    files: int
    """Entries that are not directories (regular files, symbolic links, ...)."""
    size_bytes: int
    """Total size of the regular files."""


def measure(root: Path) -> TreeStats:
    """Count the non-directory entries under `root` and sum the sizes of its regular files."""
    files = size = 0
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                files += 1
                if entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
    return TreeStats(files, size)


def copy_tree(src: Path, dst: Path) -> TreeStats:
    """Copy directory `src` to `dst` (which must not exist); return what was copied."""
    if dst.exists() or dst.is_symlink():
        raise BackendError(f"refusing to copy over existing {dst}")
    result: list[TreeStats] = []
    failure: list[BaseException] = []

    def count() -> None:
        try:
            result.append(measure(src))
        except OSError as exc:
            failure.append(exc)

    counter = threading.Thread(target=count, name="treecopy-measure", daemon=True)
    counter.start()
    done = subprocess.run(["cp", "-aT", "--reflink=auto", "--", str(src), str(dst)],
                          capture_output=True, text=True, check=False)
    counter.join()
    if done.returncode != 0:
        raise BackendError(f"copying {src} to {dst} failed: {done.stderr.strip()[:500]}")
    if failure:
        raise BackendError(f"measuring {src} failed: {failure[0]}")
    return result[0]


def signature(root: Path) -> set[tuple[str, str, int, int, int]]:
    """(relative path, type, size, mtime_ns, mode) of every entry: a cheap change detector."""
    out: set[tuple[str, str, int, int, int]] = set()
    base = len(str(root)) + 1
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                rel = entry.path[base:]
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
                    out.add((rel, "d", 0, 0, st.st_mode))
                else:
                    kind = "f" if stat.S_ISREG(st.st_mode) else "o"
                    out.add((rel, kind, st.st_size, st.st_mtime_ns, st.st_mode))
    return out


def is_empty(root: Path) -> bool:
    with os.scandir(root) as entries:
        return next(entries, None) is None


def remove_tree(path: Path, trash: Path) -> None:
    """Remove `path`: first renamed to `trash` (atomic: never seen half-removed), then deleted."""
    if not path.exists() and not path.is_symlink():
        return
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)
