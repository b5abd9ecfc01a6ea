"""Copy, measure, compare and remove directory trees (the workspace's files).

The copy keeps what `cp -a` keeps (modes, owners, times, extended attributes and ACLs,
symbolic links, hard links, special files) and uses GNU cp to do it, with `--reflink=auto` so
filesystems that can share blocks (btrfs, XFS) do. It is parallel: on ext4 and similar, most of
the time of copying many small files goes into creating them, one directory lock at a time, so
the files are copied in per-directory batches by several `cp` processes at once (different
directories do not contend), after the directories are made; the directories get their
attributes last, deepest first, so copying into them does not disturb their times. Files with
several hard links are copied by one `cp` call, which keeps them linked.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from devcell import progress
from devcell.backends import children
from devcell.errors import BackendError

BATCH = 256
"""Files per `cp` call: one directory's files, split into batches of at most this many."""
SERIAL_BELOW = 64
"""Trees with fewer files are copied by one `cp -a` (starting processes would cost more)."""
CP = ("cp", "-a", "--reflink=auto", "--no-target-directory")


@dataclass(frozen=True)
class TreeStats:
    files: int
    """Entries that are not directories (regular files, symbolic links, ...)."""
    size_bytes: int
    """Total size of the regular files."""


@dataclass
class _Scan:
    dirs: list[tuple[str, os.stat_result]] = field(default_factory=list)
    """Every directory below the root (relative path, its stat), parents before children."""
    batches: list[list[str]] = field(default_factory=list)
    batch_bytes: list[int] = field(default_factory=list)
    """Bytes of regular files in each batch (for progress)."""
    linked: list[str] = field(default_factory=list)
    """Files with more than one hard link: copied together so their links survive."""
    linked_bytes: int = 0
    files: int = 0
    size: int = 0


def _scan(root: Path) -> _Scan:
    scan = _Scan()
    queue = [""]
    while queue:
        rel = queue.pop(0)
        batch: list[str] = []
        batch_size = 0
        with os.scandir(root / rel if rel else root) as entries:
            for entry in entries:
                path = f"{rel}/{entry.name}" if rel else entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    scan.dirs.append((path, st))
                    queue.append(path)
                    continue
                scan.files += 1
                size = st.st_size if stat.S_ISREG(st.st_mode) else 0
                scan.size += size
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    scan.linked.append(path)
                    scan.linked_bytes += size
                    continue
                batch.append(path)
                batch_size += size
                if len(batch) >= BATCH:
                    scan.batches.append(batch)
                    scan.batch_bytes.append(batch_size)
                    batch, batch_size = [], 0
        if batch:
            scan.batches.append(batch)
            scan.batch_bytes.append(batch_size)
    return scan


def measure(root: Path) -> TreeStats:
    """Count the non-directory entries under `root` and sum the sizes of its regular files."""
    scan = _scan(root)
    return TreeStats(scan.files, scan.size)


def _cp(argv: list[str], cwd: Path) -> None:
    done = children.run(argv, cwd=cwd)
    if done.returncode != 0:
        raise BackendError(f"copying from {cwd} failed: {done.stderr.strip()[:500]}")


def _copy_dir_attributes(src: Path, dst: Path, st: os.stat_result) -> None:
    for name in os.listxattr(src, follow_symlinks=False):
        os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False),
                    follow_symlinks=False)
    if os.geteuid() == 0 or st.st_uid == os.geteuid():
        os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def workers() -> int:
    return max(2, min(8, 2 * (os.cpu_count() or 1)))


def copy_tree(src: Path, dst: Path, *, description: str = "copying") -> TreeStats:
    """Copy directory `src` to `dst` (which must not exist) as `cp -a` would; what was copied.

    Progress (bytes) is reported through devcell.progress as each batch finishes.
    """
    if dst.exists() or dst.is_symlink():
        raise BackendError(f"refusing to copy over existing {dst}")
    src, dst = src.absolute(), dst.absolute()  # cp runs inside src
    try:
        scan = _scan(src)
        with progress.track(description, scan.size) as advance:
            _copy(src, dst, scan, advance)
    except OSError as exc:
        raise BackendError(f"copying {src} to {dst} failed: {exc}") from None
    return TreeStats(scan.files, scan.size)


WATCH_ABOVE = 16 * 2**20
"""A few big files are copied by one `cp`: above this size, progress comes from watching the
destination grow (cheap with few files) instead of arriving all at the end."""


def _bytes_under(root: Path) -> int:
    total = 0
    for parent, _, names in os.walk(root):
        for name in names:
            try:
                st = os.lstat(os.path.join(parent, name))
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def _serial_copy(src: Path, dst: Path, scan: _Scan, advance: progress.Advance) -> None:
    if not (progress.active() and scan.size >= WATCH_ABOVE):
        _cp([*CP, "--", str(src), str(dst)], src)
        advance(scan.size)
        return
    done = threading.Event()
    reported = 0

    def watch() -> None:
        nonlocal reported
        while not done.wait(0.2):
            now = min(_bytes_under(dst), scan.size)
            if now > reported:
                advance(now - reported)
                reported = now

    watcher = threading.Thread(target=watch, name="treecopy-progress", daemon=True)
    watcher.start()
    try:
        _cp([*CP, "--", str(src), str(dst)], src)
    finally:
        done.set()
        watcher.join()
    advance(scan.size - reported)


def _copy(src: Path, dst: Path, scan: _Scan, advance: progress.Advance) -> None:
    if scan.files < SERIAL_BELOW:
        _serial_copy(src, dst, scan, advance)
        return
    dst.mkdir(mode=0o700)
    for rel, _ in scan.dirs:
        (dst / rel).mkdir(mode=0o700)
    into = [*CP[:-1], "--parents", "-t", str(dst), "--"]
    jobs = [([*into, *batch], size) for batch, size in zip(scan.batches, scan.batch_bytes,
                                                          strict=True)]
    if scan.linked:
        jobs.append(([*into, *scan.linked], scan.linked_bytes))
    with ThreadPoolExecutor(workers(), thread_name_prefix="treecopy") as pool:
        futures = {pool.submit(_cp, argv, src): size for argv, size in jobs}
        for future in as_completed(futures):
            future.result()
            advance(futures[future])
    for rel, st in reversed(scan.dirs):
        _copy_dir_attributes(src / rel, dst / rel, st)
    _copy_dir_attributes(src, dst, src.stat())


def signature(root: Path) -> set[tuple[str, str, int, int, int]]:
    """(relative path, type, size, mtime_ns, mode) of every entry: a cheap change detector.

    The tree is a cell's to shape: it is walked by directory descriptors (os.fwalk), so a
    link is never followed (not even one swapped in for a directory mid-walk) and a path
    deeper than PATH_MAX is no error.
    """
    out: set[tuple[str, str, int, int, int]] = set()
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + os.sep
        for name in dirnames + filenames:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:  # removed while we walked
                continue
            if stat.S_ISDIR(st.st_mode):
                out.add((prefix + name, "d", 0, 0, st.st_mode))
            else:
                kind = "f" if stat.S_ISREG(st.st_mode) else "o"
                out.add((prefix + name, kind, st.st_size, st.st_mtime_ns, st.st_mode))
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


def sync_filesystem(path: Path) -> None:
    """Flush the filesystem holding `path` to disk (syncfs(2); sync(2) where unavailable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            os.sync()
    except (OSError, AttributeError):
        os.sync()
    finally:
        os.close(fd)
