"""Batches of debugfs requests over an ext4 image, each answer cut out exactly.

One debugfs process answers a whole batch (`debugfs -f FILE`): reading a disk costs a few
processes per directory level, not one per directory or link. debugfs echoes each request
before its answer; a guest can forge that echo with a crafted name (a listing prints names
raw, newlines included), so between requests DevCell puts a comment holding a random nonce,
which debugfs copies to its output and no guest can predict: the answers are split at it.
Each batch runs under a deadline with its output bounded. Requests name inodes by number
(`<12>`), never by a guest's path, so no guest name is ever parsed as a request.
"""

from __future__ import annotations

import os
import re
import secrets
import select
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from devcell.backends.host import children
from devcell.errors import BackendRefused

REQUEST_SECONDS = 60.0
ANSWER_BYTES = 64 << 20
"""Output one batch may give: a listing of a million names fits, a runaway stops early."""
BATCH = 4096
"""Requests per debugfs run: bounds one answer's size and the requests file."""
ROOT_INODE = 2
S_IFMT, S_IFDIR, S_IFREG, S_IFLNK = 0o170000, 0o040000, 0o100000, 0o120000

_ENTRY = re.compile(rb"/(\d+)/([0-7]{6})/(\d+)/(\d+)/([^/]*)/(\d*)/\n")
_LINKS = re.compile(rb"^Links: (\d+)", re.MULTILINE)
_MODE = re.compile(rb"^Inode: \d+ +Type: ([a-zA-Z ]+?) +Mode: +([0-7]{1,6}) ", re.MULTILINE)
_OWNER = re.compile(rb"^User: +(-?\d+) +Group: +(-?\d+) .*?Size: +(\d+)$", re.MULTILINE)
_TYPES = {b"regular": S_IFREG, b"directory": S_IFDIR, b"symlink": S_IFLNK}
"""What stat calls the kinds DevCell carries (FIFOs, sockets, devices: 0, left out)."""
_TIME = re.compile(rb"^ ?(atime|mtime): 0x([0-9a-f]{1,8})(?::([0-9a-f]{1,8}))? --",
                   re.MULTILINE)
_FAST_LINK = b'Fast link dest: "'


@dataclass(frozen=True)
class Entry:
    """One name in a directory listing (`ls -p`): what the name points at."""

    inode: int
    mode: int
    uid: int
    gid: int
    name: bytes
    size: int


@dataclass(frozen=True)
class Inode:
    """What `stat` says of an inode: its kind and permission bits, owner, size, link count,
    times to the nanosecond, and a fast symbolic link's target."""

    links: int
    atime_ns: int
    mtime_ns: int
    fast_link: bytes | None
    permissions: int
    uid: int
    gid: int
    kind: int = 0
    """S_IFREG, S_IFDIR or S_IFLNK; 0 for a kind DevCell does not carry."""
    size: int = 0


def run(image: Path, requests: Sequence[str], *, cwd: Path, write: bool = False,
        timeout: float = REQUEST_SECONDS) -> list[bytes]:
    """Each request's answer (standard output), in order. `write` opens the image for
    writing (DevCell's own disks only); otherwise catastrophic mode (read-only, no bitmaps).
    Requests are split into runs of BATCH."""
    answers: list[bytes] = []
    for start in range(0, len(requests), BATCH):
        answers.extend(_run(image, requests[start:start + BATCH], cwd=cwd, write=write,
                            timeout=timeout))
    return answers


def _run(image: Path, requests: Sequence[str], *, cwd: Path, write: bool,
         timeout: float) -> list[bytes]:
    nonce = secrets.token_hex(16)
    marker = f"# {nonce}\n".encode()
    script = cwd / f".requests-{nonce}"
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        for request in requests:
            assert "\n" not in request and not request.startswith("#")
            f.write(f"{request}\n# {nonce}\n")
    try:
        out = _read(["debugfs", *(["-w"] if write else ["-c"]), "-f", str(script), str(image)],
                    cwd=cwd, timeout=timeout, what=requests[0] if requests else "")
    finally:
        script.unlink()
    blocks = out.split(marker)
    if len(blocks) != len(requests) + 1 or blocks[-1].strip():
        raise BackendRefused("debugfs's answers do not match DevCell's requests (the disk's "
                             f"metadata may be corrupted): {len(blocks) - 1} of "
                             f"{len(requests)} came back")
    answers = []
    for request, block in zip(requests, blocks, strict=False):
        echo = f"debugfs: {request}\n".encode()
        if not block.startswith(echo):
            raise BackendRefused(f"debugfs's answer to {request} is not in its place")
        answers.append(block[len(echo):])
    return answers


def _read(argv: list[str], *, cwd: Path, timeout: float, what: str) -> bytes:
    with children.reader(argv, cwd=cwd) as proc:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                    raise BackendRefused(f"reading the disk took over {timeout:.0f} s "
                                         f"({what}, ...): its metadata may be corrupted")
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                if size > ANSWER_BYTES:
                    raise BackendRefused(f"the disk answered more than {ANSWER_BYTES} bytes to "
                                         f"one batch ({what}, ...): it says more than it holds")
                chunks.append(chunk)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    return b"".join(chunks)


def entries(answer: bytes, inode: int) -> list[Entry]:
    """A directory's entries from its `ls -p` answer, `.` and `..` left out, for DevCell's own
    disks only (made from a host tree, whose names hold no `/` or NUL): a listing prints
    names raw, so on a guest's disk a name holding `/` and newlines could pass for entries
    (guest disks are read with directory_entries)."""
    out: list[Entry] = []
    pos = 0
    while pos < len(answer) and answer[pos:pos + 1] == b"/":
        found = _ENTRY.match(answer, pos)
        if found is None:
            raise BackendRefused(f"the disk has a name DevCell cannot read safely in directory "
                                 f"inode {inode} (a `/` in it?)")
        pos = found.end()
        ino, mode, uid, gid, name, size = found.groups()
        if name in (b".", b"..") or ino == b"0":
            continue  # inode 0: an unused slot (lost+found's spare room)
        if not name or b"\0" in name:
            raise BackendRefused(f"the disk has an empty name or one holding NUL in directory "
                                 f"inode {inode}")
        out.append(Entry(int(ino), int(mode, 8), int(uid), int(gid), name,
                         int(size) if size else 0))
    if answer[pos:].strip():
        raise BackendRefused(f"the disk's listing of directory inode {inode} holds what "
                             "DevCell cannot read (corrupted?)")
    return out


def inode(answer: bytes, number: int) -> Inode:
    """`stat`'s answer for inode `number`. Owners print signed (2^31 and up as negatives):
    taken back as the unsigned ids they are."""
    links, mode, owner = _LINKS.search(answer), _MODE.search(answer), _OWNER.search(answer)
    times: dict[bytes, int] = {}
    for name, seconds, extra in _TIME.findall(answer):
        times.setdefault(name, _time_ns(int(seconds, 16), int(extra, 16) if extra else 0))
    if links is None or mode is None or owner is None or len(times) != 2:
        raise BackendRefused(f"the disk's inode {number} cannot be read (corrupted?)")
    kind = _TYPES.get(mode.group(1), 0)
    size = int(owner.group(3))
    fast = None
    at = answer.find(_FAST_LINK)
    if at >= 0 and kind == S_IFLNK:
        start = at + len(_FAST_LINK)
        if answer[start + size:start + size + 2] == b'"\n':
            fast = answer[start:start + size]
    return Inode(int(links.group(1)), times[b"atime"], times[b"mtime"], fast,
                 int(mode.group(2), 8) & 0o7777, int(owner.group(1)) & 0xFFFFFFFF,
                 int(owner.group(2)) & 0xFFFFFFFF, kind, size)


def directory_entries(data: bytes, inode: int) -> list[tuple[int, bytes]]:
    """(inode, name) of each entry in a directory's own blocks (`dump` of its inode), read
    as ext4 lays them out: inode (4 bytes), record length (2), name length (1), file type
    (1), then the name, exactly its length, so no name can pass for another entry (a listing
    prints names raw, and one holding `/` and newlines could). `.`, `..`, unused slots and
    the checksum tail are left out; a name with `/` or NUL, or a record that leaves its
    block, is refused. An htree's index blocks read as unused slots."""
    out: list[tuple[int, bytes]] = []
    at = 0
    while at + 8 <= len(data):
        number, length, name_length, _ = struct.unpack_from("<IHBB", data, at)
        if length < 8 + name_length or length % 4 or at + length > len(data):
            raise BackendRefused(f"directory inode {inode} on the disk is damaged (an entry "
                                 f"at byte {at} leaves its block)")
        name = data[at + 8:at + 8 + name_length]
        at += length
        if number == 0 or name in (b".", b".."):
            continue
        if not name or b"/" in name or b"\0" in name:
            raise BackendRefused(f"directory inode {inode} on the disk holds a name with `/` "
                                 "or NUL, which no file system path can carry")
        out.append((number, name))
    return out


def _time_ns(seconds: int, extra: int) -> int:
    """ext4's time: signed 32-bit seconds, extended by the extra field's two epoch bits;
    the rest of the extra field is nanoseconds."""
    signed = seconds - (1 << 32) if seconds & (1 << 31) else seconds
    return (signed + ((extra & 3) << 32)) * 1_000_000_000 + (extra >> 2)


def time_fields(ns: int) -> tuple[str, str]:
    """(seconds, extra) as `set_inode_field` takes them, the inverse of _time_ns."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    low = seconds & 0xFFFFFFFF
    signed = low - (1 << 32) if low & (1 << 31) else low
    epoch = ((seconds - signed) >> 32) & 3
    return f"0x{low:08x}", f"0x{(nanos << 2) | epoch:08x}"
