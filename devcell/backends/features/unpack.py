"""A feature's tarball extracted into a fresh folder DevCell owns, refusing anything but
regular files and directories.

The tarball is the feature author's: a link, a device, a FIFO, an absolute name or one with
`..` is refused (the whole tarball, nothing kept), as are more than MAX_MEMBERS entries,
more than MAX_BYTES of content or more than MAX_STREAM bytes of tar once decompressed. Only
regular files and directories are ever made, in a directory made here, so no name can lead
outside it. Modes keep only the owner's and the read/execute bits (install.sh must stay
executable); owners and times are not kept.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
import zlib
from typing import Any, BinaryIO

from devcell.errors import ImageBuildFailed

MAX_MEMBERS = 10_000
MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20


def _parts(name: str, shown: str) -> list[str]:
    if name.startswith("/") or "\0" in name:
        raise ImageBuildFailed(f"feature {shown}: its tarball holds an absolute name "
                               f"({name!r}); refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageBuildFailed(f"feature {shown}: its tarball holds a name leading out of "
                               f"it ({name!r}); refused")
    return parts


def extract(source: BinaryIO, into: str, shown: str) -> None:
    """Extract the tarball `source` (plain or gzip) into `into`, a directory that must not
    exist; on any refusal nothing is left there."""
    os.mkdir(into, 0o700)
    try:
        _extract(source, into, shown)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise


MAX_STREAM = MAX_BYTES + MAX_MEMBERS * 2048 + (1 << 20)
"""The most tar bytes read (after gzip): the content allowed, each entry's header and padding,
some room for long names. tarfile reads a header (a pax or GNU long name record) whole, as
long as it says, so a gzip of a few hundred KiB could otherwise make it hold gigabytes."""


class _Bounded(io.RawIOBase):
    """The decompressed tarball, refused past MAX_STREAM bytes."""

    def __init__(self, inner: BinaryIO, shown: str) -> None:
        self.inner, self.shown, self.seen = inner, shown, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)[:min(len(buffer), _CHUNK)]
        data = self.inner.read(len(view))
        self.seen += len(data)
        if self.seen > MAX_STREAM:
            raise ImageBuildFailed(f"feature {self.shown}: its tarball holds more than "
                                   f"{MAX_STREAM >> 20} MiB (headers included); refused")
        view[:len(data)] = data
        return len(data)


def _decompressed(source: BinaryIO, shown: str) -> BinaryIO:
    start = source.read(2)
    source.seek(-len(start), os.SEEK_CUR)
    inner: Any = gzip.GzipFile(fileobj=source, mode="rb") if start == b"\x1f\x8b" else source
    return io.BufferedReader(_Bounded(inner, shown), _CHUNK)


def _extract(source: BinaryIO, into: str, shown: str) -> None:
    total = 0
    try:
        with tarfile.open(fileobj=_decompressed(source, shown), mode="r|") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise ImageBuildFailed(f"feature {shown}: its tarball holds more than "
                                           f"{MAX_MEMBERS} entries; refused")
                parts = _parts(member.name, shown)
                if not parts:
                    continue
                path = os.path.join(into, *parts)
                if member.isdir():
                    _directory(into, parts)
                    continue
                if not member.isreg():
                    raise ImageBuildFailed(
                        f"feature {shown}: its tarball holds {member.name!r}, which is not a "
                        "regular file or directory (a link or device); refused")
                total += member.size
                if total > MAX_BYTES:
                    raise ImageBuildFailed(f"feature {shown}: its tarball holds more than "
                                           f"{MAX_BYTES >> 20} MiB; refused")
                _directory(into, parts[:-1])
                data = tar.extractfile(member)
                assert data is not None  # a regular file
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600)
                os.fchmod(fd, 0o755 if member.mode & 0o111 else 0o644)  # whatever our umask
                with os.fdopen(fd, "wb") as out:
                    while chunk := data.read(_CHUNK):
                        out.write(chunk)
    except FileExistsError:
        raise ImageBuildFailed(f"feature {shown}: its tarball names one file twice; "
                               "refused") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ImageBuildFailed(f"feature {shown}: its tarball cannot be read ({exc})") from None


def _directory(into: str, parts: list[str]) -> None:
    """`into`/`parts`, each level made 0755 whatever the process's umask (the image's users
    read a feature's files); directories already there are left as they are, and a file there
    is FileExistsError (one name given twice)."""
    path = into
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            raise  # an earlier file of the tarball: the name is given twice
        os.chmod(path, 0o755)


def feature_root(folder: str) -> str:
    """Where the feature's files are in an extracted tarball: its top, or the one directory
    it holds when the tarball wrapped them in one."""
    if os.path.lexists(os.path.join(folder, "devcontainer-feature.json")):
        return folder
    entries = os.listdir(folder)
    if len(entries) == 1 and os.path.isdir(os.path.join(folder, entries[0])) \
            and not os.path.islink(os.path.join(folder, entries[0])):
        return os.path.join(folder, entries[0])
    return folder
