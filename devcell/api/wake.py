"""Wake on access: `devcell ssh`, `ssh-proxy`, `exec` and `port-forward` to a sleeping cell
start it first, as `devcell cell start` does, and say what came back.

A vm cell asleep with its memory saved resumes it (its processes run on). If that resume
fails (its restore-machine step, and only that: a failure elsewhere leaves the saved machine
for the next start), the saved machine is set aside and the cell is booted cold from its kept
disks and workspace: the caller gets in either way, and is told its processes were not
restored.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from devcell.api import cells
from devcell.controllers.steps import StepName
from devcell.errors import BackendError
from devcell.store import db as dbmod
from devcell.store import objects, operations


@dataclass(frozen=True)
class Woken:
    seconds: float
    restored: bool
    """Its processes and memory came back (a vm cell's saved machine resumed)."""
    note: str
    """What came back, in words (its status.lastStart.note)."""
    fallback: str | None = None
    """Why the saved machine was not resumed, when that was tried and failed."""


def asleep(phase: str) -> bool:
    return phase == objects.Phase.SLEEPING


def wake(state_dir: Path, cell: str, *, by: str) -> Woken:
    """Start the sleeping cell `cell` for `by` (ssh, exec, port-forward); BackendError when
    it could not be started at all."""
    began = time.monotonic()
    report = cells.start(state_dir, cell, by=by, reason=f"woken by {by}")
    fallback = None
    if not report.ok:
        fallback = set_machine_aside(state_dir, cell)
        if fallback is None:
            raise BackendError(f"waking cell {cell} for {by} failed: {_failure(report)}")
        report = cells.start(state_dir, cell, by=by, reason=f"woken by {by}, booted cold")
        if not report.ok:
            raise BackendError(f"waking cell {cell} for {by} failed, also by a cold boot: "
                               f"{_failure(report)}")
    last = _last_start(state_dir, cell)
    note = str(last.get("note") or "started")
    return Woken(round(time.monotonic() - began, 2), restored=bool(last.get("restored")),
                 note=note, fallback=fallback)


def _failure(report: cells.Report) -> str:
    for found in report.converged.objects:
        if found.message:
            return found.message
    return "see devcell describe cell"


def _last_start(state_dir: Path, cell: str) -> dict[str, object]:
    db = dbmod.open_database(state_dir)
    try:
        record = objects.require(db.conn, "Cell", cell)
        return dict(record.status.get("lastStart") or {})
    finally:
        db.close()


def set_machine_aside(state_dir: Path, cell: str, why: str | None = None) -> str | None:
    """After a failed wake of a cell asleep with its memory saved: record that resuming it
    failed, so the next start boots cold (the controller plans a start, not a resume). The
    reason, or None when the cell had no saved machine to blame."""
    db = dbmod.open_database(state_dir)
    try:
        with db.write() as conn:
            record = objects.require(conn, "Cell", cell)
            sleep = dict(record.status.get("sleep") or {})
            if not sleep.get("machine") or sleep.get("restoreFailed"):
                return None
            if not _restore_failed(conn, record.id):
                return None  # it failed elsewhere: the saved machine may still resume
            ready = record.condition("Ready") or {}
            why = why or str(ready.get("message") or record.status.get("message")
                             or "it failed")
            sleep["restoreFailed"] = why
            objects.write_status(conn, record, phase=record.phase,
                                 status=dict(record.status, sleep=sleep),
                                 observed_generation=record.observed_generation)
            return why
    finally:
        db.close()


def _restore_failed(conn: sqlite3.Connection, object_id: str) -> bool:
    """The cell's latest operation failed in its restore-machine step: the saved machine
    itself would not resume. Any other failure (an engine gone, a full disk, a hook) says
    nothing against the saved machine, and setting it aside would lose its processes."""
    latest = operations.for_object(conn, object_id, limit=1)
    if not latest:
        return False
    return any(step.name == StepName.RESTORE_MACHINE and step.status == operations.StepStatus.FAILED
               for step in operations.steps(conn, latest[0]["id"]))
