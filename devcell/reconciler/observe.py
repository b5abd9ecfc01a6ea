"""Observe before acting: compare what is recorded about cells with what their backend runs.

A recorded phase is only a claim: the engine restarts, someone runs `docker stop` or `docker
pause`, an operation dies between quiesce and resume, and the database still says Running.
Every command that acts on a cell's runtime (apply, cell start|sleep|fork, snapshot create,
exec, logs, wait) first asks each backend once for all of its runtimes (one list call:
`backends.observe_all`) and compares. A cell the backend contradicts is recorded as such
(phase Pending, Ready=False with reason RuntimeDrifted and what was seen, and an event), so
`get` stops saying Running and the inline converge, or the daemon, repairs it; a cell the
backend confirms gets its confirmation time (`store.observations`, shown by `get` as
OBSERVED). Nothing is written to the database when everything agrees. A cell that an
operation in flight is changing (a snapshot freezes it between quiesce and resume) is not
judged: what the backend shows is that operation's step, and its end records the truth.

A running cell whose backend reports its services' state is also judged by them
(controllers/services.py): a service crash-looping, or one whose readiness check has not
passed, makes Ready False with the reason; serving again makes it True. That is written only
when the verdict or the per-service view changes, so `devcell wait --for=condition=Ready`,
which observes again while it waits, returns once the server answers.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devcell import backends
from devcell.backends.base import Observed
from devcell.errors import BackendError
from devcell.records import MutableRecord, Record, field
from devcell.store import events, objects, observations
from devcell.store.db import Database
from devcell.store.objects import Phase

REASON = "RuntimeDrifted"
CHECKED_PHASES = frozenset({Phase.RUNNING, Phase.STOPPED, Phase.SLEEPING})
"""Phases that claim something about the runtime; others are being worked on anyway."""


class Drift(Record):
    """A cell whose runtime contradicts the phase recorded for it."""

    cell_id: str
    name: str
    seen: str
    """What the backend shows, finishing "its runtime ..."."""


class Observation(MutableRecord):
    """What one look at the backends found of some cells."""

    confirmed: list[str] = field(default_factory=list)
    drifted: dict[str, Drift] = field(default_factory=dict)
    unobserved: dict[str, BackendError] = field(default_factory=dict)
    """Cells whose backend could not be asked (the engine is down), with why."""
    served: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Running cells whose services' state (cell id -> as observed) may change their status."""
    sidecars: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Running cells whose sidecars the backend listed (cell id -> their states)."""

    @property
    def in_doubt(self) -> list[str]:
        """Cells that must be reconciled before anyone trusts their phase."""
        return [*self.drifted, *self.unobserved]


def contradiction(row: objects.RuntimeRow, seen: Observed) -> str | None:
    """How the runtime contradicts the recorded phase, in words; None when it agrees."""
    if row.phase not in CHECKED_PHASES or not row.converged:
        return None
    if seen.exists and seen.frozen:
        return "is paused (frozen)"
    if row.phase == Phase.RUNNING:
        if not seen.exists:
            return "is gone"
        if not seen.running:
            return f"is not running ({seen.detail.get('state') or 'stopped'})"
    elif row.phase == Phase.STOPPED:
        if not seen.exists:
            return "is gone"
        if seen.running:
            return "is running"
    elif row.phase == Phase.SLEEPING and seen.exists and not (row.runtime_kept
                                                               and not seen.running):
        return "exists although the cell sleeps"
    return None


def observe(db: Database, cell_ids: Iterable[str]) -> Observation:
    """Ask each backend once about these cells; nothing is written."""
    rows = objects.runtime_rows(db.conn, cell_ids)
    result = Observation()
    by_backend: dict[str, list[objects.RuntimeRow]] = {}
    for row in rows:
        by_backend.setdefault(row.backend, []).append(row)
    acted_on = _acted_on(db, [r.id for r in rows])
    for name, group in sorted(by_backend.items()):
        try:
            seen = backends.observe_all(name, Path(db.state_dir))
        except BackendError as exc:
            result.unobserved.update(dict.fromkeys((r.id for r in group), exc))
            continue
        for row in group:
            if row.id in acted_on:
                continue  # mid-operation (a snapshot's freeze): its end records the truth
            what = contradiction(row, seen.get(row.id, Observed(exists=False)))
            if what is not None:
                result.drifted[row.id] = Drift(row.id, row.name, what)
            elif row.phase in CHECKED_PHASES and row.converged:
                result.confirmed.append(row.id)
                found = seen.get(row.id)
                reported = found.detail.get("services") if found is not None else None
                # Nothing reported yet is no news: the start that made the runtime
                # recorded what its services' readiness checks say before they run.
                if row.phase == Phase.RUNNING and reported:
                    result.served[row.id] = reported
                beside = found.detail.get("sidecars") if found is not None else None
                if row.phase == Phase.RUNNING and beside is not None:
                    result.sidecars[row.id] = beside
    return result


def record(db: Database, observation: Observation) -> None:
    """Write what the observation found: drifted cells as such, confirmations beside."""
    if observation.drifted:
        with db.write() as conn:
            for drift in observation.drifted.values():
                _record_drift(conn, drift)
    if observation.served or observation.sidecars:
        _record_services(db, observation.served, observation.sidecars)
    observations.confirm(Path(db.state_dir), observation.confirmed)


def _acted_on(db: Database, cell_ids: list[str]) -> set[str]:
    """The cells among `cell_ids` that an operation in flight is changing: on the cell, or on
    an object it owns (a snapshot freezing it between quiesce and resume). What the backend
    shows of them is a step of that operation, not a contradiction. Operations left Running
    by a dead process (nobody holds the reconcile lock, no daemon runs) protect nothing."""
    if not cell_ids:
        return set()
    # store.operations.running()'s rows, read here: exec and logs observe too, and their
    # import lists (tests/test_import_sets.py) have no room for that module on this path
    keys = [(str(kind), str(oid)) for kind, oid in db.conn.execute(
        "SELECT object_kind, object_id FROM operations WHERE status = 'Running'")]
    if not keys:
        return set()
    touched = {oid for kind, oid in keys if kind == "Cell"}
    touched |= {owner_id for kind, owner_id in objects.owners(db.conn, keys).values()
                if kind == "Cell"}
    wanted = touched.intersection(cell_ids)
    if not wanted or db.memory:  # a database in memory is this process's: in flight
        return wanted
    from devcell.reconciler import lease, reconcile_lock  # only while an operation runs

    state_dir = Path(db.state_dir)
    # An inline converge holds the reconcile lock; the daemon's workers run under its lease
    # (it recovered what dead processes left before it took up work).
    live = reconcile_lock.held(state_dir) or lease.current_holder(state_dir) is not None
    return wanted if live else set()


def observe_and_record(db: Database, cell_ids: Iterable[str]) -> Observation:
    found = observe(db, cell_ids)
    record(db, found)
    return found


def _record_services(db: Database, served: dict[str, dict[str, Any]],
                     sidecars: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Each cell's services (and sidecars') verdict, written only where it changes the
    cell's status."""
    from devcell.controllers import services  # only where some service reported a state

    changed: list[tuple[objects.ObjectRecord, dict[str, Any]]] = []
    beside = sidecars or {}
    for cell_id in dict.fromkeys([*served, *beside]):
        cell = objects.get(db.conn, "Cell", cell_id)
        if cell is None or not services.judged(cell.status):
            continue
        verdict = services.judge(cell.name, cell.spec, served.get(cell_id),
                                 beside.get(cell_id))
        status = services.with_verdict(cell.status, verdict, conditions=objects.set_condition)
        if status != cell.status:
            changed.append((cell, status))
    if not changed:
        return
    with db.write() as conn:
        for cell, status in changed:
            fresh = objects.get(conn, "Cell", cell.id)
            if fresh is None or fresh.resource_version != cell.resource_version:
                continue  # changed since it was read: the next observe judges it again
            before = (fresh.condition("Ready") or {}).get("reason")
            objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                                 observed_generation=fresh.observed_generation)
            after = fresh.condition("Ready") or {}
            if after.get("reason") != before and after.get("reason") in services.REASONS:
                events.record(conn, kind="Cell", object_id=fresh.id, name=fresh.name,
                              reason=str(after["reason"]), message=str(after.get("message")),
                              type="Warning")
            elif after.get("reason") != before and before in services.REASONS:
                events.record(conn, kind="Cell", object_id=fresh.id, name=fresh.name,
                              reason="ServicesReady", message="every service serves"
                              + (" and every sidecar runs" if fresh.spec.get("sidecars")
                                 else ""))


def _record_drift(conn: sqlite3.Connection, drift: Drift) -> None:
    cell = objects.get(conn, "Cell", drift.cell_id)
    if cell is None or cell.deleting or cell.phase not in CHECKED_PHASES:
        return  # changed since it was observed: its new state is someone else's to judge
    message = (f"its runtime {drift.seen}, although {cell.phase} was recorded: observed "
               "before acting; the next reconcile (apply, cell start, or the daemon) repairs it")
    status = dict(cell.status)
    status["conditions"] = objects.set_condition(status.get("conditions", []), "Ready",
                                                 "False", REASON, message)
    status["message"] = message
    status["drifted"] = True  # the daemon queues drifted cells (objects.drifted_keys)
    objects.write_status(conn, cell, phase=Phase.PENDING, status=status,
                         observed_generation=cell.observed_generation)
    events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason=REASON,
                  message=message, type="Warning")
