"""A checkpoint disk's files, read out of an ext4 image a guest wrote: hostile input.

A guest controls every byte of its disk, so it can craft its ext4: symbolic links anywhere,
device nodes, a file whose size claims terabytes, a directory that contains itself, names
with `/` or a newline, metadata that makes a reader loop. The image is never mounted (that
would hand the kernel a crafted filesystem) and `debugfs rdump` is not used (it follows a
symbolic link it made itself when a later entry has the same name, writes holes in full and
recurses without bound). Instead DevCell walks the tree itself, one debugfs request at a time
(`ls -p <inode>`, `cat <inode>`, `stat <inode>`, in catastrophic mode: read-only, no
bitmaps), each under a deadline and an output bound, and makes every host file itself:
relative to a directory descriptor it opened, with O_EXCL and O_NOFOLLOW, so nothing is ever
followed or overwritten. Names must be one line without `/`; `.` and `..` are skipped; a
directory met twice (a loop) is skipped; regular files together may not exceed the disk's
size (a sparse or lying file fails the read, named); FIFOs, sockets and device nodes are left
out (counted); set-id bits are dropped. Hard links stay links.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devcell.errors import BackendError, BackendRefused

REQUEST_SECONDS = 60.0
LISTING_BYTES = 64 << 20
MAX_ENTRIES = 1_000_000
MAX_DEPTH = 256
ROOT_INODE = 2
_ENTRY = re.compile(rb"/(\d+)/(\d{6})/(\d+)/(\d+)/(.*)/(\d*)/")
_FAST_LINK = re.compile(rb'^\s*Fast link dest: "(.*)"\s*$', re.MULTILINE)
_S_IFMT, _S_IFDIR, _S_IFREG, _S_IFLNK = 0o170000, 0o040000, 0o100000, 0o120000


@dataclass(frozen=True)
class Entry:
    inode: int
    mode: int
    uid: int
    gid: int
    name: bytes
    size: int


@dataclass
class Walk:
    image: Path
    budget: int
    root: int = -1
    written: int = 0
    entries: int = 0
    skipped: int = 0
    dirs_seen: set[int] = field(default_factory=set)
    files_seen: dict[int, bytes] = field(default_factory=dict)
    """Inode -> path (from the root) of its first link, for its later names."""


def debugfs(image: Path, request: str, *, limit: int,
            sink: Callable[[bytes], None] | None = None) -> bytes:
    """One debugfs request's standard output (given to `sink` piece by piece when set), at
    most `limit` bytes, within the deadline."""
    argv = ["debugfs", "-c", "-R", request, str(image)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          stdin=subprocess.DEVNULL, process_group=0) as proc:
        assert proc.stdout is not None
        deadline = time.monotonic() + REQUEST_SECONDS
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                    raise BackendRefused(f"reading the checkpoint disk took over "
                                         f"{REQUEST_SECONDS:.0f} s ({request}): its metadata "
                                         "may be corrupted")
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise BackendRefused(f"the checkpoint disk answered more than {limit} bytes "
                                         f"to {request}: it says more than it holds")
                if sink is None:
                    chunks.append(chunk)
                else:
                    sink(chunk)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return b"".join(chunks)


def listing(walk: Walk, inode: int) -> list[Entry]:
    out: list[Entry] = []
    for line in debugfs(walk.image, f"ls -p <{inode}>", limit=LISTING_BYTES).split(b"\n"):
        if not line.strip():
            continue
        found = _ENTRY.fullmatch(line)
        if found is None:
            raise BackendRefused(f"the checkpoint disk has a name DevCell cannot read safely "
                                 f"in directory inode {inode} (a newline or `/` in it)")
        ino, mode, uid, gid, name, size = found.groups()
        if b"/" in name or b"\0" in name:
            raise BackendRefused(f"the checkpoint disk has a name with `/` in directory "
                                 f"inode {inode}")
        if name in (b".", b"..") or not name:
            continue
        out.append(Entry(int(ino), int(mode, 8), int(uid), int(gid), name,
                         int(size) if size else 0))
    return out


def extract(image: Path, into: Path, *, budget: int) -> tuple[int, int]:
    """Write the image's tree into the empty directory `into`: (files, entries left out)."""
    if shutil.which("debugfs") is None:
        raise BackendError("debugfs is not installed; install it: apt-get install -y e2fsprogs")
    walk = Walk(image, budget)
    walk.root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        walk.dirs_seen.add(ROOT_INODE)
        _directory(walk, ROOT_INODE, walk.root, b"", 0)
    finally:
        os.close(walk.root)
    return len(walk.files_seen), walk.skipped


def _directory(walk: Walk, inode: int, fd: int, path: bytes, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise BackendRefused(f"the checkpoint disk's tree is deeper than {MAX_DEPTH}")
    for entry in listing(walk, inode):
        walk.entries += 1
        if walk.entries > MAX_ENTRIES:
            raise BackendRefused(f"the checkpoint disk holds more than {MAX_ENTRIES} entries")
        kind = entry.mode & _S_IFMT
        try:
            if kind == _S_IFDIR:
                if entry.inode in walk.dirs_seen:
                    walk.skipped += 1  # a directory met twice: a loop or a crafted link
                    continue
                walk.dirs_seen.add(entry.inode)
                os.mkdir(entry.name, 0o700, dir_fd=fd)
                sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                              dir_fd=fd)
                try:
                    _directory(walk, entry.inode, sub, path + entry.name + b"/", depth + 1)
                    _own(sub, entry)
                finally:
                    os.close(sub)
            elif kind == _S_IFREG:
                _regular(walk, entry, fd, path + entry.name)
            elif kind == _S_IFLNK:
                _symlink(walk, entry, fd)
            else:
                walk.skipped += 1  # FIFOs, sockets and device nodes are not carried
        except FileExistsError:
            walk.skipped += 1  # a name twice in one directory: the first one stays


def _regular(walk: Walk, entry: Entry, fd: int, path: bytes) -> None:
    first = walk.files_seen.get(entry.inode)
    if first is not None:
        os.link(first, entry.name, src_dir_fd=walk.root, dst_dir_fd=fd,
                follow_symlinks=False)
        return
    walk.written += entry.size
    if walk.written > walk.budget:
        raise BackendRefused(
            f"file {entry.name.decode('utf-8', 'backslashreplace')!r} on the checkpoint disk "
            f"takes the files past {walk.budget} bytes, more than the disk holds: a sparse "
            "or corrupted file")
    out = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                  dir_fd=fd)
    try:
        debugfs(walk.image, f"cat <{entry.inode}>", limit=entry.size,
                sink=lambda chunk: _write_all(out, chunk))
        _own(out, entry)
    finally:
        os.close(out)
    walk.files_seen[entry.inode] = path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _symlink(walk: Walk, entry: Entry, fd: int) -> None:
    described = debugfs(walk.image, f"stat <{entry.inode}>", limit=1 << 20)
    fast = _FAST_LINK.search(described)
    target = fast.group(1) if fast else debugfs(walk.image, f"cat <{entry.inode}>",
                                               limit=4096)
    if not target or b"\0" in target or len(target) > 4095:
        walk.skipped += 1
        return
    os.symlink(target, entry.name, dir_fd=fd)
    try:
        os.chown(entry.name, entry.uid, entry.gid, dir_fd=fd, follow_symlinks=False)
    except OSError:
        pass


def _own(fd: int, entry: Entry) -> None:
    """The entry's owner (when DevCell may set it) and its mode without set-id bits."""
    try:
        os.fchown(fd, entry.uid, entry.gid)
    except OSError:
        pass
    os.fchmod(fd, entry.mode & 0o777 | (0o700 if entry.mode & _S_IFMT == _S_IFDIR else 0))
