"""Reading a snapshot archive (archive_format) into a new directory, as hostile input.

Whatever the archive holds, nothing is written outside the destination and nothing is kept
unless every check passed (the caller removes the destination on any error):

- the first member is the header, of a known format version, and the caller accepts it
  before anything is written; the last is the trailer, whose checksum must match;
- names: under `workspace/` (or `sidecars/<name>/` for a sidecar the header lists), no `..`,
  `.` or empty components, not absolute, no NUL, each component at most 255 bytes and the
  whole at most Limits.path_bytes; every name once; every parent an earlier directory member
  of this archive (so no member is ever written through a symbolic link the archive planted,
  nor into a directory it did not make); a hard link only within its own tree;
- kinds: directories, regular files, symbolic links, and hard links to an earlier regular
  file of this archive. Device nodes, FIFOs, sparse members, tar's other types: refused;
- modes: setuid and setgid are stripped; owners are restored only when running as root;
- costs: at most Limits.entries members, and file contents within Limits.total_bytes (by
  default the destination's free space less a margin), checked before a byte is written.

Every file is created relative to its parent directory's descriptor with O_CREAT|O_EXCL|
O_NOFOLLOW, every directory opened with O_NOFOLLOW, so a name is never resolved through a
link. Symbolic links are stored with their targets as they were: a workspace's links belong
to the cell (`venv/bin/python -> /usr/bin/python3` names the cell's file), and the host never
follows them (copies and walks keep links as links). tarfile.data_filter would refuse such
links; DevCell's rule is instead that nothing is written through one.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from devcell import failpoints
from devcell.backends.archives import format as fmt
from devcell.backends.archives.format import Digest, Entry, Header, Kind, Limits
from devcell.errors import ArchiveRefused

MARGIN = 256 * 2**20
"""Free space an import leaves on the destination's filesystem (with the default limits)."""
DEFAULT_LIMITS = Limits()
READ_BLOCK = 16 * 1024
"""tarfile's stream reader copies what is left of its buffer on every read (512 bytes per
header), so a large buffer costs quadratic time on many small members; contents are still
asked for in BUFFER-sized reads."""
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_STRIP = stat.S_ISUID | stat.S_ISGID
_KINDS = {tarfile.DIRTYPE: Kind.DIR, tarfile.REGTYPE: Kind.FILE, tarfile.AREGTYPE: Kind.FILE,
          tarfile.SYMTYPE: Kind.SYMLINK, tarfile.LNKTYPE: Kind.LINK}
_NAMES = {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
          tarfile.FIFOTYPE: "a FIFO", tarfile.CONTTYPE: "a contiguous file"}


@dataclass(frozen=True)
class Read:
    header: Header
    sha256: str
    entries: int
    bytes: int
    files: int


def _refused(message: str) -> ArchiveRefused:
    return ArchiveRefused(f"archive refused, nothing imported: {message}")


def _parts(name: str, limits: Limits, sidecars: tuple[str, ...] = ()) -> list[str]:
    raw = os.fsencode(name)
    if b"\0" in raw or len(raw) > limits.path_bytes:
        raise _refused(f"member name {name[:80]!r}... is too long or holds a NUL byte")
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(
            len(os.fsencode(p)) > fmt.NAME_MAX for p in parts) or not (
            parts[0] == fmt.ROOT or (parts[0] == fmt.SIDECARS and sidecars
                                     and (len(parts) == 1 or parts[1] in sidecars))):
        raise _refused(f"member {name[:200]!r} would be written outside {fmt.ROOT}/ (or the "
                       f"{fmt.SIDECARS}/ of a sidecar the header lists) or has an empty, '.', "
                       "'..' or over-long component")
    return parts


def _tree_of(parts: list[str]) -> list[str]:
    """The tree a member belongs to: the workspace, or one sidecar's data."""
    return parts[:2] if parts[0] == fmt.SIDECARS else parts[:1]


def _times(member: tarfile.TarInfo) -> tuple[int, int]:
    mtime = fmt.time_ns(member.pax_headers.get(fmt.MTIME))
    atime = fmt.time_ns(member.pax_headers.get(fmt.ATIME))
    if mtime is None or atime is None:
        raise _refused(f"member {member.name[:200]!r} has no exact time records "
                       "(not written by snapshot export)")
    return mtime, atime


class _Tree:
    """The destination: created entries by name, one cached directory descriptor."""

    def __init__(self, dest: Path | None, sidecars: Path | None = None) -> None:
        self.dest = dest
        self.dests = {fmt.ROOT: dest, fmt.SIDECARS: sidecars if dest is not None else None}
        """Where each top directory goes (None: checked, not written)."""
        self.kinds: dict[str, str] = {}
        self.dirs: list[Entry] = []
        self._open: tuple[str, int] | None = None
        self.roots: dict[str, int] = {}
        self.as_root = os.geteuid() == 0

    def writes(self, top: str) -> bool:
        return self.dests.get(top) is not None

    def close(self) -> None:
        self._drop()
        for fd in self.roots.values():
            os.close(fd)
        self.roots.clear()

    def _drop(self) -> None:
        if self._open is not None:
            os.close(self._open[1])
            self._open = None

    def directory(self, path: list[str]) -> int:
        """A descriptor of the created directory `path` (its top directory first)."""
        key = "/".join(path)
        if self._open is not None and self._open[0] == key:
            return self._open[1]
        self._drop()
        fd = os.dup(self.roots[path[0]])
        for part in path[1:]:
            child = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        self._open = (key, fd)
        return fd

    def finish_dirs(self) -> None:
        """Modes, owners and times of the directories, deepest first (creating entries in a
        directory changes its times, and a read-only mode would stop the creating)."""
        for entry in reversed(self.dirs):
            parts = entry.name.split("/")
            if not self.writes(parts[0]):
                continue
            fd = self.directory(parts)
            if self.as_root:
                os.fchown(fd, entry.uid, entry.gid)
            os.fchmod(fd, entry.mode & ~_STRIP)
            os.utime(fd, ns=(entry.atime_ns, entry.mtime_ns))


class _Reader:
    def __init__(self, tar: tarfile.TarFile, tree: _Tree, limits: Limits,
                 budget: int, sidecars: tuple[str, ...] = ()) -> None:
        self.tar, self.tree, self.limits, self.budget = tar, tree, limits, budget
        self.sidecars = sidecars
        self.digest = Digest()
        self.files = 0

    def member(self, member: tarfile.TarInfo) -> None:
        kind = _KINDS.get(member.type)
        if kind is None:
            what = _NAMES.get(member.type, f"of tar type {member.type!r}")
            raise _refused(f"member {member.name[:200]!r} is {what}; an archive may hold only "
                           "directories, regular files and links")
        if member.issparse():
            raise _refused(f"member {member.name[:200]!r} is a sparse file")
        if len(self.tree.kinds) >= self.limits.entries:
            raise _refused(f"more than {self.limits.entries} members")
        parts = _parts(member.name, self.limits, self.sidecars)
        name = "/".join(parts)
        if name in self.tree.kinds:
            raise _refused(f"member {name[:200]!r} appears twice")
        parent = "/".join(parts[:-1])
        top = len(parts) == 1 or (parts[0] == fmt.SIDECARS and len(parts) == 2)
        if (len(parts) > 1 and self.tree.kinds.get(parent) != Kind.DIR) or \
                (top and kind != Kind.DIR):
            raise _refused(f"member {name[:200]!r} does not follow a directory member for its "
                           "parent (a link, a file, or nothing stands there)")
        mtime, atime = _times(member)
        if not (0 <= member.uid < 2**32 - 1 and 0 <= member.gid < 2**32 - 1
                and member.size >= 0):
            raise _refused(f"member {name[:200]!r} has an owner or size out of range")
        entry = Entry(kind, name, member.mode & 0o7777, member.uid, member.gid,
                      mtime, atime, member.size if kind == Kind.FILE else 0,
                      member.linkname if kind in (Kind.LINK, Kind.SYMLINK) else "")
        self.digest.entry(entry)
        self.tree.kinds[name] = Kind.FILE if kind == Kind.LINK else kind
        getattr(self, f"_{kind}")(member, entry, parts)

    def _dir(self, member: tarfile.TarInfo, entry: Entry, parts: list[str]) -> None:
        self.tree.dirs.append(entry)
        dest = self.tree.dests.get(parts[0])
        if dest is None:
            return
        if len(parts) == 1:
            os.mkdir(dest, 0o700)
            self.tree.roots[parts[0]] = os.open(dest, _DIR)
            return
        os.mkdir(parts[-1], 0o700, dir_fd=self.tree.directory(parts[:-1]))

    def _file(self, member: tarfile.TarInfo, entry: Entry, parts: list[str]) -> None:
        if entry.size > self.budget:
            raise _refused(f"member {entry.name[:200]!r} claims {entry.size} bytes, more than "
                           f"the {max(self.budget, 0)} this import may still write")
        self.budget -= entry.size
        self.files += 1
        source = self.tar.extractfile(member)
        assert source is not None  # a regular file
        fd = -1
        if self.tree.writes(parts[0]):
            fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=self.tree.directory(parts[:-1]))
        try:
            left = entry.size
            while left > 0:
                data = source.read(min(left, fmt.BUFFER))
                if not data:
                    raise _refused(f"member {entry.name[:200]!r} is cut short")
                left -= len(data)
                self.digest.content(data)
                if fd >= 0:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
            if fd >= 0:
                self._attributes(fd, entry)
                failpoints.hit("import.file-written")
        finally:
            if fd >= 0:
                os.close(fd)

    def _attributes(self, fd: int, entry: Entry) -> None:
        if self.tree.as_root:
            os.fchown(fd, entry.uid, entry.gid)
        os.fchmod(fd, entry.mode & ~_STRIP)
        os.utime(fd, ns=(entry.atime_ns, entry.mtime_ns))

    def _hardlink(self, member: tarfile.TarInfo, entry: Entry, parts: list[str]) -> None:
        target = _parts(entry.link, self.limits, self.sidecars)
        if self.tree.kinds.get("/".join(target)) != Kind.FILE \
                or _tree_of(target) != _tree_of(parts):
            raise _refused(f"hard link {entry.name[:200]!r} names {entry.link[:200]!r}, which "
                           "is not an earlier regular file of this archive's same tree")
        if not self.tree.writes(parts[0]):
            return
        source_dir = os.dup(self.tree.directory(target[:-1]))
        try:
            os.link(target[-1], parts[-1], src_dir_fd=source_dir,
                    dst_dir_fd=self.tree.directory(parts[:-1]), follow_symlinks=False)
        finally:
            os.close(source_dir)

    def _symlink(self, member: tarfile.TarInfo, entry: Entry, parts: list[str]) -> None:
        raw = os.fsencode(entry.link)
        if not raw or b"\0" in raw or len(raw) >= fmt.PATH_MAX:
            raise _refused(f"symbolic link {entry.name[:200]!r} has an empty, NUL-holding or "
                           "over-long target")
        if not self.tree.writes(parts[0]):
            return
        parent = self.tree.directory(parts[:-1])
        os.symlink(entry.link, parts[-1], dir_fd=parent)
        if self.tree.as_root:
            os.chown(parts[-1], entry.uid, entry.gid, dir_fd=parent, follow_symlinks=False)
        os.utime(parts[-1], ns=(entry.atime_ns, entry.mtime_ns), dir_fd=parent,
                 follow_symlinks=False)


METADATA_MAX = 1 << 20
"""Bytes of a PAX header or GNU long name/link member: tarfile reads those whole into memory
before any check of ours sees the member, so their size is bounded here, first."""
_METADATA = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE,
             tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)


class _Bounded(tarfile.TarInfo):
    """tarfile's member parser, with what it would hold in memory bounded first.

    tarfile reads a PAX header's or a GNU long name's data, and a GNU sparse map, whole,
    while it parses the member that follows: a header claiming 10 GB would be 10 GB of memory
    before `next()` returns. These hooks (tarfile's own per-type dispatch) refuse such
    members before tarfile reads them; tests/backends/archives/test_archive.py proves the bound, so a
    change in tarfile's internals fails a test rather than the promise.
    """

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _METADATA and self.size > METADATA_MAX:
            raise _refused(f"a metadata member claims {self.size} bytes (more than "
                           f"{METADATA_MAX})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _refused("it holds an old-style GNU sparse member")
        result: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        return result

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: dict[str, str],
                           tar: tarfile.TarFile) -> None:
        raise _refused(f"member {next.name[:200]!r} is a sparse file")


def _small(tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int, what: str) -> bytes:
    if not member.isreg() or member.size > limit:
        raise _refused(f"its {what} is not a regular member of at most {limit} bytes")
    source = tar.extractfile(member)
    assert source is not None
    data = source.read(member.size)
    if len(data) != member.size:
        raise _refused(f"its {what} is cut short")
    return data


def _budget(dest: Path | None, limits: Limits) -> int:
    if limits.total_bytes is not None:
        return limits.total_bytes
    if dest is None:
        return 1 << 62
    fs = os.statvfs(dest.parent)
    return fs.f_bavail * fs.f_frsize - MARGIN


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """Each member in turn, none kept: tarfile appends every member it reads to
    `tar.members`, with its PAX headers (up to METADATA_MAX each), so 600 members of 1 MB
    headers held 623 MB. Nothing here asks tarfile for an earlier member (hard links are
    checked against the tree's own record), so the list is emptied as the stream goes."""
    while True:
        member = tar.next()
        tar.members.clear()  # type: ignore[attr-defined]  # tarfile's own list, untyped
        if member is None:
            return
        yield member


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Whatever a hostile or damaged stream makes tarfile or the OS raise: ArchiveRefused."""
    try:
        yield
    except (tarfile.TarError, EOFError) as exc:
        raise _refused(f"damaged or truncated ({exc})") from None
    except (OverflowError, ValueError) as exc:
        raise _refused(f"a member holds a value out of range ({exc})") from None
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise _refused(f"{exc.strerror or exc}{where}") from None


class Archive:
    """An archive being read: its header first (the caller decides where, and whether, the
    tree goes), then `extract` once."""

    def __init__(self, source: BinaryIO, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        with _translated():
            self.tar = tarfile.open(fileobj=source, mode="r|", bufsize=READ_BLOCK,
                                    encoding=fmt.ENCODING, errors=fmt.ERRORS, tarinfo=_Bounded)
            self.members = _members(self.tar)
            first = next(self.members, None)
            if first is None or first.name != fmt.HEADER:
                raise _refused(f"its first member is not {fmt.HEADER}")
            self.raw = _small(self.tar, first, limits.header_bytes, "header")
        self.header = fmt.parse_header(self.raw)

    def extract(self, dest: Path | None, sidecars: Path | None = None) -> Read:
        """Check the rest and write the tree to `dest` (which must not exist; None: check
        only), and the sidecars' data the header lists to `sidecars/<name>/` (`sidecars` must
        not exist; None: checked, not written). ArchiveRefused on any problem; the caller
        removes `dest` and `sidecars` then."""
        tree = _Tree(dest, sidecars)
        try:
            with _translated():
                return self._extract(tree)
        finally:
            tree.close()

    def _extract(self, tree: _Tree) -> Read:
        reader = _Reader(self.tar, tree, self.limits, _budget(tree.dest, self.limits),
                         self.header.sidecars)
        reader.digest.entry(Entry(Kind.HEADER, fmt.HEADER, 0o600, size=len(self.raw)))
        reader.digest.content(self.raw)
        reader.digest.bytes = 0
        for member in self.members:
            if member.name == fmt.TRAILER:
                return _close(self.tar, self.members, member, reader, self.header)
            reader.member(member)
        raise _refused("it is damaged or truncated (it ends without its checksum trailer)")


def read(source: BinaryIO, dest: Path | None, *, limits: Limits = DEFAULT_LIMITS) -> Read:
    """Check the archive from `source` and write its tree to `dest` (see Archive)."""
    return Archive(source, limits).extract(dest)


def _close(tar: tarfile.TarFile, members: Iterator[tarfile.TarInfo], member: tarfile.TarInfo,
           reader: _Reader, header: Header) -> Read:
    try:
        trailer = json.loads(_small(tar, member, 4096, "trailer"))
    except ValueError:
        raise _refused("its checksum trailer is not JSON") from None
    digest = reader.digest
    expected = trailer.get("sha256") if isinstance(trailer, dict) else None
    if expected != digest.hexdigest():
        raise _refused("checksum mismatch: the archive was changed or damaged after export "
                       f"(recorded {str(expected)[:64]}, contents give {digest.hexdigest()})")
    if trailer.get("entries") != digest.entries or trailer.get("bytes") != digest.bytes:
        raise _refused("its trailer's counts do not match its contents")
    if next(members, None) is not None:
        raise _refused("members follow its checksum trailer")
    if header.has_tree != (fmt.ROOT in reader.tree.kinds):
        raise _refused("its header and its contents disagree on whether it holds a tree")
    carried = {name for name in header.sidecars
               if reader.tree.kinds.get(f"{fmt.SIDECARS}/{name}") == Kind.DIR}
    if carried != set(header.sidecars):
        raise _refused("its header lists sidecars whose data it does not hold")
    reader.tree.finish_dirs()
    return Read(header, digest.hexdigest(), digest.entries, digest.bytes, reader.files)
