"""`devcell snapshot restore`: put a cell's workspace back to one of its snapshots, in place.

The request is checked in full before anything is written (the snapshot Ready, the cell its
own and alive, its backend able to restore), then recorded on the cell as desired state,
with the safety snapshot's id and name chosen now, and converged like any verb: the cell
controller plans the restore as one operation (devcell.controllers.restore), held at an
approval gate when the workspace changed since its last snapshot. A dry run says what would
happen (the steps, the safety snapshot, the approval, what would be replaced) and writes
nothing.

A snapshot restores into the cell it was taken of, or into a fork of it (a fork may go back to
the snapshot it was forked from). Putting one cell's snapshot into another cell's workspace is
refused: that is a fork (`devcell cell fork`), which keeps both cells' histories true.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from devcell import backends, ids, names
from devcell.api import converging
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.backends.base import CellRef, Changes
from devcell.backends.host import live_folder
from devcell.controllers import prune_keep
from devcell.controllers import restore as restore_controller
from devcell.controllers import snapshot as snapshot_controller
from devcell.errors import CapabilityMissing, Conflict, DevCellError
from devcell.store import clock, objects, operations, restores, volumes
from devcell.store import db as dbmod
from devcell.store.desired import Change
from devcell.store.objects import Phase

KIND = "Cell"
SAFETY_SUFFIX = "-pre-restore-"


class RestoreRefused(DevCellError):
    """The restore cannot be asked for as given (nothing was recorded); the message says why."""


@dataclass(frozen=True)
class Preview:
    """What a restore does, as planned now (a dry run returns only this)."""

    cell: str
    snapshot: str
    safety: str | None
    running: bool
    changed_since: str | None
    """The cell's latest snapshot the changes are counted from (None: none was taken)."""
    changes: Changes | None
    """What restoring replaces that no snapshot holds (None: the backend cannot say)."""
    needs_approval: bool


@dataclass(frozen=True)
class Restored:
    preview: Preview
    report: Report | None = None
    """How converging ended (None for a dry run)."""
    operation: str | None = None
    """The restore's operation, once it ran (or is waiting at its gate)."""
    done: bool = False
    awaiting: str | None = None
    """Why the restore waits for approval (what it would replace), when it does."""
    failed: str | None = None
    """Why the restore failed, when it did."""


def restore(state_dir: Path, snapshot: str, *, cell: str | None = None, safety: bool = True,
            dry_run: bool = False, options: Options = DEFAULTS,
            hooks: Hooks = NO_HOOKS) -> Restored:
    """Restore `snapshot` into its cell (or `cell`, which must be that cell or a fork of it)."""
    db = dbmod.open_database(state_dir)
    try:
        snap, target = check(db, snapshot, cell)
        backend_name = str(target.extra["backend"])
        preview = _preview(db, state_dir, snap, target, backend_name, safety, options)
        if dry_run:
            return Restored(preview)
        started = clock.now()
        approved = _waiting(db, snap, target, options)
        if approved is not None:  # the same restore waited: approved, it goes on
            preview = dataclasses.replace(preview, safety=approved.safety)
            change = Change(KIND, target.name, "restore approved", target.id, True)
            report = converging.finish(db, Recorded((change,)), trigger="cli", options=options,
                                       hooks=hooks, keys=[(KIND, target.id)])
            if report.converged.holder is not None and options.wait:
                _wait_for_daemon(db, target.id, options)
            return outcome(db, preview, report, target.id, "")
        request = restores.new_request(
            snapshot_id=snap.id, snapshot=snap.name,
            safety_id=ids.new_id("snap") if safety else None, safety=preview.safety)
        with db.write() as conn:
            fresh = objects.require(conn, KIND, target.id)
            pending = restores.of(fresh)
            if pending is not None and pending.safety_id is not None and safety:
                # Asked again after an interruption: the same safety snapshot (its checkpoint
                # may be complete already, and holds the workspace as it was before).
                request = restores.new_request(
                    snapshot_id=snap.id, snapshot=snap.name, safety_id=pending.safety_id,
                    safety=pending.safety)
            restores.record(conn, fresh, request)
        change = Change(KIND, target.name, "restore requested", target.id, needs_reconcile=True)
        report = converging.finish(db, Recorded((change,)), trigger="cli", options=options,
                                   hooks=hooks, keys=[(KIND, target.id)])
        if report.converged.holder is not None and options.wait:
            _wait_for_daemon(db, target.id, options)
        return outcome(db, preview, report, target.id, started)
    finally:
        db.close()


def check(db: dbmod.Database, snapshot: str,
          cell: str | None) -> tuple[objects.ObjectRecord, objects.ObjectRecord]:
    """The snapshot and the cell it would restore into (`cell`, else its own), or the error
    that refuses the restore; nothing written (the API authorizes on the cell it returns)."""
    snap = objects.require(db.conn, "Snapshot", snapshot)
    shown = names.printable(snap.name)
    if snap.phase != Phase.READY or not snap.extra.get("checkpoint_ref") or snap.deleting:
        raise RestoreRefused(f'snapshot "{shown}" is {snap.phase}, not Ready: it has no '
                             "checkpoint to restore")
    source = snapshot_controller.source_cell(db.conn, snap)
    successor = _successor(db, snap, source)
    if cell is None and successor is not None:
        cell = successor.id  # a pruned cell's files, back into the cell its manifest made again
    if cell is None:
        if source is None or source.deleted_at is not None:
            why = "was imported" if source is None else f'was taken of cell "{source.name}", ' \
                                                        "which is deleted"
            raise RestoreRefused(f'snapshot "{shown}" {why}; give the cell to restore into '
                                 "with --cell (or fork it: a Cell with "
                                 f"spec.workspace.from.snapshot: {shown})")
        target = source
    else:
        target = objects.require(db.conn, KIND, cell)
    own = source is not None and (source.id == target.id or (
        successor is not None and successor.id == target.id))
    if not own and target.extra.get("forked_from") != snap.id:
        whose = (f'cell "{names.printable(source.name)}"'
                 + (" (deleted)" if source.deleted_at is not None else "")
                 if source is not None else "another state directory")
        raise RestoreRefused(
            f'snapshot "{shown}" was taken of {whose}, not of cell '
            f'"{names.printable(target.name)}" (nor is that cell forked from it): a cell is '
            "restored only to its own snapshots or the one it was forked from; to give it "
            f"another cell's files, fork: devcell cell fork ... --snapshot {shown}")
    if target.deleting:
        raise Conflict(f'cell "{names.printable(target.name)}" is being deleted')
    if volumes.for_cell(db.conn, target.id) is None:
        raise RestoreRefused(f'cell "{names.printable(target.name)}" has no workspace yet; '
                             "nothing to restore into")
    folder = live_folder.of_spec(target.spec)
    if folder is not None:
        raise RestoreRefused(f'cell "{names.printable(target.name)}": ' +
                             live_folder.RESTORE_REFUSED.format(folder=folder.shown))
    backend = str(target.extra["backend"])
    if not backends.restores(backend):
        raise CapabilityMissing(f"the {backend} backend cannot restore a workspace in place; "
                                "snapshot restore is not available for its cells (fork the "
                                f"snapshot into a new cell instead: devcell cell fork "
                                f"{names.printable(target.name)} --snapshot "
                                f"{names.printable(snap.name)} --name NEW)")
    return snap, target


def _successor(db: dbmod.Database, snap: objects.ObjectRecord,
               source: objects.ObjectRecord | None) -> objects.ObjectRecord | None:
    """For a pruned cell's safety snapshot: the live cell of the same name and backend made
    since (its manifest came back), which may take the files the prune kept."""
    if snap.source != prune_keep.SOURCE or source is None or source.deleted_at is None:
        return None
    live = objects.get(db.conn, KIND, source.name)
    if live is None or live.extra.get("backend") != source.extra.get("backend"):
        return None
    return live


def _waiting(db: dbmod.Database, snap: objects.ObjectRecord, target: objects.ObjectRecord,
             options: Options) -> restores.Request | None:
    """Whether the same restore already waits at its gate and `--approve` approves it now;
    Conflict when another operation of the cell waits (resume or cancel it first)."""
    waiting = operations.suspended_for(db.conn, target.id)
    if waiting is None:
        return None
    pending = restores.of(target)
    same = waiting["action"] == "restore" and pending is not None and \
        pending.snapshot_id == snap.id
    if same and options.approve and waiting["reason"] == "AwaitingApproval":
        with db.write() as conn:
            operations.approve(conn, waiting["id"], converging.APPROVED_BY)
        return pending
    raise Conflict(f'cell "{names.printable(target.name)}" has operation {waiting["id"]} '
                   f'({waiting["action"]}) waiting: `devcell op resume {waiting["id"]}` '
                   f'or `devcell op cancel {waiting["id"]}` first')


def _safety_name(db: dbmod.Database, cell: str) -> str:
    stem = cell[:names.MAX_NAME_LENGTH - len(SAFETY_SUFFIX) - 4].rstrip("-") + SAFETY_SUFFIX
    n = 1
    while objects.get(db.conn, "Snapshot", f"{stem}{n}") is not None:
        n += 1
    return f"{stem}{n}"


def _preview(db: dbmod.Database, state_dir: Path, snap: objects.ObjectRecord,
             target: objects.ObjectRecord, backend_name: str, safety: bool,
             options: Options) -> Preview:
    volume = volumes.for_cell(db.conn, target.id)
    assert volume is not None
    bases = restore_controller.baselines(db.conn, target)
    backend = backends.load(backend_name, state_dir)
    try:
        ref = CellRef(target.id, target.name, target.spec, volume.id)
        running = backend.observe(ref).running
        found = restore_controller.unsaved(backend, volume.id, bases, snap.id)
    finally:
        backend.close()
    base, changes = found if found is not None else (bases[0][1] if bases else None, Changes())
    return Preview(target.name, snap.name, _safety_name(db, target.name) if safety else None,
                   running, base, changes,
                   needs_approval=found is not None and not options.approve)


def _wait_for_daemon(db: dbmod.Database, cell_id: str, options: Options) -> None:
    """A daemon holds the lease and carries the restore out: wait until the request is done
    (cleared) or its operation waits at the gate (approved here if --approve was given)."""
    deadline = time.monotonic() + options.timeout
    while time.monotonic() < deadline:
        if carried_out(db, cell_id, approve=options.approve):
            return
        time.sleep(0.1)


def carried_out(db: dbmod.Database, cell_id: str, *, approve: bool) -> bool:
    """One look at a restore the daemon carries out: done (its request cleared), or waiting
    at its gate (approved now when `approve`: then not yet)."""
    record = objects.get(db.conn, KIND, cell_id)
    if record is None or restores.of(record) is None:
        return True
    op = operations.suspended_for(db.conn, cell_id)
    if op is not None and op["reason"] == "AwaitingApproval":
        if not approve:
            return True
        if not op["resume_input"]:
            with db.write() as conn:
                operations.approve(conn, op["id"], converging.APPROVED_BY)
    return False


def outcome(db: dbmod.Database, preview: Preview, report: Report, cell_id: str,
            started: str) -> Restored:
    """How the restore asked for at `started` ended so far (its operation, done, waiting at
    its gate or failed)."""
    ops = [r for r in operations.for_object(db.conn, cell_id)
           if r["action"] == "restore" and r["created_at"] >= started]
    op = ops[0] if ops else None
    record = objects.get(db.conn, KIND, cell_id)
    pending = record is not None and restores.of(record) is not None
    outcome = (record.status.get("restore") or {}) if record is not None else {}
    failed = str(op["message"]) if op is not None and op["status"] == "Failed" else None
    awaiting = (str(op["message"]) if op is not None and op["status"] == "Suspended"
                and op["reason"] == "AwaitingApproval" else None)
    done = op is not None and not pending and not failed and not outcome.get("failed")
    return Restored(preview, report, str(op["id"]) if op is not None else None, done,
                    awaiting=awaiting, failed=failed or outcome.get("failed"))
