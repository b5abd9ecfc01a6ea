"""A checkpoint disk's files, read out of an ext4 image a guest wrote: hostile input.

A guest controls every byte of its disk, so it can craft its ext4: symbolic links anywhere,
device nodes, a file whose size claims terabytes, a directory that contains itself, names
with `/` or a newline, metadata that makes a reader loop. The image is never mounted (that
would hand the kernel a crafted filesystem) and `debugfs rdump` is not used (it follows a
symbolic link it made itself when a later entry has the same name, writes holes in full and
recurses without bound). Instead DevCell walks the tree itself with debugfs in catastrophic
mode (read-only, no bitmaps): `ls -p <inode>` per directory, `stat <inode>` per symbolic link,
and one batch of `dump <inode> <inode>` per directory's files into a private staging
directory under names DevCell chose (digits), each request under a deadline and its output
bounded; every host file is then made by DevCell relative to a directory descriptor it
opened, with O_EXCL and O_NOFOLLOW (a dumped file is hard-linked into place, never renamed
over a name), so nothing is ever followed or overwritten. Names must be one line without
`/`; `.` and `..` are skipped; a directory met twice (a loop) is skipped; regular files
together may not exceed the disk's size (a sparse or lying file fails the read, named);
FIFOs, sockets and device nodes are left out (counted); set-id bits are dropped. Hard links
stay links.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from devcell.backends.host import children, removal
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
    stage: Path = Path()
    written: int = 0
    entries: int = 0
    skipped: int = 0
    dirs_seen: set[int] = field(default_factory=set)
    files_seen: dict[int, bytes] = field(default_factory=dict)
    """Inode -> path (from the root) of its first link, for its later names."""


def debugfs(image: Path, request: str, *, limit: int) -> bytes:
    """One debugfs request's standard output, at most `limit` bytes, within the deadline."""
    argv = ["debugfs", "-c", "-R", request, str(image)]
    with children.reader(argv) as proc:
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
                chunks.append(chunk)
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
    """Write the image's tree into the empty directory `into`: (files, entries left out).
    File contents are dumped by debugfs, a directory's files in one request, into a
    staging directory beside `into` under names DevCell chose, then linked into place."""
    if shutil.which("debugfs") is None:
        raise BackendError("debugfs is not installed; install it: apt-get install -y e2fsprogs")
    walk = Walk(image, budget)
    walk.stage = Path(tempfile.mkdtemp(prefix=".stage-", dir=into.parent))
    walk.root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        walk.dirs_seen.add(ROOT_INODE)
        _directory(walk, ROOT_INODE, walk.root, b"", 0)
    finally:
        os.close(walk.root)
        removal.remove_quietly(walk.stage)
    return len(walk.files_seen), walk.skipped


def _directory(walk: Walk, inode: int, fd: int, path: bytes, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise BackendRefused(f"the checkpoint disk's tree is deeper than {MAX_DEPTH}")
    files: list[Entry] = []
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
                files.append(entry)
            elif kind == _S_IFLNK:
                _symlink(walk, entry, fd)
            else:
                walk.skipped += 1  # FIFOs, sockets and device nodes are not carried
        except FileExistsError:
            walk.skipped += 1  # a name twice in one directory: the first one stays
    _files(walk, files, fd, path)


def _files(walk: Walk, files: list[Entry], fd: int, path: bytes) -> None:
    """One directory's regular files: new inodes dumped together, later names linked."""
    fresh: dict[int, Entry] = {}
    for entry in files:
        if entry.inode in walk.files_seen or entry.inode in fresh:
            continue
        walk.written += entry.size
        if walk.written > walk.budget:
            raise BackendRefused(
                f"file {entry.name.decode('utf-8', 'backslashreplace')!r} on the checkpoint "
                f"disk takes the files past {walk.budget} bytes, more than the disk holds: a "
                "sparse or corrupted file")
        fresh[entry.inode] = entry
    if fresh:
        _dump(walk, list(fresh.values()))
    for entry in files:
        try:
            if entry.inode in fresh and entry.inode not in walk.files_seen:
                staged = os.fsencode(walk.stage / str(entry.inode))
                os.link(staged, entry.name, dst_dir_fd=fd, follow_symlinks=False)
                os.unlink(staged)
                walk.files_seen[entry.inode] = path + entry.name
            else:
                os.link(walk.files_seen[entry.inode], entry.name, src_dir_fd=walk.root,
                        dst_dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            walk.skipped += 1  # a name twice in one directory: the first one stays


def _dump(walk: Walk, entries: list[Entry]) -> None:
    """`dump <inode> <inode>` for each, in one debugfs run inside the staging directory
    (names DevCell chose: digits; nothing there the guest named), each checked after."""
    commands = walk.stage / "requests"
    commands.write_text("".join(f"dump <{e.inode}> {e.inode}\n" for e in entries))
    size = sum(e.size for e in entries)
    limit = REQUEST_SECONDS + size / (20 << 20)  # a deadline that grows with the bytes
    try:
        children.run_bytes(["debugfs", "-c", "-f", str(commands), str(walk.image)],
                           cwd=walk.stage, timeout=limit)
    except children.TimeoutExpired:
        raise BackendRefused(f"reading files of the checkpoint disk took over {limit:.0f} s: "
                             "its metadata may be corrupted") from None
    for entry in entries:
        staged = walk.stage / str(entry.inode)
        try:
            out = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise BackendRefused(
                f"file {entry.name.decode('utf-8', 'backslashreplace')!r} on the checkpoint "
                "disk could not be read (corrupted?)") from None
        try:
            if os.fstat(out).st_size != entry.size:
                raise BackendRefused(
                    f"file {entry.name.decode('utf-8', 'backslashreplace')!r} on the "
                    "checkpoint disk is not the size its inode says (corrupted?)")
            _own(out, entry)
        finally:
            os.close(out)


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
