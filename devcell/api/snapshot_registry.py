"""Snapshots through a registry: `snapshot push SNAP REGISTRY/REPO:TAG` and `snapshot pull REF`.

A snapshot is stored as an OCI artifact (any registry that speaks the distribution API):

    manifest   application/vnd.oci.image.manifest.v1+json, artifactType ARTIFACT_TYPE
    config     CONFIG_TYPE: DevCell's metadata (format, snapshot, cell, lineage, backend,
               the archive's checksum and counts), for people and tools; never trusted
    layer      the snapshot archive `snapshot export` writes (devcell.backends.archives),
               zstd-compressed (LAYER_ZSTD, the default), gzip-compressed (LAYER_GZIP) or
               not (LAYER_TAR)

Push streams the archive straight into a blob upload sent in chunks (memory holds one
chunk, whatever the workspace's size; no temporary file). Pull streams the layer straight
into `snapshot import`'s reader (devcell.api.transfer.import_), so a pulled artifact meets
exactly the checks an imported archive does (names, kinds, links, sizes, checksum) and is
recorded as imported, marked as pulled from REF@digest. Every blob is checked against its
digest as it is read: the layer's last byte reaches the reader only after its digest
matched, and when the reader refuses the archive first, the rest of the blob is read
(bounded) so that a damaged blob is blamed on its digest, not on what the damage looked like.

What is carried is what an archive carries: the workspace tree and the sidecars' data saved
with the checkpoint. A snapshot that keeps a machine's memory is refused (as by export).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from devcell import __version__, names
from devcell.api import transfer
from devcell.backends.archives import format as archive_format
from devcell.backends.oci import client as oci
from devcell.controllers.steps import StepName
from devcell.errors import ArchiveRefused, RegistryUnreachable, UsageError
from devcell.manifests import feature_refs as refs
from devcell.store import db as dbmod
from devcell.store.clock import now

ARTIFACT_TYPE = "application/vnd.devcell.snapshot.v1"
CONFIG_TYPE = "application/vnd.devcell.snapshot.config.v1+json"
LAYER_TAR = "application/vnd.devcell.snapshot.layer.v1.tar"
LAYER_GZIP = "application/vnd.devcell.snapshot.layer.v1.tar+gzip"
LAYER_ZSTD = "application/vnd.devcell.snapshot.layer.v1.tar+zstd"
COMPRESSIONS = {"zstd": LAYER_ZSTD, "gzip": LAYER_GZIP, "none": LAYER_TAR}
SUFFIXES = {"zstd": ".zst", "gzip": ".gz", "none": ""}
MAX_CONFIG = 64 * 1024
DRAIN_LIMIT = 256 * 2**20
"""How much more of a refused layer is read to tell damage (its digest) from a hostile
archive; past it the archive's own refusal is given."""
GZIP_LEVEL = 1
ZSTD_LEVEL = 1
"""Fast levels: a workspace is mostly source and objects that compress well at any level,
and the registry is usually near. zstd level 1 compresses ~40x faster than zlib's gzip
level 1 here (0.09 s against 3.4 s for 20 MiB), so it is the default."""
ZSTD_WINDOW = 1 << 27
"""The largest window a pulled zstd layer may ask for (memory the decompressor may take)."""

Progress = Callable[[int, int | None], None]
"""progress(bytes done, total bytes or None when unknown)."""


def _no_progress(done: int, total: int | None) -> None:
    return None


@dataclass(frozen=True)
class Pushed:
    name: str
    ref: str
    digest: str
    """The manifest's digest: `pull REF@digest` gets exactly this."""
    layer: str
    layer_bytes: int
    entries: int
    bytes: int
    op_id: str


@dataclass(frozen=True)
class Pulled:
    imported: transfer.Imported
    ref: str
    digest: str


def _parse(text: str, *, push: bool) -> refs.Ref:
    if "@" in text.split("/", 1)[0]:  # user:password@registry/...: never echoed
        raise UsageError("a registry reference holding credentials (USER[:PASSWORD]@) is "
                         "refused and not shown; docker login to the registry instead (its "
                         "credentials are the Docker client's)")
    try:
        ref = refs.parse(text)
    except ValueError:
        ref = None
    if ref is None or ref.kind is not refs.Kind.OCI:
        raise UsageError(f"{names.printable(text[:300])} is not a registry reference; expected "
                         "REGISTRY/REPOSITORY:TAG (e.g. registry.example.com/team/snaps:v1)"
                         + ("" if push else " or REGISTRY/REPOSITORY@sha256:DIGEST"))
    if push and ref.digest:
        raise UsageError(f"{names.printable(text[:300])}: a push names a tag, not a digest "
                         "(the registry gives the digest)")
    return ref


def _shown(ref: refs.Ref) -> str:
    return f"{ref.registry}/{ref.repository}:{ref.tag or 'latest'}" if not ref.digest \
        else f"{ref.registry}/{ref.repository}@{ref.digest}"


# -- push ---------------------------------------------------------------------------------


class _Counted:
    """What the archive is written to: compressed (or not) into the upload, counting the
    archive's own bytes for progress."""

    def __init__(self, upload: oci.Upload, compression: str, progress: Progress) -> None:
        self.upload = upload
        self.compressor: Any = None
        if compression == "gzip":
            self.compressor = gzip.GzipFile(fileobj=cast(BinaryIO, upload), mode="wb",
                                            compresslevel=GZIP_LEVEL, mtime=0)
        elif compression == "zstd":
            import zstandard

            self.compressor = zstandard.ZstdCompressor(
                level=ZSTD_LEVEL, write_checksum=True).stream_writer(cast(BinaryIO, upload),
                                                                     closefd=False)
        self.written = 0
        self.progress = progress

    def write(self, data: bytes) -> int:
        if self.compressor is not None:
            self.compressor.write(data)
        else:
            self.upload.write(data)
        self.written += len(data)
        self.progress(self.written, None)
        return len(data)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        if self.compressor is not None:
            self.compressor.close()


def push(state_dir: Path, snapshot: str, target: str, *, compression: str = "zstd",
         progress: Progress = _no_progress) -> Pushed:
    """Store snapshot `snapshot` at `target` (REGISTRY/REPOSITORY[:TAG]) as an artifact."""
    ref = _parse(target, push=True)
    if compression not in COMPRESSIONS:
        raise UsageError(f"compression {compression!r} is not one of "
                         f"{', '.join(COMPRESSIONS)}")
    shown = _shown(ref)
    db = dbmod.open_database(state_dir)
    try:
        snap = transfer.exportable(db, snapshot, "push")
        started = time.perf_counter()
        client = oci.Client(oci.endpoint(ref.registry), ref.repository,
                            f"snapshot push to {names.printable(shown)}",
                            unreachable=RegistryUnreachable, refused=RegistryUnreachable,
                            push=True)
        upload = client.upload()
        sink = _Counted(upload, compression, progress)
        written, carried = transfer.write_archive(state_dir, db, snap, cast(BinaryIO, sink))
        sink.close()
        layer, layer_bytes = upload.commit()
        origin = snap.status.get("origin", {})
        config = json.dumps({
            "format": archive_format.FORMAT, "formatVersion": archive_format.VERSION,
            "devcell": __version__, "pushedAt": now(),
            "snapshot": {"id": snap.id, "name": snap.name, "cell": snap.spec.get("cell"),
                         "labels": snap.labels, "consistency": snap.extra.get("consistency"),
                         "takenAt": snap.extra.get("taken_at")},
            "lineage": {"cellId": snap.extra.get("cell_id") or origin.get("cellId"),
                        "parentSnapshotId": origin.get("parentSnapshotId")},
            "archive": {"sha256": written.sha256, "entries": written.entries,
                        "bytes": written.bytes, "compression": compression,
                        "sidecars": list(carried)},
        }, sort_keys=True).encode()
        config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
        if not client.has_blob(config_digest):
            small = client.upload()
            small.write(config)
            small.commit()
        manifest = {
            "schemaVersion": 2, "mediaType": oci.OCI_MANIFEST, "artifactType": ARTIFACT_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": COMPRESSIONS[compression], "digest": layer,
                        "size": layer_bytes, "annotations": {
                            "org.opencontainers.image.title":
                                f"{snap.name}.tar{SUFFIXES[compression]}"}}],
            "annotations": {"dev.devcell.snapshot.name": snap.name,
                            "org.opencontainers.image.created": now()},
        }
        digest = client.put_manifest(ref.tag or "latest",
                                     json.dumps(manifest, sort_keys=True).encode(),
                                     oci.OCI_MANIFEST)
        outputs = {"ref": shown, "digest": digest, "layer": layer, "layerBytes": layer_bytes,
                   "sha256": written.sha256, "entries": written.entries,
                   "bytes": written.bytes,
                   **({"sidecars": ",".join(carried)} if carried else {})}
        op_id = transfer.record_operation(db, snap.id, snap.name, "push",
                                          StepName.PUSH_CHECKPOINT, outputs, started)
        return Pushed(snap.name, shown, digest, layer, layer_bytes, written.entries,
                      written.bytes, op_id)
    finally:
        db.close()


# -- pull ---------------------------------------------------------------------------------


class _Verified(io.RawIOBase):
    """A blob as the registry serves it, read at most `size` bytes, its digest checked as
    its last byte is read (before that byte is handed on)."""

    def __init__(self, got: Any, digest: str, size: int, subject: str,
                 progress: Progress) -> None:
        self.got, self.digest, self.size, self.subject = got, digest, size, subject
        self.sha = hashlib.sha256()
        self.seen = 0
        self.progress = progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.size - self.seen
        if left <= 0:
            return 0
        view = memoryview(buffer)[:min(len(buffer), left, oci.CHUNK)]
        try:
            n = self.got.readinto(view)
        except OSError as exc:
            raise RegistryUnreachable(f"{self.subject}: reading blob {self.digest} failed "
                                      f"({exc}); nothing imported") from None
        if not n:
            raise ArchiveRefused(f"{self.subject}: the registry's blob {self.digest} ends "
                                 f"after {self.seen} of the {self.size} bytes its manifest "
                                 "names; nothing imported")
        self.sha.update(view[:n])
        self.seen += n
        self.progress(self.seen, self.size)
        if self.seen == self.size:
            self.check()
        return int(n)

    def check(self) -> None:
        got = "sha256:" + self.sha.hexdigest()
        if got != self.digest:
            raise ArchiveRefused(f"{self.subject}: the registry served blob {self.digest} "
                                 f"with other content (it gives {got}): damaged or altered "
                                 "in the registry; nothing imported")

    def drain(self, limit: int) -> bool:
        """Read what is left (if at most `limit` bytes), checking the digest; whether it
        was read to the end."""
        if self.size - self.seen > limit:
            return False
        block = bytearray(oci.CHUNK)
        while self.seen < self.size:
            self.readinto(block)
        return True


def _layer(manifest: dict[str, Any], subject: str) -> tuple[str, int, str]:
    """(digest, size, media type) of the artifact's one snapshot layer, after checking it
    is a DevCell snapshot at all."""
    config = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    kind = manifest.get("artifactType") or (config or {}).get("mediaType")
    if kind not in (ARTIFACT_TYPE, CONFIG_TYPE):
        raise ArchiveRefused(f"{subject} is not a DevCell snapshot (its artifact type is "
                             f"{names.printable(str(kind)[:100])!r}, not {ARTIFACT_TYPE}); "
                             "nothing imported")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or len(layers) != 1 or not isinstance(layers[0], dict):
        raise ArchiveRefused(f"{subject}: its manifest must name exactly one layer; nothing "
                             "imported")
    layer = layers[0]
    digest, size, media = layer.get("digest"), layer.get("size"), layer.get("mediaType")
    if media not in COMPRESSIONS.values():
        raise ArchiveRefused(f"{subject}: its layer's media type "
                             f"{names.printable(str(media)[:100])!r} is not one this DevCell "
                             f"reads ({', '.join(COMPRESSIONS.values())}); nothing imported")
    if not isinstance(digest, str) or not oci.DIGEST.match(digest) or not isinstance(
            size, int) or isinstance(size, bool) or size < 0:
        raise ArchiveRefused(f"{subject}: its layer must name a sha256 digest and a size; "
                             "nothing imported")
    return digest, size, str(media)


def _config(client: oci.Client, manifest: dict[str, Any], subject: str) -> dict[str, Any]:
    config = manifest.get("config")
    digest = config.get("digest") if isinstance(config, dict) else None
    size = config.get("size") if isinstance(config, dict) else None
    if not isinstance(digest, str) or not oci.DIGEST.match(digest) or not isinstance(
            size, int) or isinstance(size, bool) or not 0 <= size <= MAX_CONFIG:
        raise ArchiveRefused(f"{subject}: its config must name a sha256 digest and a size "
                             f"up to {MAX_CONFIG >> 10} KiB; nothing imported")
    buffer = io.BytesIO()
    client.blob(digest, size, buffer)
    try:
        data = json.loads(buffer.getvalue())
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("format") != archive_format.FORMAT:
        raise ArchiveRefused(f"{subject}: its config does not name the format "
                             f"{archive_format.FORMAT!r}; nothing imported")
    if data.get("formatVersion") != archive_format.VERSION:
        raise ArchiveRefused(
            f"{subject}: snapshot archive format version "
            f"{names.printable(str(data.get('formatVersion'))[:20])} is not one this DevCell "
            f"reads (it reads version {archive_format.VERSION}); pull it with a newer DevCell")
    return data


def _decompressed(buffered: Any, media: str
                  ) -> tuple[BinaryIO, tuple[type[BaseException], ...]]:
    """The archive's bytes from the layer's, and what a damaged layer makes them raise."""
    failures: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
    if media == LAYER_GZIP:
        return cast(BinaryIO, gzip.GzipFile(fileobj=buffered, mode="rb")), failures
    if media == LAYER_ZSTD:
        import zstandard

        reader = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW).stream_reader(
            buffered, closefd=False)
        return cast(BinaryIO, reader), (*failures, zstandard.ZstdError)
    return cast(BinaryIO, buffered), failures


def pull(state_dir: Path, source: str, *, name: str | None = None,
         progress: Progress = _no_progress) -> Pulled:
    """Bring the snapshot artifact at `source` (REGISTRY/REPOSITORY:TAG or @sha256:...) in
    as a Ready snapshot, as `snapshot import` would its archive. A lost database is refused
    before the registry is asked."""
    from devcell.store import guard

    ref = _parse(source, push=False)
    guard.database_exists(state_dir)
    shown = names.printable(_shown(ref))
    subject = f"snapshot {shown}"
    client = oci.Client(oci.endpoint(ref.registry), ref.repository, subject,
                        unreachable=RegistryUnreachable, refused=ArchiveRefused)
    digest, manifest = client.manifest(ref.reference)
    layer, size, media = _layer(manifest, subject)
    _config(client, manifest, subject)
    pinned = f"{ref.registry}/{ref.repository}@{digest}"
    origin = f"{_shown(ref)}@{digest}" if not ref.digest else pinned
    with client.open("blobs", layer) as got:
        raw = _Verified(got, layer, size, subject, progress)
        buffered = io.BufferedReader(raw, oci.CHUNK)
        stream, failures = _decompressed(buffered, media)
        caught: tuple[type[BaseException], ...] = (ArchiveRefused, *failures)

        def finish() -> None:
            raw.drain(size)  # what follows tar's end (padding): read and checked too

        try:
            done = transfer.import_(state_dir, stream, name=name, origin=origin,
                                    finish=finish, pulled=True)
        except caught as exc:
            if raw.seen < size:  # refused before the blob's end: damage, or a hostile archive?
                raw.drain(DRAIN_LIMIT)  # damage: its digest's refusal is raised here
            if isinstance(exc, ArchiveRefused):
                raise
            raise ArchiveRefused(f"{subject}: its layer is not {media} data ({exc}); "
                                 "nothing imported") from None
    return Pulled(done, _shown(ref), digest)
