"""The snapshot archive format: what `snapshot export` writes and `snapshot import` accepts.

A PAX tar stream, readable by any tar, that describes itself:

    devcell-snapshot.json          header: format and version, the Snapshot (name, labels,
                                   spec, consistency), lineage ids, backend, DevCell version
    workspace/...                  the checkpoint's tree: directories (each before what it
                                   holds), regular files, symbolic links, hard links to an
                                   earlier file; times to the nanosecond in PAX records
    sidecars/<name>/...            each sidecar's data saved with the checkpoint (a cell with
                                   spec.sidecars), as the workspace's; only the names the
                                   header lists under `sidecars` (an archive without them has
                                   no such member, and reads as it did before they existed)
    devcell-snapshot.sha256.json   trailer: SHA-256 over the header and every entry
                                   (canonical record + contents), entry and byte counts

The checksum is written last, so a truncated archive has none and a changed byte anywhere
(header, names, modes, times, link targets, contents) makes it differ. It finds damage and
careless edits, not a forger (it is not a signature): import treats every archive as hostile
whatever its checksum says (archive_read).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from devcell.backends.host.ids import is_safe_id
from devcell.errors import ArchiveRefused

FORMAT = "devcell-snapshot"
VERSION = 1
HEADER = "devcell-snapshot.json"
TRAILER = "devcell-snapshot.sha256.json"
ROOT = "workspace"
SIDECARS = "sidecars"
"""The second top directory: `sidecars/<name>/` for each sidecar the header lists."""
SIDECARS_MAX = 64
MTIME = "mtime"
ATIME = "atime"
"""PAX records of the times, written to the nanosecond ("1700000000.123456789"); tar's own
header keeps whole seconds, and Python's tarfile reads the records as floats (which lose the
last digits), so both sides use the record's text."""
ENCODING = "utf-8"
ERRORS = "surrogateescape"
"""Names are bytes on Linux: a name that is not UTF-8 travels as its bytes and comes back so."""
BUFFER = 1 << 20
"""Bytes per read and write (tar's own 10 KiB blocks make Python copy too often)."""
NAME_MAX = 255
PATH_MAX = 4096


class Kind:
    """Entry kinds as the canonical record names them."""

    HEADER = "header"
    DIR = "dir"
    FILE = "file"
    LINK = "hardlink"
    SYMLINK = "symlink"


@dataclass(frozen=True)
class Limits:
    """What one import may cost, whatever its archive claims."""

    entries: int = 1_000_000
    """Members in the tree (names are kept to check duplicates and parents)."""
    total_bytes: int | None = None
    """Bytes of file contents; None: the free space of the destination's filesystem, less
    a margin, so an import never fills the disk."""
    path_bytes: int = 16384
    """Bytes of a member's name (each component at most NAME_MAX)."""
    header_bytes: int = 1 << 20


@dataclass(frozen=True)
class Entry:
    """One member of the tree as the checksum covers it."""

    kind: str
    name: str
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mtime_ns: int = 0
    atime_ns: int = 0
    size: int = 0
    link: str = ""

    def record(self) -> bytes:
        """Canonical bytes of everything but the contents (which follow it in the digest)."""
        return json.dumps([self.kind, self.name, self.mode, self.uid, self.gid, self.mtime_ns,
                           self.atime_ns, self.size, self.link],
                          separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


class Digest:
    """SHA-256 over the canonical records and contents, in archive order."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256(f"{FORMAT}/{VERSION}\n".encode())
        self.entries = 0
        self.bytes = 0

    def entry(self, entry: Entry) -> None:
        self._sha.update(entry.record())
        if entry.kind != Kind.HEADER:
            self.entries += 1

    def content(self, data: bytes) -> None:
        self._sha.update(data)
        self.bytes += len(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def time_text(ns: int) -> str:
    sign, value = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{value // 1_000_000_000}.{value % 1_000_000_000:09d}"


_TIME = re.compile(r"(-?)([0-9]{1,10})(?:\.([0-9]{1,9}))?")


def time_ns(text: str | None) -> int | None:
    """Nanoseconds from a PAX time record, None if it is missing or malformed."""
    found = _TIME.fullmatch(text or "")
    if found is None:
        return None
    value = int(found.group(2)) * 1_000_000_000 + int((found.group(3) or "").ljust(9, "0"))
    return -value if found.group(1) else value


def trailer(digest: Digest) -> bytes:
    return json.dumps({"sha256": digest.hexdigest(), "entries": digest.entries,
                       "bytes": digest.bytes}, sort_keys=True).encode()


@dataclass(frozen=True)
class Header:
    """The header's fields, checked: nothing else of it is used."""

    name: str
    labels: dict[str, str]
    annotations: dict[str, str]
    cell: str
    """The name of the cell the snapshot was taken of (its spec.cell)."""
    consistency: str
    backend: str
    source_snapshot_id: str | None
    source_cell_id: str | None
    parent_snapshot_id: str | None
    """The snapshot the source cell was forked from, if it was a fork."""
    taken_at: str | None
    has_tree: bool
    raw: dict[str, Any]
    sidecars: tuple[str, ...] = ()
    """The sidecars whose data the archive carries under `sidecars/<name>/`."""


def _refuse(message: str) -> ArchiveRefused:
    return ArchiveRefused(f"not a DevCell snapshot archive this version can import: {message}")


def _str(data: dict[str, Any], key: str, *, optional: bool = False, limit: int = 4096
         ) -> str | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise _refuse(f"header field {key} is not a string of at most {limit} characters")
    return value


def _strings(data: dict[str, Any], key: str) -> dict[str, str]:
    value = data.get(key) or {}
    if not isinstance(value, dict) or len(value) > 256 or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= 317 and len(v) <= 4096
            for k, v in value.items()):
        raise _refuse(f"header field {key} is not a small map of strings")
    return dict(value)


def _mapping(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise _refuse(f"{what} is not a mapping")
    return data


def parse_header(raw: bytes) -> Header:
    """The header's fields, or ArchiveRefused naming what is wrong (an unknown format version
    first: a newer DevCell's archive is refused by its version, not by a field it added)."""
    try:
        data = json.loads(raw)
    except ValueError:
        raise _refuse(f"{HEADER} is not JSON") from None
    data = _mapping(data, HEADER)
    if data.get("format") != FORMAT:
        raise _refuse(f"{HEADER} does not name the format {FORMAT!r}")
    version = data.get("formatVersion")
    if version != VERSION:
        raise ArchiveRefused(
            f"snapshot archive format version {version!r} is not one this DevCell reads "
            f"(it reads version {VERSION}); import it with the DevCell that exported it, or a "
            "newer one")
    snapshot = _mapping(data.get("snapshot"), "header field snapshot")
    lineage = _mapping(data.get("lineage") or {}, "header field lineage")
    spec = _mapping(snapshot.get("spec"), "header field snapshot.spec")
    has_tree = data.get("tree")
    if not isinstance(has_tree, bool):
        raise _refuse("header field tree is not true or false")
    return Header(
        sidecars=_sidecars(data), name=str(_str(snapshot, "name", limit=63)),
        labels=_strings(snapshot, "labels"),
        annotations=_strings(snapshot, "annotations"), cell=str(_str(spec, "cell", limit=63)),
        consistency=str(_str(snapshot, "consistency", limit=32)),
        backend=str(_str(data, "backend", limit=32)),
        source_snapshot_id=_str(snapshot, "id", optional=True, limit=128),
        source_cell_id=_str(lineage, "cellId", optional=True, limit=128),
        parent_snapshot_id=_str(lineage, "parentSnapshotId", optional=True, limit=128),
        taken_at=_str(snapshot, "takenAt", optional=True, limit=64),
        has_tree=has_tree, raw=data)


def _sidecars(data: dict[str, Any]) -> tuple[str, ...]:
    """The header's sidecar names: each a safe id (it names a directory), each once."""
    value = data.get(SIDECARS) or []
    if not isinstance(value, list) or len(value) > SIDECARS_MAX or not all(
            isinstance(v, str) and len(v) <= 63 and is_safe_id(v) for v in value) \
            or len(set(value)) != len(value):
        raise _refuse(f"header field {SIDECARS} is not a list of at most {SIDECARS_MAX} "
                      "distinct sidecar names")
    return tuple(value)


def header_bytes(*, name: str, snapshot_id: str, labels: dict[str, str],
                 annotations: dict[str, str], cell: str, cell_id: str | None,
                 parent_snapshot_id: str | None, consistency: str, backend: str,
                 taken_at: str | None, exported_at: str, devcell_version: str,
                 schema_version: int, has_tree: bool, sidecars: tuple[str, ...] = ()
                 ) -> bytes:
    """The header document export writes (`sidecars` only when there are some: such an
    archive is byte for byte what a DevCell without sidecars wrote)."""
    return json.dumps({
        **({SIDECARS: list(sidecars)} if sidecars else {}),
        "format": FORMAT, "formatVersion": VERSION, "devcell": devcell_version,
        "schemaVersion": schema_version, "exportedAt": exported_at, "backend": backend,
        "tree": has_tree,
        "snapshot": {"id": snapshot_id, "name": name, "labels": labels,
                     "annotations": annotations, "spec": {"cell": cell},
                     "consistency": consistency, "takenAt": taken_at},
        "lineage": {"cellId": cell_id, "cell": cell, "parentSnapshotId": parent_snapshot_id},
    }, sort_keys=True, indent=1).encode()
