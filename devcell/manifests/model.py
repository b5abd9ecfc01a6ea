"""What a validated manifest is: pure data, no I/O."""

from __future__ import annotations

import hashlib
from typing import Any

from devcell.manifests.canonical import canonical_json
from devcell.records import Record, field

Path = tuple[str | int, ...]
"""A field path inside a document: keys and list indexes."""


def field_path(path: Path) -> str:
    """spec.mounts[0].hostPath: how every message names a field."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def digest(value: Any) -> str:
    """A short content hash of JSON-able data; equal data gives equal digests."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:20]


def spec_hash(spec: dict[str, Any], key: bytes) -> str:
    """The stored spec hash (generation detection): secrets keyed, so a spec without any
    hashes as it always did."""
    from devcell.manifests import secrets

    return digest(secrets.keyed(spec, key))


def manifest_hash(spec: dict[str, Any], labels: dict[str, str], annotations: dict[str, str],
                  key: bytes) -> str:
    from devcell.manifests import secrets

    return digest([secrets.keyed(spec, key), labels, annotations])


class SourceFile(Record):
    """A manifest file as read from disk (or stdin): its bytes and their digest."""

    display: str
    """The path as the user gave it, for messages."""
    key: str
    """Absolute path, or "-" for stdin: what the store records as the object's source."""
    data: bytes
    digest: str


class Manifest(Record):
    """One validated, defaulted object from a manifest file."""

    kind: str
    name: str
    spec: dict[str, Any]
    labels: dict[str, str]
    annotations: dict[str, str]
    file: str
    source: str
    line: int
    positions: dict[Path, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)
    resource_version: int | None = None
    """metadata.resourceVersion when given (get's output): the recorded one it must match."""
    owner: str | None = None
    """metadata.owner when given (a cell's): else the owner is who creates it, and a later
    apply keeps the recorded one. Not in the manifest hash: get's output, which names the
    owner, re-applies as unchanged; recording compares it with the recorded owner."""

    def spec_hash(self, key: bytes) -> str:
        """Changes when the spec changes; secrets seen only through an HMAC under `key`."""
        return spec_hash(self.spec, key)

    def manifest_hash(self, key: bytes) -> str:
        """Changes when anything the user wrote changes (spec, labels, annotations)."""
        return manifest_hash(self.spec, self.labels, self.annotations, key)

    def where(self, *path: str | int) -> tuple[int, int | None]:
        """Line and column of `path` (or of its nearest recorded ancestor)."""
        key: tuple[str | int, ...] = tuple(path)
        while True:
            if key in self.positions:
                line, col = self.positions[key]
                return line, col
            if not key:
                return self.line, None
            key = key[:-1]
