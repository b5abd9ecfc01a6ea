"""Helpers for snapshot archive tests: a tree with every kind of entry, its exact state, and
archives crafted member by member (with a correct checksum, so only the safety checks can
refuse them)."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from devcell.backends.archives import format as fmt
from devcell.backends.archives.format import Digest, Entry, Kind

HEADER = fmt.header_bytes(
    name="moved", snapshot_id="snap_source01", labels={"team": "core"}, annotations={},
    cell="api", cell_id="cell_source01", parent_snapshot_id=None, consistency="filesystem",
    backend="container", taken_at="2026-01-01T00:00:00Z", exported_at="2026-01-02T00:00:00Z",
    devcell_version="0.1.0", schema_version=4, has_tree=True)


def make_tree(root: Path) -> None:
    """Contents, modes, times to the nanosecond, links of every kind, a non-UTF-8 name."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "empty-dir").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n")
    (root / "src" / "pkg" / "data.bin").write_bytes(os.urandom(300_000))
    (root / "empty").write_bytes(b"")
    (root / "group-writable").write_text("shared\n")
    os.chmod(root / "group-writable", 0o666)
    (root / "secret").write_text("only me\n")
    os.chmod(root / "secret", 0o600)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o4755)  # setuid: stripped on import
    os.link(root / "src" / "main.py", root / "empty-dir" / "main-link.py")
    os.symlink("../src/main.py", root / "src" / "pkg" / "relative-link")
    os.symlink("/usr/bin/python3", root / "python")  # the cell's file, never the host's
    os.symlink("does/not/exist", root / "dangling")
    (root / os.fsdecode(b"caf\xe9-latin1")).write_text("not utf-8\n")
    os.chmod(root / "src" / "pkg", 0o711)
    for i, path in enumerate(sorted(root.rglob("*"), reverse=True)):
        os.utime(path, ns=(1_600_000_000_123_456_789 + i, 1_700_000_000_987_654_321 + i),
                 follow_symlinks=False)
    os.utime(root, ns=(1_600_000_000_000_000_001, 1_700_000_000_000_000_001))


def tree_state(root: Path, *, strip_setuid: bool = False) -> dict[str, Any]:
    """Everything a round trip must keep, by relative path (hard links as shared groups)."""
    state: dict[str, Any] = {}
    inodes: dict[int, list[str]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        rel = os.fsencode(path.relative_to(root)).decode("latin-1")
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if strip_setuid:
            mode &= ~(stat.S_ISUID | stat.S_ISGID)
        item: dict[str, Any] = {"type": stat.S_IFMT(st.st_mode), "mode": mode,
                                "mtime": st.st_mtime_ns}
        if stat.S_ISREG(st.st_mode):
            item["sha"] = hashlib.sha256(path.read_bytes()).hexdigest()
            item["nlink"] = st.st_nlink
            inodes.setdefault(st.st_ino, []).append(rel)
        elif stat.S_ISLNK(st.st_mode):
            item["target"] = os.readlink(path)
        state[rel] = item
    state["<hard links>"] = sorted(sorted(g) for g in inodes.values() if len(g) > 1)
    return state


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", *, mode: int = 0o644,
           link: str = "", size: int | None = None, mtime_ns: int = 1_700_000_000_000_000_000
           ) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if size is None else size
    info.mtime = mtime_ns // 10**9
    info.pax_headers = {fmt.MTIME: fmt.time_text(mtime_ns), fmt.ATIME: fmt.time_text(mtime_ns)}
    return info, data


ROOT = member("workspace", tarfile.DIRTYPE, mode=0o755)
_KINDS = {tarfile.DIRTYPE: Kind.DIR, tarfile.REGTYPE: Kind.FILE, tarfile.SYMTYPE: Kind.SYMLINK,
          tarfile.LNKTYPE: Kind.LINK}


def craft(members: list[tuple[tarfile.TarInfo, bytes]], *, header: bytes = HEADER,
          trailer: bytes | None = None) -> bytes:
    """An archive of exactly these members, its trailer's checksum computed as export would
    (unless `trailer` is given), so it passes the checksum and meets the safety checks."""
    digest = Digest()
    digest.entry(Entry(Kind.HEADER, fmt.HEADER, 0o600, size=len(header)))
    digest.content(header)
    digest.bytes = 0
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(fmt.HEADER)
        info.size, info.mode = len(header), 0o600
        tar.addfile(info, io.BytesIO(header))
        for info, data in members:
            kind = _KINDS.get(info.type, "other")
            digest.entry(Entry(kind, info.name, info.mode & 0o7777, info.uid, info.gid,
                               fmt.time_ns(info.pax_headers.get(fmt.MTIME)) or 0,
                               fmt.time_ns(info.pax_headers.get(fmt.ATIME)) or 0,
                               info.size if kind == Kind.FILE else 0, info.linkname))
            digest.content(data if info.isreg() else b"")
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        end = trailer if trailer is not None else fmt.trailer(digest)
        info = tarfile.TarInfo(fmt.TRAILER)
        info.size = len(end)
        tar.addfile(info, io.BytesIO(end))
    return out.getvalue()
