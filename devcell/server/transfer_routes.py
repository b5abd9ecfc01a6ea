"""GET /api/v1/snapshots/NAME/archive and POST /api/v1/snapshots/import: `devcell snapshot
export` and `snapshot import` through the API (api.transfer, the same code).

An export is streamed: the archive is written by a thread of its own (api.transfer.export,
the bytes the local command writes) into a bounded queue the answer's body is read from, so
the daemon never holds an archive whole, and a client that stops reading stops the writer.
Its operation is recorded once the last byte was written, before the body ends, under the id
the answer's DevCell-Operation header named first: a client that read the body to its end
reads the export's figures (sha256, entries, bytes, skipped) there. A failure once the body
began ends it without its last chunk: the client sees an archive cut short, never a whole one.

An import's body is spooled to an owner-only file in the state directory (`api-imports/`),
at most MAX_ARCHIVE_BYTES and never closer than SPOOL_MARGIN to a full disk (413 past
either, the file removed), then read by api.transfer.import_ exactly as `snapshot import
FILE` reads a file: a hostile archive is refused with the same words, nothing recorded.

Authorization: an export is the `export` verb on the snapshot's cell (a developer: their own
cells' and those shared with them, rule developer-own / developer-shared; a snapshot with no
cell here, imported or of a deleted cell, only an admin's); an import creates a snapshot
that is its caller's (rule developer-creates-own: a viewer is refused before the body is
read). Both are heavy (a walk of a workspace, gigabytes through the disk): at most
MAX_TRANSFERS at once, one of them a user's who is not an admin.

`snapshot push` and `pull` (POST /api/v1/snapshots/NAME/push, /snapshots/pull) reach a
registry with the server's own engine logins (its user's ~/.docker/config.json), which are
the whole team's: only an admin asks them (rule registry-admin), refused before the body is
read; they hold a transfer's slot too.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shutil
import threading
from pathlib import Path
from typing import Any

import anyio

from devcell.names import printable

MAX_TRANSFERS = 4
"""Exports and imports served at once."""
MAX_TRANSFERS_PER_USER = 1
"""Of those, what one user who is not an admin may have at once."""
MAX_ARCHIVE_BYTES = 8 << 30
"""The largest archive an import takes through the API (8 GiB; DEVCELL_API_ARCHIVE_BYTES in
the daemon's environment sets a smaller bound): run a larger one's import on the server's
machine."""
SPOOL_MARGIN = 256 << 20
"""Free space an import's spool leaves on the state directory's filesystem."""
SPOOL = "api-imports"
"""The state directory's folder of imports being received (owner-only)."""
PIECE = 256 << 10
"""Bytes an export's writer gathers before handing them to the answer."""
QUEUE = 16
"""Pieces held for the answer before the writer waits: at most ~4 MiB (and one 1 MiB
write of tar's) of an archive in memory per export."""
ARCHIVE_MEDIA = "application/x-tar"
OPERATION_HEADER = "DevCell-Operation"
"""The export's answer header: the id its operation is recorded under once the archive is
whole."""
MAX_ORIGIN = 4096
"""An import's `origin` (the client's file, recorded as the archive it came from)."""


class Failed(Exception):
    """The export failed once its answer had begun: the body ends without its last chunk."""


def exportable(state_dir: Path, principal: Any, name: str) -> str:
    """The snapshot `name` (NotFound), if `principal` may export it (Forbidden, naming the
    rule) and it has a checkpoint an archive carries (409 otherwise, as the CLI says it);
    its name."""
    from devcell.api import transfer
    from devcell.auth import policy, resources
    from devcell.server.problems import HttpProblem
    from devcell.store import objects
    from devcell.store.db import Database

    db = Database(state_dir, create=False)
    try:
        snap = objects.require(db.conn, "Snapshot", name)
        policy.require(principal, policy.Verb.export,
                       resources.recorded(db.conn, "Snapshot", snap.id))
        try:
            transfer.exportable(db, snap.id)
        except (transfer.NotReady, transfer.NotExportable) as exc:
            raise HttpProblem(409, "not-exportable", "The snapshot cannot be exported",
                              str(exc)) from None
        return snap.name
    finally:
        db.close()


class Export:
    """One export's writer thread and the queue its archive crosses to the answer."""

    def __init__(self, state_dir: Path, principal: Any, name: str) -> None:
        from devcell.store import operations

        self.state_dir, self.principal, self.name = state_dir, principal, name
        self.op_id = operations.new_operation_id()
        self.queue: queue.Queue[bytes | None | Failed] = queue.Queue(QUEUE)
        self.stopped = threading.Event()
        self.pending = bytearray()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="devcell-api-export").start()

    def stop(self) -> None:
        self.stopped.set()

    # the stream api.transfer.export writes to
    def write(self, data: bytes) -> int:
        if len(data) >= PIECE and not self.pending:
            self._put(bytes(data))
        else:
            self.pending += data
            if len(self.pending) >= PIECE:
                self.flush()
        return len(data)

    def flush(self) -> None:
        if self.pending:
            piece, self.pending = bytes(self.pending), bytearray()
            self._put(piece)

    def _put(self, item: bytes | None | Failed) -> None:
        from devcell.server.streams import put_until_stopped

        put_until_stopped(self.queue, item, self.stopped)

    def _run(self) -> None:
        from devcell.api import transfer
        from devcell.log import logger
        from devcell.store import actor

        try:
            with actor.acting_as(self.principal.user):
                transfer.export(self.state_dir, self.name, self, op_id=self.op_id)  # type: ignore[arg-type]
            self._put(None)
        except BrokenPipeError:  # the client left (or the answer ended): nothing recorded
            return
        except Exception as exc:  # noqa: BLE001  (the answer has begun: logged, then cut)
            logger.warning("API export of snapshot {} failed: {}: {}", printable(self.name),
                           type(exc).__name__, printable(str(exc)))
            with contextlib.suppress(BrokenPipeError):  # the client left meanwhile
                self._put(Failed(str(exc)))

    async def pieces(self, still_allowed: Any) -> Any:
        """The archive's pieces as they are written; Failed raised when the writer failed,
        or (over TCP, checked each second) `still_allowed()` says the token was revoked or
        expired: the body is then cut short."""
        import time

        checked = time.monotonic()
        while True:
            if time.monotonic() - checked >= 1.0:
                if not await still_allowed():
                    raise Failed("the export's token was revoked or expired")
                checked = time.monotonic()
            try:
                piece = self.queue.get_nowait()
            except queue.Empty:
                await anyio.sleep(0.01)
                continue
            if piece is None:
                return
            if isinstance(piece, Failed):
                raise piece
            yield piece


def archive_bound(given: str) -> int:
    """The import bound the daemon's environment gives (bytes, at most MAX_ARCHIVE_BYTES;
    empty or not a number: MAX_ARCHIVE_BYTES)."""
    if given.isascii() and given.isdigit() and len(given) <= 15:
        return min(int(given), MAX_ARCHIVE_BYTES)
    return MAX_ARCHIVE_BYTES


def spool_file(state_dir: Path, most: int) -> tuple[int, Path, int]:
    """A new owner-only file in the spool folder: (its descriptor, its path, the most bytes
    it may take: `most`, or less when the disk would keep under SPOOL_MARGIN)."""
    from devcell.store import db

    folder = state_dir / SPOOL
    db.ensure_private_dir(folder)
    _remove_abandoned(folder)
    path = folder / f".import-{secrets.token_hex(8)}.tar"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    free = shutil.disk_usage(folder).free
    return fd, path, max(0, min(most, free - SPOOL_MARGIN))


ABANDONED_S = 2 * 3600
"""A spooled file not written for this long was left by a daemon that died mid-import (a
live upload writes at least every DEVCELL_API_BODY_SECONDS, at most an hour)."""


def _remove_abandoned(folder: Path) -> None:
    import contextlib
    import time

    for left in folder.glob(".import-*.tar"):
        with contextlib.suppress(OSError):
            if time.time() - left.lstat().st_mtime > ABANDONED_S:
                left.unlink()


def write_spooled(fd: int, data: bytes, folder: Path, size: int, most: int) -> None:
    """Write the next piece of a spooled archive (`size` bytes with it), refused (413) once the
    disk would keep under SPOOL_MARGIN: the bound spool_file gave was the free space when the
    spool was opened, which the other transfers at once (and every other writer of the
    state directory's filesystem) spend too."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if shutil.disk_usage(folder).free < SPOOL_MARGIN:
        raise too_large(size - len(data), most)


def too_large(bound: int, most: int) -> Exception:
    """The 413 of an archive over `bound` bytes (the spool's limit; `most` the server's)."""
    from devcell.server.problems import HttpProblem

    why = (f"an archive imported through the API is at most {most} bytes"
           if bound >= most else
           f"the server's disk has room for {bound} bytes of archive (it keeps "
           f"{SPOOL_MARGIN >> 20} MiB free)")
    return HttpProblem(413, "body-too-large", "Content too large",
                       f"{why}; nothing was imported (run `devcell snapshot import` on the "
                       "server's machine for a larger one)")


def name_free(state_dir: Path, name: str | None) -> None:
    """Refuse, before the archive is received, a valid name given that is taken (409 in
    the import's words): a client would otherwise send gigabytes to learn it. The import
    checks it again (and the archive's own name) once the archive is spooled."""
    from devcell import names
    from devcell.errors import Conflict
    from devcell.store import objects
    from devcell.store.db import Database

    if name is None or names.name_problem(name):
        return  # the archive's name, or one the import refuses with its located problem
    db = Database(state_dir, create=False)
    try:
        if objects.get(db.conn, "Snapshot", name) is not None:
            raise Conflict(f'snapshot "{name}" already exists; import under another name '
                           "with --name")
    finally:
        db.close()


def import_spooled(state_dir: Path, principal: Any, spool: Path, name: str | None,
                   origin: str) -> dict[str, Any]:
    """Import the spooled archive as `snapshot import` imports a file (api.transfer.import_),
    in the caller's name; what it imported."""
    from devcell.api import transfer
    from devcell.store import actor

    with actor.acting_as(principal.user), open(spool, "rb") as source:
        done = transfer.import_(state_dir, source, name=name, origin=origin)
    return {"name": done.name, "id": done.id, "backend": done.backend, "sha256": done.sha256,
            "files": done.files, "bytes": done.bytes, "operation": done.op_id}


def import_query(params: Any) -> tuple[str | None, str]:
    """(the name to import under, None: the archive's; the origin to record: the client's
    file, or `-`, standard input) from the query, checked for size only (the name as the
    local import checks it, later)."""
    from devcell.errors import UsageError

    name = params.get("name")
    origin = params.get("origin") or "-"
    if name is not None and not 0 < len(name) <= 253:
        raise UsageError("name: 1 to 253 characters (a snapshot's name)")
    if len(origin) > MAX_ORIGIN or "\x00" in origin:
        raise UsageError(f"origin: at most {MAX_ORIGIN} characters, no NUL (the archive's "
                         "file on the client)")
    return name, origin


MAX_REGISTRY_BODY = 8 << 10
"""A push's or pull's body: a reference, a name, a compression."""


def push(state_dir: Path, principal: Any, name: str, data: bytes) -> dict[str, Any]:
    """`snapshot push` (api.snapshot_registry) with the server's registry logins, once
    `principal` may (an admin: rule registry-admin); what it pushed."""
    from devcell.api import snapshot_registry
    from devcell.auth import policy
    from devcell.errors import UsageError
    from devcell.server import bodies
    from devcell.store import actor

    policy.require(principal, policy.Verb.registry, policy.ResourceRef("Snapshot", name))
    body = bodies.json_object(data, "a push", ["target", "compression"],
                              "target (REGISTRY/REPOSITORY[:TAG]) and compression (zstd, "
                              "gzip or none)")
    target, compression = body.get("target"), body.get("compression", "zstd")
    if not isinstance(target, str) or not 0 < len(target) <= 1024:
        raise UsageError("a push: target must be a registry reference, REGISTRY/REPOSITORY"
                         "[:TAG]")
    if not isinstance(compression, str):
        raise UsageError("a push: compression must be zstd, gzip or none")
    with actor.acting_as(principal.user):
        done = snapshot_registry.push(state_dir, name, target, compression=compression)
    return {"name": done.name, "ref": done.ref, "digest": done.digest, "layer": done.layer,
            "layerBytes": done.layer_bytes, "entries": done.entries, "bytes": done.bytes,
            "operation": done.op_id}


def pull(state_dir: Path, principal: Any, data: bytes) -> dict[str, Any]:
    """`snapshot pull` (api.snapshot_registry) with the server's registry logins, once
    `principal` may (an admin: rule registry-admin); what it imported."""
    from devcell.api import snapshot_registry
    from devcell.auth import policy
    from devcell.errors import UsageError
    from devcell.server import bodies
    from devcell.store import actor

    policy.require(principal, policy.Verb.registry, policy.ResourceRef("Snapshot"))
    body = bodies.json_object(data, "a pull", ["source", "name"],
                              "source (REGISTRY/REPOSITORY:TAG or @sha256:...) and name")
    source, name = body.get("source"), body.get("name")
    if not isinstance(source, str) or not 0 < len(source) <= 1024:
        raise UsageError("a pull: source must be a registry reference, REGISTRY/REPOSITORY"
                         ":TAG or @sha256:DIGEST")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 253):
        raise UsageError("a pull: name must be a snapshot's name")
    with actor.acting_as(principal.user):
        pulled = snapshot_registry.pull(state_dir, source, name=name)
    done = pulled.imported
    return {"name": done.name, "id": done.id, "backend": done.backend, "sha256": done.sha256,
            "files": done.files, "bytes": done.bytes, "operation": done.op_id,
            "ref": pulled.ref, "digest": pulled.digest}
