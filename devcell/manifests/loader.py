"""Find and read manifest files: files, directories (recursive) and `-` (stdin).

Reading is separate from parsing, so an apply can skip parsing files whose bytes it has
already recorded (the no-op fast path).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import sys
from collections.abc import Iterable
from typing import BinaryIO

from devcell import safeio
from devcell.errors import ManifestError, Problem
from devcell.manifests.model import SourceFile

MAX_DOCUMENT_BYTES = 1024 * 1024
"""Per document, not per file (etcd limits an object to 1.5 MiB; kubectl a file to nothing)."""
MAX_DOCUMENTS = 10_000
"""Per file: each document, even an empty one, costs the parser and validation a record
(500,000 `---` lines in 2 MB took 9 s and 540 MB), so a file is bounded in count as well as
each document in size."""
CHUNK_BYTES = 1024 * 1024
FIFO_WAIT_S = 10.0
"""How long a FIFO given with -f is waited on for a program to open it for writing."""
_OTHER_BREAK_MARKER = re.compile(rb"(?:\r|\xc2\x85|\xe2\x80\xa8|\xe2\x80\xa9)---")
"""`---` after a line break that is not `\n` (CR, NEL, LINE and PARAGRAPH SEPARATOR)."""
EXTENSIONS = (".yaml", ".yml", ".json")


def hidden(name: str) -> bool:
    """Hidden entries are skipped: editors' temp files, `.git`, a save's `.x.yaml.tmp`."""
    return name.startswith(".")


def manifest_name(name: str) -> bool:
    return name.endswith(EXTENSIONS) and not hidden(name)


def walk(directory: str) -> list[str]:
    """Manifest files under `directory`: recursive, hidden entries skipped, in `walk_order`."""
    found: list[str] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not hidden(d))
        for name in sorted(files):
            if manifest_name(name):
                found.append(os.path.join(root, name))
    return found


def walk_order(relative: str) -> tuple[tuple[int, str], ...]:
    """Sort key putting paths relative to a walked directory in the order `walk` lists them
    (a directory's own files by name, then its subdirectories by name), so files read one by
    one are applied in the same order as the whole directory would be."""
    parts = relative.split(os.sep)
    return tuple((1, d) for d in parts[:-1]) + ((0, parts[-1]),)


NOT_REGULAR = ("not a regular file (a FIFO, socket or device); only regular files are read "
               "from a directory")


A_LINK = ("a symbolic link: links in a directory are not followed (one could bring in a file "
          "from outside it, such as the host's credentials); apply the file it names directly, "
          "or copy it here")


def _open_regular(path: str) -> int:
    """Open `path` only if it is a regular file and not a link, without blocking: opening a
    FIFO for reading waits for a writer, so one named x.yaml would hang the apply, or the
    daemon's sync, for good; a link committed to a GitOps directory would read (and quote in
    errors) a file outside it. Checked before opening (a device is never opened) and after
    (the file could have been replaced in between; O_NOFOLLOW refuses a link put there)."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise _NotRegular(0, A_LINK)
    if not stat.S_ISREG(mode):
        raise _NotRegular(0, NOT_REGULAR)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _NotRegular(0, A_LINK) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _NotRegular(0, NOT_REGULAR)
    os.set_blocking(fd, True)
    return fd


class _NotRegular(OSError):
    """A walked path that is not a regular file."""


class _DocumentSizes:
    """Checks, as bytes stream in, that no document is larger than `limit`.

    A YAML document starts at a line beginning with `---` or `...` (libyaml ends every
    scalar there, so this split is the parser's); a JSON file is one document. The limit is
    per document, as etcd limits each object, never per file: a file of 10,000 small
    documents is fine, a single 2 MiB document is refused at its first line, and reading
    stops there (the rest of a huge file is never read)."""

    def __init__(self, display: str, limit: int, *, whole: bool) -> None:
        self.display, self.limit, self.whole = display, limit, whole
        self.offset = 0  # bytes before `pending`
        self.line = 1  # line number of `pending`
        self.pending = b""
        self.start, self.start_line = 0, 1
        self.documents = 0  # `---` lines seen: each starts a document

    def feed(self, data: bytes) -> None:
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()
        at = self.offset
        for text in lines:
            marker = not self.whole and text[:3] in (b"---", b"...") and text[3:4] in (
                b"", b" ", b"\t", b"\r")
            if marker and text[0] == 45:  # "---": a document starts on this line
                self.start, self.start_line = at, self.line
                self._count()
            if not self.whole and b"---" in text[1:]:
                # libyaml also ends lines at CR, NEL, LS and PS: `---` after one of those
                # starts a document too (a CR-only file is one line here)
                self._count(len(_OTHER_BREAK_MARKER.findall(text)))
            at += len(text) + 1
            self.line += 1
            if marker and text[0] == 46:  # "...": the next one starts after it
                self.start, self.start_line = at, self.line
            self._check(at)
        self.offset = at
        self._check(at + len(self.pending))

    def _count(self, documents: int = 1) -> None:
        self.documents += documents
        if self.documents > MAX_DOCUMENTS:
            raise ManifestError([Problem(
                self.display, f"more than {MAX_DOCUMENTS} documents in one file; split it "
                "into several files", line=self.line)])

    def _check(self, end: int) -> None:
        if end - self.start > self.limit:
            what = "file (one JSON document)" if self.whole else "document"
            raise ManifestError([Problem(
                self.display, f"{what} is larger than the limit of {self.limit} bytes per "
                "document; split it into smaller documents", line=self.start_line)])


def _stream(fh: BinaryIO, sizes: _DocumentSizes, head: bytes) -> bytes:
    chunks = []
    data = head
    while data:
        sizes.feed(data)
        chunks.append(data)
        data = fh.read(CHUNK_BYTES)
    return b"".join(chunks)


def _read_limited(stream_or_path: str | None, display: str, limit: int,
                  regular_only: bool = False) -> bytes:
    def sizes() -> _DocumentSizes:
        return _DocumentSizes(display, limit, whole=display.endswith(".json"))

    if stream_or_path is None:
        return _stream(sys.stdin.buffer, sizes(), sys.stdin.buffer.read(CHUNK_BYTES))
    opened = (_open_regular(stream_or_path) if regular_only
              else safeio.open_given(stream_or_path))
    with open(opened, "rb") as fh:
        early = b"" if regular_only else safeio.wait_for_writer(fh.fileno(), FIFO_WAIT_S)
        if early is None:
            raise ManifestError([Problem(display, (
                f"a FIFO no program opened for writing within {FIFO_WAIT_S:g} s: start the "
                "program that writes it first, or give the manifests on stdin (-f -)"))])
        # A file no larger than the limit cannot hold a larger document: read it at once,
        # asking for its size, not the limit (read(limit + 1) allocates 1 MiB and shrinks
        # it, which leaves every small file on pages of its own: reading 10,000 files of
        # 1 KiB so costs 40 MB of RSS instead of 12). Stream the rest, or a file that grew.
        size = os.fstat(fh.fileno()).st_size
        head = early + (fh.read(min(size, limit) + 1) if size <= limit
                        else fh.read(CHUNK_BYTES))
        if size <= limit and len(head) <= size:
            if head.count(b"---") > MAX_DOCUMENTS:  # cheap bound first, then the exact count
                sizes().feed(head)
            return head
        return _stream(fh, sizes(), head)


def from_bytes(display: str, data: bytes, *, limit: int = MAX_DOCUMENT_BYTES) -> SourceFile:
    """A manifest stream received whole (an HTTP request's body), bounded as a file is:
    `display` names it in messages (`.json` at its end: one JSON document)."""
    _DocumentSizes(display, limit, whole=display.endswith(".json")).feed(data)
    return SourceFile(display, "-", data, hashlib.sha256(data).hexdigest())


def read_sources(paths: Iterable[str], *, limit: int = MAX_DOCUMENT_BYTES,
                 regular_only: bool = False) -> list[SourceFile]:
    """Every manifest file named by `paths`; all problems (missing, oversize) at once.

    `limit` bounds each document (see _DocumentSizes); a file may be of any size.

    Files found by walking a directory must be regular files (a FIFO, socket or device
    there is a problem, never read); so must every path with `regular_only` (the daemon's
    reads, which are walk results). A path given on its own may be a pipe: `-f <(cmd)`."""
    files: list[SourceFile] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for given in paths:
        walked = regular_only
        if given == "-":
            candidates: list[tuple[str | None, str, str]] = [(None, "<stdin>", "-")]
        elif os.path.isdir(given):
            candidates = [(p, p, os.path.abspath(p)) for p in walk(given)]
            walked = True
        elif os.path.exists(given):
            candidates = [(given, given, os.path.abspath(given))]
        else:
            problems.append(Problem(given, "no such file or directory"))
            continue
        for path, display, key in candidates:
            if key in seen:
                continue
            seen.add(key)
            try:
                data = _read_limited(path, display, limit, walked)
            except ManifestError as exc:
                problems.extend(exc.problems)
                continue
            except _NotRegular as exc:
                problems.append(Problem(display, exc.strerror or NOT_REGULAR))
                continue
            except OSError as exc:
                problems.append(Problem(display, f"cannot read: {exc.strerror}"))
                continue
            files.append(SourceFile(display, key, data, hashlib.sha256(data).hexdigest()))
    if problems:
        raise ManifestError(problems)
    return files
