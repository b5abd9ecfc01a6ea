"""A tree's digest for restore tests: every entry's type, mode, owner, size, mtime and
contents (or link target), root included, by relative path; never following a link."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

Entry = tuple[str, int, int, int, int, int, str]


def entries(root: Path) -> dict[str, Entry]:
    found: dict[str, Entry] = {}
    for directory, dirs, files in os.walk(root):
        base = Path(directory)
        for name in [".", *dirs, *files] if base == root else [*dirs, *files]:
            path = base / name if name != "." else base
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                kind, body = "f", hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                kind, body = "l", os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                kind, body = "d", ""
            else:
                kind, body = "o", ""
            size = st.st_size if kind != "d" else 0
            found[str(path.relative_to(root))] = (kind, st.st_mode, st.st_uid, st.st_gid, size,
                                                  st.st_mtime_ns, body)
    return found


def digest(root: Path) -> str:
    text = repr(sorted(entries(root).items())).encode()
    return hashlib.sha256(text).hexdigest()


def inodes(root: Path) -> set[tuple[int, int]]:
    """(device, inode) of every regular file under root."""
    out = set()
    for directory, _, files in os.walk(root):
        for name in files:
            st = os.lstat(Path(directory) / name)
            if stat.S_ISREG(st.st_mode):
                out.add((st.st_dev, st.st_ino))
    return out
