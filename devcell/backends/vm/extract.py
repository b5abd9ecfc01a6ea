"""A checkpoint disk's files, read out of an ext4 image a guest wrote: hostile input.

A guest controls every byte of its disk, so it can craft its ext4: symbolic links anywhere,
device nodes, a file whose size claims terabytes, a directory that contains itself, names
with `/` or a newline, metadata that makes a reader loop. The image is never mounted (that
would hand the kernel a crafted filesystem) and `debugfs rdump` is not used (it follows a
symbolic link it made itself when a later entry has the same name, writes holes in full and
recurses without bound). DevCell walks the tree itself, a level at a time, with batches of
debugfs requests (vm/debugfs.py): per level one `dump` batch of the directories' own blocks
(parsed as ext4 lays them out: each name exactly its recorded length, so none can pass for
another entry, as a raw `ls -p` listing would let a name holding `/` and newlines do), one
`stat` batch and one `dump` batch of files, so a disk costs a few processes per level of
depth, whatever it holds. Files
are dumped into a private staging directory under names DevCell chose (digits), and every
host entry is made by DevCell relative to a directory descriptor, with O_EXCL and O_NOFOLLOW
(a dumped file is hard-linked into place, never renamed over a name): nothing is followed
or overwritten.

The tree comes out as the disk holds it: names byte for byte (newlines included), link
targets exactly, modes, owners (where DevCell may set them), hard links, and access and
modification times to the nanosecond, the root directory's own included. Left out, and
counted: FIFOs, sockets and device nodes, a directory met twice (a loop), a second entry of
one name; set-id bits are dropped. Refused, named: a name with `/` or NUL, regular files
together larger than the disk (a sparse or lying file), more than MAX_ENTRIES entries or
MAX_DEPTH levels.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from devcell.backends.host import removal, treewalk
from devcell.backends.vm import debugfs
from devcell.backends.vm.debugfs import ROOT_INODE, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG, Entry
from devcell.errors import BackendError, BackendRefused

MAX_ENTRIES = 1_000_000
MAX_DEPTH = 256
MAX_DIRECTORY_BYTES = 256 << 20
"""A directory's own blocks read at most (a million long names fit)."""
LINK_MAX = 4095


@dataclass
class Walk:
    image: Path
    budget: int
    root: int = -1
    stage: Path = Path()
    written: int = 0
    entries: int = 0
    files: int = 0
    skipped: int = 0
    dirs_seen: set[int] = field(default_factory=set)
    linked: dict[int, bytes] = field(default_factory=dict)
    """Inode -> path (from the root) of its first name, for files with more than one."""
    placed: list[tuple[bytes, Entry, debugfs.Inode]] = field(default_factory=list)
    """Directories made, parents first: their modes and times are set last, deepest first
    (making an entry inside a directory changes its times)."""


def extract(image: Path, into: Path, *, budget: int) -> tuple[int, int]:
    """Write the image's tree into the empty directory `into`: (files, entries left out)."""
    if shutil.which("debugfs") is None:
        raise BackendError("debugfs is not installed; install it: apt-get install -y e2fsprogs")
    walk = Walk(image, budget)
    walk.stage = Path(tempfile.mkdtemp(prefix=".stage-", dir=into.parent))
    walk.root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        walk.dirs_seen.add(ROOT_INODE)
        (answer,) = debugfs.run(image, [f"stat <{ROOT_INODE}>"], cwd=walk.stage)
        node = debugfs.inode(answer, ROOT_INODE)
        root = Entry(ROOT_INODE, S_IFDIR | node.permissions, node.uid, node.gid, b"", 0)
        walk.placed.append((b"", root, node))
        level = [(ROOT_INODE, b"", node.size)]
        depth = 0
        while level:
            depth += 1
            if depth > MAX_DEPTH:
                raise BackendRefused(f"the checkpoint disk's tree is deeper than {MAX_DEPTH}")
            level = _level(walk, level)
        for path, entry, node in reversed(walk.placed):
            _settle_directory(walk, path, entry, node)
    finally:
        os.close(walk.root)
        removal.remove_quietly(walk.stage)
    return walk.files, walk.skipped


Level = list[tuple[int, bytes, int]]
"""Directories of one level: (inode, path from the root, size its inode claims)."""


def _level(walk: Walk, level: Level) -> Level:
    """Read every directory of one level (their blocks, one dump batch), place what they hold
    (batches of entries across directories), and return the next level's directories. A
    directory's size is checked before it is dumped, and counts against the disk's size:
    `dump` writes what an inode claims, holes in full."""
    below: Level = []
    for start in range(0, len(level), debugfs.BATCH):
        part = level[start:start + debugfs.BATCH]
        for _, path, size in part:
            walk.written += size
            if size > MAX_DIRECTORY_BYTES or walk.written > walk.budget:
                raise BackendRefused(f"directory {_shown(path) or '/'!r} on the checkpoint disk "
                                     f"claims {size} bytes, more than a directory holds "
                                     "(corrupted?)")
        debugfs.run(walk.image, [f"dump <{ino}> d{ino}" for ino, _, _ in part], cwd=walk.stage)
        group: list[tuple[bytes, int, bytes]] = []
        for ino, path, _ in part:
            found = debugfs.directory_entries(_staged(walk, f"d{ino}", MAX_DIRECTORY_BYTES), ino)
            walk.entries += len(found)
            if walk.entries > MAX_ENTRIES:
                raise BackendRefused(f"the checkpoint disk holds more than {MAX_ENTRIES} "
                                     "entries")
            for number, name in found:
                group.append((path, number, name))
                if len(group) == debugfs.BATCH:
                    below.extend(_entries(walk, group))
                    group = []
        if group:
            below.extend(_entries(walk, group))
    return below


def _staged(walk: Walk, name: str, limit: int) -> bytes:
    """A dumped inode's bytes from the staging directory (removed after), at most `limit`."""
    path = walk.stage / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise BackendRefused(f"the checkpoint disk's inode {name[1:]} could not be read "
                             "(corrupted?)") from None
    try:
        if os.fstat(fd).st_size > limit:
            raise BackendRefused(f"directory inode {name[1:]} on the checkpoint disk is larger "
                                 f"than {limit} bytes")
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)
        os.unlink(path)


def _entries(walk: Walk, group: list[tuple[bytes, int, bytes]]) -> Level:
    """A batch of entries (of one or more directories, in their order): stat them (one
    debugfs run), dump new files and slow links (one run), then make each on the host."""
    nodes = debugfs.run(walk.image, [f"stat <{number}>" for _, number, _ in group],
                        cwd=walk.stage)
    described: list[tuple[bytes, Entry, debugfs.Inode]] = []
    for (path, number, name), answer in zip(group, nodes, strict=True):
        node = debugfs.inode(answer, number)
        if not node.kind:
            walk.skipped += 1  # FIFOs, sockets and device nodes are not carried
            continue
        described.append((path, Entry(number, node.kind | node.permissions, node.uid, node.gid,
                                      name, node.size), node))
    dumps: dict[int, Entry] = {}
    for path, entry, node in described:
        kind = entry.mode & S_IFMT
        if kind == S_IFREG and entry.inode not in walk.linked and entry.inode not in dumps:
            walk.written += entry.size
            if walk.written > walk.budget:
                raise BackendRefused(
                    f"file {_shown(path + entry.name)!r} on the checkpoint disk takes the files "
                    f"past {walk.budget} bytes, more than the disk holds: a sparse or corrupted "
                    "file")
            dumps[entry.inode] = entry
        elif kind == S_IFLNK and node.fast_link is None and 0 < entry.size <= LINK_MAX:
            dumps[entry.inode] = entry
    if dumps:
        _dump(walk, list(dumps.values()))
    below: Level = []
    fd, opened = -1, b""
    try:
        for path, entry, node in described:
            if fd < 0 or path != opened:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                fd, opened = treewalk.open_beneath(walk.root, path), path
            try:
                if _place(walk, fd, path, entry, node, dumps):
                    below.append((entry.inode, path + entry.name + b"/", entry.size))
            except FileExistsError:
                walk.skipped += 1  # a name twice in one directory: the first one stays
            except FileNotFoundError:
                walk.skipped += 1  # a second name for a file whose inode says it has one
    finally:
        if fd >= 0:
            os.close(fd)
        for ino in dumps:
            _unlink_quietly(walk.stage / str(ino))
    return below


def _place(walk: Walk, fd: int, path: bytes, entry: Entry, node: debugfs.Inode,
           dumps: dict[int, Entry]) -> bool:
    """Make one entry in the directory `fd`; True for a directory to walk next."""
    kind = entry.mode & S_IFMT
    if kind == S_IFDIR:
        if entry.inode in walk.dirs_seen:
            walk.skipped += 1  # a directory met twice: a loop or a crafted link
            return False
        os.mkdir(entry.name, 0o700, dir_fd=fd)
        walk.dirs_seen.add(entry.inode)
        walk.placed.append((path + entry.name, entry, node))
        return True
    if kind == S_IFLNK:
        target = node.fast_link
        if target is None and entry.inode in dumps:
            target = _staged_link(walk, entry)
        if not target or b"\0" in target or len(target) > LINK_MAX:
            walk.skipped += 1
            return False
        os.symlink(target, entry.name, dir_fd=fd)
        _settle(fd, entry, node)
        return False
    first = walk.linked.get(entry.inode)
    if first is not None:
        os.link(first, entry.name, src_dir_fd=walk.root, dst_dir_fd=fd, follow_symlinks=False)
        return False
    staged = os.fsencode(walk.stage / str(entry.inode))
    _settle_staged(staged, entry, node)  # a hard link into place keeps mode and times
    os.link(staged, entry.name, dst_dir_fd=fd, follow_symlinks=False)
    os.unlink(staged)
    walk.files += 1
    if node.links > 1:
        walk.linked[entry.inode] = path + entry.name
    return False


def _dump(walk: Walk, entries: list[Entry]) -> None:
    """`dump <inode> <inode>` for each, in one debugfs run inside the staging directory
    (names DevCell chose: digits), each checked against its inode's size after."""
    size = sum(e.size for e in entries)
    debugfs.run(walk.image, [f"dump <{e.inode}> {e.inode}" for e in entries], cwd=walk.stage,
                timeout=debugfs.REQUEST_SECONDS + size / (20 << 20))  # grows with the bytes
    for entry in entries:
        try:
            st = os.stat(walk.stage / str(entry.inode), follow_symlinks=False)
        except FileNotFoundError:
            raise BackendRefused(f"{_shown(entry.name)!r} on the checkpoint disk could not be "
                                 "read (corrupted?)") from None
        if st.st_size != entry.size:
            raise BackendRefused(f"{_shown(entry.name)!r} on the checkpoint disk is not the "
                                 "size its inode says (corrupted?)")


def _staged_link(walk: Walk, entry: Entry) -> bytes:
    fd = os.open(walk.stage / str(entry.inode), os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.read(fd, LINK_MAX + 1)
    finally:
        os.close(fd)


def _settle(fd: int, entry: Entry, node: debugfs.Inode) -> None:
    """A symbolic link's owner (where DevCell may set it) and times, through the directory
    `fd`, never following the link."""
    try:
        os.chown(entry.name, entry.uid, entry.gid, dir_fd=fd, follow_symlinks=False)
    except OSError:
        pass
    os.utime(entry.name, ns=(node.atime_ns, node.mtime_ns), dir_fd=fd, follow_symlinks=False)


def _settle_staged(staged: bytes, entry: Entry, node: debugfs.Inode) -> None:
    """A dumped file's owner (where DevCell may set it), mode without set-id bits and times,
    set in the staging directory (DevCell's own names) before it is linked into place."""
    out = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        try:
            os.fchown(out, entry.uid, entry.gid)
        except OSError:
            pass
        os.fchmod(out, entry.mode & 0o1777)
        os.utime(out, ns=(node.atime_ns, node.mtime_ns))
    finally:
        os.close(out)


def _settle_directory(walk: Walk, path: bytes, entry: Entry, node: debugfs.Inode) -> None:
    fd = treewalk.open_beneath(walk.root, path)
    try:
        try:
            os.fchown(fd, entry.uid, entry.gid)
        except OSError:
            pass
        os.fchmod(fd, entry.mode & 0o1777)
        os.utime(fd, ns=(node.atime_ns, node.mtime_ns))
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _shown(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")
