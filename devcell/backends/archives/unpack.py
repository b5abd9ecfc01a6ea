"""A new workspace made from a file `devcell snapshot export` wrote
(`spec.workspace.source.archive`), read exactly as `snapshot import` reads one.

The archive is as untrusted as any import: the same reader (read.py) is pointed at the
directory the new workspace is being made in. The file is opened without following a link
and read only if it is a regular file; its checksum, names, kinds and sizes are checked while
its tree is written, so a damaged, altered or wrong archive is ArchiveRefused with the reason,
and the caller removes what was being made: no half-made workspace stays. Admission reads
only the header (`header_problem`), so a file that is no archive is refused at apply with its
line, at the cost of one small read. The reader (and tarfile with it) is imported when an
archive is read, not when a backend or admission imports this module: most commands read none.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from devcell import names
from devcell.backends.host.workspace_seed import ArchiveSource
from devcell.errors import ArchiveRefused, BackendRefused

PREFIX = "archive refused, nothing imported: "
"""How the reader starts its refusals (an import's words), left off here."""


@contextlib.contextmanager
def _regular(path: str) -> Iterator[BinaryIO]:
    """The file at `path` open for reading, its last component not followed, if it is a
    regular file (no FIFO to block on, no device to read); BackendRefused otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise BackendRefused(f"reading archive {names.printable(path)}: "
                             f"{exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BackendRefused(f"reading archive {names.printable(path)}: it is not a "
                                 "regular file")
        yield source


def unpack(seed: ArchiveSource, into: Path) -> None:
    """The archive's tree written to `into` (which must not exist), checked in full on the
    way (its checksum last: on a failure the caller removes what was written). `seed.path`
    is the path judged against the host-path rules: the file opened must be the one found
    there (a directory on the way swapped for a link since is refused, never followed)."""
    with _regular(seed.path) as source:
        if os.readlink(f"/proc/self/fd/{source.fileno()}") != os.path.normpath(
                os.path.abspath(seed.path)):
            raise BackendRefused(f"reading archive {seed.shown}: it changed since it was "
                                 "checked (a part of its path is now a link); no workspace "
                                 "made")
        try:
            from devcell.backends.archives import read as archive_read

            archive = archive_read.Archive(source)
            if not archive.header.has_tree:
                raise ArchiveRefused(f"it holds no files (a {archive.header.backend} "
                                     "snapshot keeps none)")
            archive.extract(into)
        except ArchiveRefused as exc:
            raise ArchiveRefused(f"archive {seed.shown} refused, no workspace made: "
                                 f"{str(exc).removeprefix(PREFIX)}") from None


def header_problem(path: str) -> str | None:
    """Why the file at `path` is no snapshot archive holding files, judged from its header
    alone (cheap, at admission; the whole is checked when the workspace is made)."""
    try:
        with _regular(path) as source:
            from devcell.backends.archives import read as archive_read

            header = archive_read.Archive(source).header
    except ArchiveRefused as exc:
        return str(exc).removeprefix(PREFIX)
    except BackendRefused as exc:
        return str(exc)
    if not header.has_tree:
        return f"the archive holds no files (a {header.backend} snapshot keeps none)"
    return None
