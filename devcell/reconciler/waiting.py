"""Wait for objects to converge, as recorded by whoever reconciles them (daemon or inline).

Never trusts a stale condition: an object counts as Ready only when its observedGeneration
has caught up with its generation, and a cell only once what a user asked of it (`cell
restart`, `cell rerun-hooks`: store/asks.py) is done, so such a verb waiting for a daemon
does not return before the daemon did it. Polls `PRAGMA data_version`, which changes only
when another connection commits, so an idle wait costs almost nothing.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell.controllers.plan import resume_command
from devcell.errors import DevCellError
from devcell.store import guard, objects
from devcell.store.db import Database


@dataclass(frozen=True)
class Outcome:
    done: bool
    failed: str | None = None
    detail: str = ""


def check(db: Database, kind: str, object_id: str, *, condition: str = "Ready",
          want: str = "True", fail_fast: bool = True) -> Outcome:
    record = objects.get(db.conn, kind, object_id, include_deleted=True)
    if condition == "delete":
        gone = record is None or record.deleted_at is not None
        if not gone and fail_fast:
            from devcell.store import operations

            op = operations.suspended_for(db.conn, object_id)
            if op is not None and op["reason"] == "AwaitingApproval":
                return Outcome(False, failed=f"operation {op['id']} {op['message']}; approve it "
                                             f"with `{resume_command(op['id'], op['object_name'])}`")
        return Outcome(gone, detail="deleted" if gone else f"phase {record.phase if record else '?'}")
    if record is None or record.deleted_at is not None:
        return Outcome(False, failed="it was deleted")
    if fail_fast:
        from devcell.store import operations

        op = operations.suspended_for(db.conn, object_id)
        if op is not None and op["reason"] == "AwaitingApproval":
            return Outcome(False, failed=f"operation {op['id']} {op['message']}; approve it with "
                                         f"`{resume_command(op['id'], op['object_name'])}`")
    return judge(kind, record.generation, record.observed_generation, record.phase,
                 record.status, condition=condition, want=want, fail_fast=fail_fast)


def judge(kind: str, generation: int, observed_generation: int | None, phase: str,
          status: dict[str, Any], *, condition: str = "Ready", want: str = "True",
          fail_fast: bool = True) -> Outcome:
    """Whether a recorded object's `condition` has the status `want`, from its record's
    fields alone (also what `devcell --server URL wait` reads from the API's document)."""
    found = [c for c in status.get("conditions") or [] if isinstance(c, dict)
             and c.get("type") == condition]
    cond = found[0] if found else {}
    # The condition speaks for this generation once it was observed, or once its reconcile
    # failed (a failed create leaves Ready=False without observing the generation).
    current = generation in (observed_generation, status.get("failedGeneration"))
    asked = kind == "Cell" and condition == "Ready" and status.get("asked")
    if current and cond.get("status") == want and not asked:
        return Outcome(True)
    detail = (f"{condition}={cond.get('status', 'Unknown')} ({cond.get('reason', 'no reason yet')}: "
              f"{cond.get('message', '')}), observed generation {observed_generation} "
              f"of {generation}")
    if asked:  # `cell restart` or `rerun-hooks` recorded and not carried out yet
        detail += f"; asked and not yet done: {', '.join(sorted(asked))}"
    if fail_fast and phase == objects.Phase.FAILED \
            and status.get("failedGeneration") == generation:
        return Outcome(False, failed=cond.get("message") or "failed", detail=detail)
    if fail_fast and kind == "Snapshot" and phase == objects.Phase.EXPIRED:
        # its ttl ran out and it is deleted: it never observes another generation (an apply
        # that set a ttl already past waited through --timeout, then said "timed out")
        return Outcome(False, failed=f"it expired ({cond.get('message') or 'its ttl ran out'})",
                       detail=detail)
    if fail_fast and cond.get("reason") in ("BackendUnavailable", "CellGone"):
        return Outcome(False, failed=cond.get("message"), detail=detail)
    return Outcome(False, detail=detail)


@dataclass(frozen=True)
class Unmet:
    """Why a key is not done: it failed (`timed_out` False), or the time ran out first."""

    message: str
    timed_out: bool = False


def wait_for(db: Database, keys: list[tuple[str, str]], *, timeout: float,
             condition: str = "Ready", want: str = "True", fail_fast: bool = True,
             started: float | None = None) -> dict[tuple[str, str], str]:
    """Block until every key is done (its `condition` has the status `want`); return key ->
    why it failed or is not done yet."""
    unmet = wait_until(db, keys, timeout=timeout, condition=condition, want=want,
                       fail_fast=fail_fast, started=started)
    return {key: why.message for key, why in unmet.items()}


def wait_until(db: Database, keys: list[tuple[str, str]], *, timeout: float,
               condition: str = "Ready", want: str = "True", fail_fast: bool = True,
               started: float | None = None) -> dict[tuple[str, str], Unmet]:
    """wait_for, telling a failure from a timeout (a caller reports them differently).
    `started` (time.monotonic()) counts the timeout from an earlier moment: the caller already
    waited part of it (for the object to be created)."""
    deadline = (time.monotonic() if started is None else started) + timeout
    pending = list(dict.fromkeys(keys))
    failures: dict[tuple[str, str], Unmet] = {}
    last_version = None
    delay = 0.002
    while pending:
        version = db.data_version()
        if version != last_version:
            last_version = version
            still = []
            for key in pending:
                outcome = check(db, *key, condition=condition, want=want, fail_fast=fail_fast)
                if outcome.failed:
                    failures[key] = Unmet(outcome.failed)
                elif not outcome.done:
                    still.append(key)
            pending = still
            delay = 0.002
        if not pending:
            break
        if time.monotonic() >= deadline:
            for key in pending:
                outcome = check(db, *key, condition=condition, want=want, fail_fast=False)
                failures[key] = Unmet(f"timed out after {timeout:.3g}s: {outcome.detail}",
                                      timed_out=True)
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return failures


def wait_for_operation(db: Database, op_id: str, *, timeout: float) -> sqlite3.Row | None:
    """Block until operation `op_id` has Succeeded or Failed; its row, or None at the timeout.

    Used when a daemon resumes an approved operation: the caller waits for that operation, not
    for its object's Ready condition (a resumed delete never makes its object Ready).
    """
    from devcell.store import operations

    finished = (operations.OpStatus.SUCCEEDED, operations.OpStatus.FAILED)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        op = operations.get(db.conn, op_id)
        if op is not None and op["status"] in finished:
            return op
        time.sleep(0.02)
    return None


def wait_for_object(state_dir: Path, kind: str, name: str, *, timeout: float
                    ) -> tuple[Database, objects.ObjectRecord] | None:
    """Block until `kind` `name` exists (the state directory too): the open database and the
    object, or None at the timeout.

    What `devcell wait` does before its condition: a GitOps user saves a file and runs `wait`
    at once, before the daemon has recorded the object (or even created the state directory).
    """
    deadline = time.monotonic() + timeout
    db: Database | None = None
    delay = 0.01
    while True:
        # A lost database beside its records is refused at once (not waited out).
        exists = db is not None or guard.database_exists(state_dir)
        try:
            if db is None and exists:
                db = Database(state_dir, create=False)
            if db is not None:
                record = objects.get(db.conn, kind, name)
                if record is not None:
                    return db, record
        except DevCellError:
            # The database is being created by the first apply (not yet a DevCell database,
            # or its schema half-made): look again, until the timeout, then say why.
            if db is not None:
                db.close()
                db = None
            if time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:
            if db is not None:
                db.close()
            return None
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.1)
