"""Writing a snapshot archive (archive_format) from a checkpoint's tree, streamed.

The tree came from a cell, so it is read as hostile input: walked by treewalk (no recursion,
no link followed, one descriptor at a time), every file opened relative to its directory with
O_NOFOLLOW and O_NONBLOCK and read only if fstat says it is the regular file the listing saw,
and read for exactly the size listed. A symbolic link is stored as a link (its target is
never followed); FIFOs, sockets and device nodes are skipped and counted (import would refuse
them); a large sparse file is refused (its holes would be written out in full). Memory stays
bounded: contents pass through in 1 MiB pieces, and only files with several hard links are
remembered (to write the later names as links to the first).
"""

from __future__ import annotations

import dataclasses
import io
import os
import stat
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from devcell.backends.archives import format as fmt
from devcell.backends.archives.format import Digest, Entry, Kind
from devcell.backends.host import treewalk
from devcell.backends.host.ids import is_safe_id
from devcell.errors import BackendError


@dataclass(frozen=True)
class Written:
    sha256: str
    entries: int
    bytes: int
    skipped: int
    """FIFOs, sockets and device nodes left out (an archive carries no special files)."""


class _Hashing(io.RawIOBase):
    """Reads exactly `size` bytes of a descriptor into tar, feeding the digest as it goes."""

    def __init__(self, fd: int, size: int, digest: Digest, where: str) -> None:
        self.fd, self.left, self.digest, self.where = fd, size, digest, where

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        data = os.read(self.fd, min(want, fmt.BUFFER)) if want > 0 else b""
        if want > 0 and not data:
            raise BackendError(f"{self.where} shrank while it was exported")
        self.left -= len(data)
        self.digest.content(data)
        return data


class _Counting:
    """A write-only stream tar can ask its position of (a pipe cannot say): tarfile's plain
    write mode writes straight through, where its stream mode ("w|") joins every small header
    onto a growing buffer, which costs quadratic time over many files."""

    def __init__(self, out: BinaryIO) -> None:
        self.out, self.position = out, 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position


def _info(entry: Entry, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.name)
    info.type, info.mode, info.uid, info.gid = kind, entry.mode, entry.uid, entry.gid
    info.size, info.linkname = entry.size, entry.link
    info.mtime = entry.mtime_ns // 1_000_000_000
    info.uname = info.gname = ""
    info.pax_headers = {fmt.MTIME: fmt.time_text(entry.mtime_ns),
                        fmt.ATIME: fmt.time_text(entry.atime_ns)}
    return info


SPARSE_ABOVE = 16 * 2**20
"""Files larger than this that hold less than half their size on disk are refused (a cell's
64 GiB of nothing would otherwise be 64 GiB of archive); smaller ones are written in full."""


def _sparse(st: os.stat_result) -> bool:
    return st.st_size > SPARSE_ABOVE and st.st_blocks * 512 < st.st_size // 2


def _entry(kind: str, name: str, st: os.stat_result, *, size: int = 0, link: str = "") -> Entry:
    return Entry(kind, name, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns,
                 st.st_atime_ns, size, link)


class _Writer:
    def __init__(self, tar: tarfile.TarFile, tree: Path) -> None:
        self.tar, self.tree, self.digest = tar, tree, Digest()
        self.root = fmt.ROOT
        """The top of the member names of the tree being walked."""
        self.linked: dict[tuple[int, int], Entry] = {}
        """(device, inode) -> the first name's entry: later names carry its times (reading
        the first name's contents moved the inode's access time)."""
        self.skipped = 0

    def add(self, entry: Entry, kind: bytes, content: BinaryIO | None = None) -> None:
        self.digest.entry(entry)
        self.tar.addfile(_info(entry, kind), content)

    def member(self, directory: treewalk.Directory, rel: str, name: str,
               st: os.stat_result) -> None:
        full = f"{self.root}/{rel}{name}"
        if len(os.fsencode(full)) > fmt.Limits().path_bytes:
            raise BackendError(f"{self.tree} holds a path longer than {fmt.Limits().path_bytes} "
                               "bytes, which an archive cannot carry; shorten it first")
        if stat.S_ISDIR(st.st_mode):
            self.add(_entry(Kind.DIR, full, st), tarfile.DIRTYPE)
        elif stat.S_ISLNK(st.st_mode):
            target = os.fsdecode(os.readlink(name, dir_fd=directory.fd))
            self.add(_entry(Kind.SYMLINK, full, st, link=target), tarfile.SYMTYPE)
        elif stat.S_ISREG(st.st_mode):
            first = self.linked.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
            if first is not None:
                self.add(dataclasses.replace(first, kind=Kind.LINK, name=full, size=0,
                                             link=first.name), tarfile.LNKTYPE)
                return
            entry = self.file(directory, full, name, st)
            if st.st_nlink > 1:
                self.linked[(st.st_dev, st.st_ino)] = entry
        else:
            self.skipped += 1

    def file(self, directory: treewalk.Directory, full: str, name: str,
             st: os.stat_result) -> Entry:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=directory.fd)
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise BackendError(f"{full} changed while it was exported")
            if _sparse(now):
                raise BackendError(
                    f"{full!r} is a sparse file ({now.st_size} bytes, "
                    f"{now.st_blocks * 512} on disk): an archive would carry every byte of its "
                    "holes, so nothing was exported. Remove it or write it out in full inside "
                    "the cell, snapshot again, then export")
            entry = _entry(Kind.FILE, full, st, size=st.st_size)
            reader = _Hashing(fd, st.st_size, self.digest, full)
            self.add(entry, tarfile.REGTYPE, cast(BinaryIO, reader))
            return entry
        finally:
            os.close(fd)


def _members(tree: Path) -> Iterator[tuple[treewalk.Directory, str, str, os.stat_result]]:
    for directory in treewalk.walk(tree):
        rel = directory.path()
        prefix = f"{rel}/" if rel else ""
        for name, st in directory.entries:
            yield directory, prefix, name, st


def sidecar_names(sidecars: Path | None) -> tuple[str, ...]:
    """The sidecars a checkpoint's `sidecars/` directory holds data of: its real directories
    (no link followed) whose names are safe ids, sorted (what the header lists)."""
    if sidecars is None:
        return ()
    try:
        entries = sorted(os.scandir(sidecars), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return ()
    return tuple(e.name for e in entries
                 if e.is_dir(follow_symlinks=False) and is_safe_id(e.name)
                 and len(e.name) <= 63)[:fmt.SIDECARS_MAX]


def _walk(writer: _Writer, root: str, tree: Path) -> None:
    writer.root, writer.tree = root, tree
    writer.add(_entry(Kind.DIR, root, os.lstat(tree)), tarfile.DIRTYPE)
    for directory, prefix, name, st in _members(tree):
        writer.member(directory, prefix, name, st)


def write(out: BinaryIO, header: bytes, tree: Path | None, sidecars: Path | None = None,
          names: tuple[str, ...] = ()) -> Written:
    """Stream the archive of `tree` (None: a backend that keeps no files) to `out`, with
    the data of the sidecars `names` (sidecar_names, listed in the header) from `sidecars`
    under `sidecars/<name>/`."""
    tar = tarfile.open(fileobj=cast(BinaryIO, _Counting(out)), mode="w",
                       format=tarfile.PAX_FORMAT, encoding=fmt.ENCODING, errors=fmt.ERRORS)
    tar.copybufsize = fmt.BUFFER  # type: ignore[attr-defined]  # not in typeshed
    writer = _Writer(tar, tree or Path("."))
    head = Entry(Kind.HEADER, fmt.HEADER, 0o600, size=len(header))
    writer.digest.entry(head)
    writer.digest.content(header)
    info = tarfile.TarInfo(fmt.HEADER)
    info.size, info.mode, info.mtime = len(header), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(header))
    writer.digest.bytes = 0  # counts the tree's bytes only
    if tree is not None:
        _walk(writer, fmt.ROOT, tree)
    if sidecars is not None and names:
        writer.add(_entry(Kind.DIR, fmt.SIDECARS, os.lstat(sidecars)), tarfile.DIRTYPE)
        for name in names:
            _walk(writer, f"{fmt.SIDECARS}/{name}", sidecars / name)
    end = fmt.trailer(writer.digest)
    info = tarfile.TarInfo(fmt.TRAILER)
    info.size, info.mode, info.mtime = len(end), 0o600, int(time.time())
    tar.addfile(info, io.BytesIO(end))
    tar.close()
    return Written(writer.digest.hexdigest(), writer.digest.entries, writer.digest.bytes,
                   writer.skipped)
