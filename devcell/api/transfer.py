"""Moving a snapshot between state directories and machines: `snapshot export` and `import`.

Export streams a Ready snapshot's checkpoint, read through its backend, into a self-describing
archive (devcell.backends.archives.format). Import is the other way, and treats the archive as
hostile input: it is checked in full (checksum, names, kinds, sizes) while its tree is written
into a temporary directory beside the checkpoints, which is renamed into place only once
everything passed; the Snapshot row, Ready and with its origin, is recorded after, in one
transaction with its operation. A refused archive changes nothing: no checkpoint, no row, no
operation. The imported snapshot has no cell here; a fork declares it as any other
(`spec.workspace.from.snapshot`). A container cell's snapshot carries its sidecars' data too
(`sidecars/<name>/`, each checked as the workspace is), so a fork of the imported snapshot
starts its sidecars with it. An archive carries files, never a machine's memory, so a
`machine` snapshot is not exported: its disk alone lacks what the guest had not yet written
back (that is in its memory), which no archive could honestly call filesystem-consistent.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from devcell import __version__, backends, failpoints, ids, names, safeio
from devcell.backends.archives import format as archive_format
from devcell.backends.archives import read as archive_read
from devcell.backends.archives import write as archive_write
from devcell.backends.base import Backend, Consistency
from devcell.backends.host import ids as host_ids
from devcell.controllers import snapshot as snapshot_controller
from devcell.controllers.steps import StepName
from devcell.errors import ArchiveRefused, Conflict, DevCellError, ManifestError, Problem
from devcell.manifests import model, validate
from devcell.store import actor, desired, events, migrations, objects, operations, storage_lock
from devcell.store import db as dbmod
from devcell.store.clock import now
from devcell.store.objects import Phase

KIND = "Snapshot"
SOURCE = "import"
"""The `source` recorded for an imported snapshot (never under a path `apply --prune` owns)."""


class NotReady(DevCellError):
    """The snapshot has no checkpoint yet (or failed to take one): nothing to export."""


class NotExportable(DevCellError):
    """The snapshot keeps a machine's memory, which an archive cannot carry."""


@dataclass(frozen=True)
class Exported:
    name: str
    sha256: str
    entries: int
    bytes: int
    skipped: int
    """FIFOs, sockets and device nodes the checkpoint held: archives carry no special files."""
    op_id: str


@dataclass(frozen=True)
class Imported:
    name: str
    id: str
    backend: str
    sha256: str
    files: int
    bytes: int
    op_id: str


def export(state_dir: Path, snapshot: str, out: Path | BinaryIO, *,
           op_id: str | None = None) -> Exported:
    """Write snapshot `snapshot` as an archive to the file `out` (made whole or not at all:
    written beside it and renamed) or to an open binary stream; its operation recorded
    once the archive was written whole (as `op_id`, when given: the API names it before
    the archive's first byte)."""
    db = dbmod.open_database(state_dir)
    try:
        snap = exportable(db, snapshot)
        started = time.perf_counter()
        with safeio.destination(out) as stream:
            written, carried = write_archive(state_dir, db, snap, stream)
        outputs = {"file": str(out) if isinstance(out, Path) else "-", "sha256": written.sha256,
                   "entries": written.entries, "bytes": written.bytes,
                   "skipped": written.skipped,
                   **({"sidecars": ",".join(carried)} if carried else {})}
        op_id = record_operation(db, snap.id, snap.name, "export",
                                  StepName.EXPORT_CHECKPOINT, outputs, started, op_id=op_id)
        return Exported(snap.name, written.sha256, written.entries, written.bytes,
                        written.skipped, op_id)
    finally:
        db.close()


def exportable(db: dbmod.Database, snapshot: str, verb: str = "export"
               ) -> objects.ObjectRecord:
    """The snapshot `snapshot`, if it has a checkpoint an archive can carry (NotReady,
    NotExportable otherwise, saying what `verb` could not do)."""
    snap = objects.require(db.conn, KIND, snapshot)
    if snap.phase != Phase.READY or not snap.extra.get("checkpoint_ref"):
        raise NotReady(f'snapshot "{names.printable(snap.name)}" is {snap.phase}, not Ready: '
                       f"it has no checkpoint to {verb} yet")
    if snap.extra.get("consistency") == Consistency.MACHINE:
        raise NotExportable(
            f'snapshot "{names.printable(snap.name)}" keeps a machine\'s memory, which an '
            "archive cannot carry, and its disk alone lacks what the guest had not written "
            f"back yet; {verb} a filesystem snapshot of the cell instead (devcell snapshot "
            "create CELL --name NAME, taken with the guest's filesystem frozen)")
    return snap


def write_archive(state_dir: Path, db: dbmod.Database, snap: objects.ObjectRecord,
                  stream: BinaryIO) -> tuple[archive_write.Written, tuple[str, ...]]:
    """Stream the archive of `snap` (exportable) to `stream`, its checkpoint read through
    its backend; (what was written, the sidecars carried)."""
    cell = snapshot_controller.source_cell(db.conn, snap)
    backend_name = snapshot_controller.backend_of(snap, cell)
    backend = backends.load(backend_name, state_dir)
    try:
        tree = backend.checkpoint_files(snap.id)
        try:
            sidecars = backend.checkpoint_sidecars(snap.id)
            carried = archive_write.sidecar_names(sidecars)
            header = _header(snap, cell, backend_name, tree is not None, carried)
            return archive_write.write(stream, header, tree, sidecars, carried), carried
        finally:
            backend.release_checkpoint_files(snap.id)
    finally:
        backend.close()


def _header(snap: objects.ObjectRecord, cell: objects.ObjectRecord | None, backend: str,
            has_tree: bool, sidecars: tuple[str, ...]) -> bytes:
    origin = snap.status.get("origin", {})
    return archive_format.header_bytes(
        name=snap.name, snapshot_id=snap.id, labels=snap.labels, annotations=snap.annotations,
        cell=str(snap.spec["cell"]),
        cell_id=cell.id if cell is not None else origin.get("cellId"),
        parent_snapshot_id=(cell.extra.get("forked_from") if cell is not None
                            else origin.get("parentSnapshotId")),
        consistency=str(snap.extra.get("consistency")), backend=backend,
        taken_at=snap.extra.get("taken_at"), exported_at=now(),
        devcell_version=__version__, schema_version=migrations.LATEST, has_tree=has_tree,
        sidecars=sidecars)


def import_(state_dir: Path, source: BinaryIO, *, name: str | None = None,
            origin: str = "-", limits: archive_format.Limits = archive_read.DEFAULT_LIMITS,
            finish: Callable[[], None] | None = None, pulled: bool = False) -> Imported:
    """Bring the archive read from `source` in as a Ready snapshot (`name`, else the name it
    was exported under). ArchiveRefused, and nothing changed, for a damaged or hostile one.
    `finish()` is called once the archive was read and checked, before anything is recorded
    (a pull reads its blob to the end there and checks its digest; raising refuses it).
    `pulled`: `origin` is a registry's REF@digest, and the snapshot is recorded as pulled."""
    archive = archive_read.Archive(source, limits)  # a bad header: refused before the store
    header = archive.header
    db = dbmod.open_database(state_dir)
    try:
        _check(db, header, header.name if name is None else name, given=name is not None,
               origin=origin)
        name = header.name if name is None else name
        backend = _backend(state_dir, header)
        snapshot_id = ids.new_id("snap")
        started = time.perf_counter()
        done: list[archive_read.Read] = []

        def fill(directory: Path | None, *, sidecars: Path | None = None) -> tuple[int, int]:
            done.append(archive.extract(directory, sidecars))
            if finish is not None:
                finish()
            return done[0].files, done[0].bytes

        try:
            with storage_lock.creating(state_dir):  # placed and recorded before gc judges it
                _remove_dead_temporaries(state_dir)
                info, read, op_id = _place(db, backend, snapshot_id, name, header, fill, origin,
                                           started, done, pulled)
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: nothing placed, and said so
            _record_interrupted(db, snapshot_id, name, origin, exc, started, pulled)
            raise
        finally:
            backend.close()
        return Imported(name, snapshot_id, header.backend, read.sha256, read.files, read.bytes,
                        op_id)
    finally:
        db.close()


def _remove_dead_temporaries(state_dir: Path) -> None:
    """A rerun of an import or pull killed mid-copy removes the half tree it left (its
    owner is dead; a live importer's is kept), instead of leaving it to the next gc."""
    from devcell.reconciler import recovery

    recovery.remove_dead_temporaries(state_dir)


def _place(db: dbmod.Database, backend: Backend, snapshot_id: str, name: str,
           header: archive_format.Header, fill: Any, origin: str, started: float,
           done: list[archive_read.Read], pulled: bool = False
           ) -> tuple[Any, archive_read.Read, str]:
    """The checkpoint placed and its snapshot recorded (the caller holds the storage lock):
    (the backend's checkpoint info, what was read, the operation id)."""
    info = backend.import_checkpoint(snapshot_id, cell_id=_safe(header.source_cell_id)
                                     or "imported", cell_name=header.cell, fill=fill)
    read = done[0]
    try:
        failpoints.hit("import.before-record")
        op_id = _record(db, snapshot_id, name, header, info.outputs(), read, origin, started,
                        pulled)
    except BaseException:  # Ctrl-C and SIGTERM too: nothing is left that no row names
        backend.delete_checkpoint(snapshot_id)  # the row was not recorded
        raise
    return info, read, op_id


def _safe(value: str | None) -> str | None:
    """An id from the archive, kept only if it is one (it is shown and stored)."""
    ok = value is not None and ids.looks_like_id(value) and host_ids.is_safe_id(value)
    return value if ok else None


def _check(db: dbmod.Database, header: archive_format.Header, name: str, *, given: bool,
           origin: str) -> None:
    """What can be refused before a byte of the tree is written: the name (the one given
    with --name, else the archive's, each blamed on where it came from), the manifest
    fields the archive brings (validated as an applied Snapshot's would be)."""
    problem = names.name_problem(name)
    if problem and given:
        raise ManifestError([Problem("<command line>", problem, kind=KIND, name=name[:40],
                                     field="--name")])
    if problem:
        shown = names.printable(name[:63])
        raise ManifestError([Problem(
            "standard input" if origin == "-" else origin,
            f"the archive's snapshot name {shown!r} is not valid here ({problem}); import it "
            "under another name with --name NAME")])
    document = {"apiVersion": "devcell.dev/v1alpha1", "kind": KIND,
                "metadata": {"name": name, "labels": header.labels,
                             "annotations": header.annotations},
                "spec": {"cell": header.cell}}
    if objects.get(db.conn, KIND, name) is not None:  # before the validator: it may be
        # compiled and kept in the state directory, which a refused import leaves as it was
        raise Conflict(f'snapshot "{name}" already exists; import under another name with '
                       "--name")
    # The cache of a state that has its hash key already: a refused import makes no key.
    if not validate.is_valid_fast(KIND, document, desired.validator_place_of(db.state_dir)):
        raise ArchiveRefused("archive refused, nothing imported: its snapshot's labels, "
                             "annotations or cell name are not valid for a Snapshot")


def _backend(state_dir: Path, header: archive_format.Header) -> Backend:
    if header.backend not in backends.REGISTRY:
        raise ArchiveRefused(f"archive refused, nothing imported: it was exported from "
                             f"backend {header.backend!r}, which this DevCell does not have")
    caps = backends.capabilities(header.backend)
    if header.consistency != caps.snapshot_consistency or \
            header.has_tree != caps.workspace_files:
        raise ArchiveRefused(
            f"archive refused, nothing imported: it holds a {header.consistency!r} checkpoint "
            f"{'with' if header.has_tree else 'without'} files, which backend "
            f"{header.backend} does not take ({caps.snapshot_consistency})")
    return backends.load(header.backend, state_dir)


def _record(db: dbmod.Database, snapshot_id: str, name: str, header: archive_format.Header,
            checkpoint: dict[str, Any], read: archive_read.Read, origin: str,
            started: float, pulled: bool = False) -> str:
    spec = {"cell": header.cell}
    verb = "pulled" if pulled else "imported"
    key = db.hash_key
    status = {
        "conditions": objects.set_condition(
            [], "Ready", "True", verb.capitalize(), f"checkpoint {verb} from {origin}"),
        "checkpoint": checkpoint,
        "origin": {"kind": snapshot_controller.IMPORTED, "backend": header.backend,
                   "archive": origin, "sha256": read.sha256,
                   "snapshotId": _safe(header.source_snapshot_id),
                   "snapshot": header.name, "cell": header.cell,
                   "cellId": _safe(header.source_cell_id),
                   "parentSnapshotId": _safe(header.parent_snapshot_id),
                   "takenAt": header.taken_at, "importedAt": now(),
                   **({"pulledFrom": origin} if pulled else {})},
    }
    outputs = {"archive": origin, "sha256": read.sha256, "files": read.files,
               "bytes": read.bytes, "checkpoint": str(checkpoint.get("checkpoint")),
               **({"sidecars": ",".join(header.sidecars)} if header.sidecars else {})}
    with db.write() as conn:
        if objects.get(conn, KIND, name) is not None:
            raise Conflict(f'snapshot "{name}" already exists; import under another name '
                           "with --name")
        objects.insert(
            conn, kind=KIND, name=name, spec=spec, labels=header.labels,
            annotations=header.annotations, spec_hash=model.spec_hash(spec, key),
            manifest_hash=model.manifest_hash(spec, header.labels, header.annotations, key),
            source=SOURCE, phase=Phase.READY, object_id=snapshot_id,
            extra={"cell_id": None, "owner": actor.current(),  # the importer's
                   "consistency": str(checkpoint.get("consistency")),
                   "checkpoint_ref": str(checkpoint.get("checkpoint")),
                   "taken_at": header.taken_at or now()})
        record = objects.get(conn, KIND, snapshot_id)
        assert record is not None
        objects.write_status(conn, record, phase=Phase.READY, status=status,
                             observed_generation=record.generation)
        events.record(conn, kind=KIND, object_id=snapshot_id, name=name,
                      reason=verb.capitalize(),
                      message=f"{verb} from {origin} (snapshot {header.name} of cell "
                              f"{header.cell}, sha256 {read.sha256[:16]}...)")
        return _operation(conn, snapshot_id, name, "pull" if pulled else "import",
                          StepName.IMPORT_CHECKPOINT, outputs, started)


def _operation(conn: Any, object_id: str, name: str, action: str, step: StepName,
               outputs: dict[str, Any], started: float, *, error: str | None = None,
               op_id: str | None = None) -> str:
    """A finished operation of one step, as the history of a verb that runs no plan (Failed,
    reason Interrupted, with `error`)."""
    op_id = op_id or operations.new_operation_id()
    operations.create(conn, op_id=op_id, object_kind=KIND, object_id=object_id,
                      object_name=name, action=action, trigger="cli", generation=1,
                      step_names=[step])
    operations.start_step(conn, op_id, 0, step)
    operations.finish_step(conn, op_id, 0, ok=error is None, outputs=outputs, error=error,
                           duration_ms=(time.perf_counter() - started) * 1000)
    if error is None:
        operations.finish(conn, op_id, status=operations.OpStatus.SUCCEEDED)
    else:
        operations.finish(conn, op_id, status=operations.OpStatus.FAILED, reason="Interrupted",
                          message=error, failed_step=step)
    return op_id


def _record_interrupted(db: dbmod.Database, snapshot_id: str, name: str, origin: str,
                        exc: KeyboardInterrupt, started: float, pulled: bool = False) -> None:
    """An import stopped by a signal: its operation, Failed, says that nothing was imported
    (best effort: a state database that cannot record leaves the message to the CLI)."""
    signal_name = str(getattr(exc, "signal_name", "") or "Ctrl-C")
    try:
        with db.write() as conn:
            _operation(conn, snapshot_id, name, "pull" if pulled else "import",
                       StepName.IMPORT_CHECKPOINT, {"archive": origin}, started,
                       error=f"interrupted ({signal_name}); nothing was imported")
    except DevCellError:
        pass


def record_operation(db: dbmod.Database, object_id: str, name: str, action: str,
                      step: StepName, outputs: dict[str, Any], started: float, *,
                      op_id: str | None = None) -> str:
    with db.write() as conn:
        return _operation(conn, object_id, name, action, step, outputs, started, op_id=op_id)
