"""The inline converge and the daemon reconcile alike: same operations, steps and end state.

Both callers run the one `reconcile(ctx, key)` and differ only in what they do with its
outcome, so for the same manifests and the same injected faults they must record the same
history. Each scenario runs twice, each time in a fresh state directory: once inline, as
`devcell apply` does with no daemon (`converge` after every change), once through a Manager
driven in this process as `devcell controller run` drives it (the keys a change touched are
queued, as its directory sync queues them). Then the two histories are compared exactly:
per object, the operations (action, status, reason, message, failed step, generation) and
their steps (name, status, error), the final status (phase, Ready status, reason and message,
observedGeneration == generation, deleted or not), and every mutating backend call (as a
multiset: a cell and its snapshot take turns in whichever order the workers pick them, but
never more or fewer calls).

The documented difference: an inline converge is one pass. An `error` outcome is reported,
and the user's next apply retries it, while the daemon retries it by itself with backoff. So
where a fault heals after one failure, the scenario re-applies the same manifests
(`next_apply`): inline, that is the retry; the daemon, which retries by itself, must by then
have left nothing for it to reconcile. A `terminal` outcome (a permanent fault) is retried
by neither. Ids are normalised away and timestamps left out.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcell.backends import fake
from devcell.controllers.context import Context
from devcell.reconciler.converge import Key, converge
from devcell.reconciler.manager import Manager
from devcell.store import desired
from devcell.store.db import Database, open_database
from tests.controllers.support import apply, cell_doc, snapshot_doc

LIMIT_S = 30.0
"""Time allowed for one change to settle (generous: the suite shares two cores)."""
POLL_S = 0.02

@dataclass(frozen=True)
class Change:
    """A user's act (apply, sleep, delete): records desired state, returns the keys it touched."""

    record: Callable[[Database], list[Key]]
    retry: bool = False
    """The same manifests applied again to retry what failed. Inline, that is the retry; the
    daemon retries by itself, so there it must find nothing left to reconcile."""


def applying(*docs: dict[str, Any], dependents_first: bool = False) -> Change:
    """`devcell apply` of these documents; dependents_first hands the keys over in the worst
    order (a fork before its snapshot before its cell), so only wake-ups can resolve them."""
    def record(db: Database) -> list[Key]:
        keys = apply(db, *docs).to_reconcile
        return keys[::-1] if dependents_first else keys
    return Change(record)


def next_apply(*docs: dict[str, Any]) -> Change:
    """The user's next `devcell apply` of the same documents (see the module docstring)."""
    return Change(applying(*docs).record, retry=True)


def setting_state(cell: str, state: str) -> Change:
    """`devcell cell sleep` / `devcell cell start`."""
    def record(db: Database) -> list[Key]:
        found = desired.set_cell_state(db, cell, state)
        assert found.object_id is not None
        return [(found.kind, found.object_id)]
    return Change(record)


def deleting(*refs: tuple[str, str]) -> Change:
    """`devcell delete KIND NAME` for each (kind, name), in that order."""
    def record(db: Database) -> list[Key]:
        keys: list[Key] = []
        for kind, name in refs:
            found = desired.delete(db, kind, name)
            assert found.object_id is not None
            keys.append((kind, found.object_id))
        return keys
    return Change(record)


@dataclass(frozen=True)
class Scenario:
    name: str
    """Short, for the test's id."""
    story: str
    changes: tuple[Change, ...]
    expected: dict[str, list[str]]
    """Per object ("Cell/api"), its operations as "action:status": the history both paths
    must have, so they cannot agree on a wrong one."""
    final_phases: dict[str, str]
    faults: str = ""
    """DEVCELL_FAKE_FAIL for both runs (each starts with a full budget)."""
    delays: str = ""
    """DEVCELL_FAKE_DELAY for both runs."""

    def __str__(self) -> str:
        return self.name


API, SNAP, FORK, WEB = "Cell/api", "Snapshot/snap", "Cell/fork", "Cell/web"
API_V2 = cell_doc("api", env=[{"name": "A", "value": "2"}])

SCENARIOS = [
    Scenario(
        "lineage", "a cell, a snapshot of it and a fork of the snapshot, dependents first",
        (applying(cell_doc("api"), snapshot_doc("snap", "api"), cell_doc("fork", fork_of="snap"),
                  dependents_first=True),),
        {API: ["create:Succeeded"], SNAP: ["checkpoint:Succeeded"], FORK: ["fork:Succeeded"]},
        {API: "Running", SNAP: "Ready", FORK: "Running"},
    ),
    Scenario(
        "lifecycle", "create, a spec change, sleep, wake",
        (applying(cell_doc("api")), applying(API_V2), setting_state("api", "Sleeping"),
         setting_state("api", "Running")),
        {API: ["create:Succeeded", "update:Succeeded", "sleep:Succeeded", "wake:Succeeded"]},
        {API: "Running"},
    ),
    Scenario(
        "delete", "a snapshot, its running cell and a sleeping cell (its sleep checkpoint too)",
        (applying(cell_doc("api"), snapshot_doc("snap", "api"), cell_doc("web")),
         setting_state("web", "Sleeping"),
         deleting(("Snapshot", "snap"), ("Cell", "api"), ("Cell", "web"))),
        {API: ["create:Succeeded", "delete:Succeeded"],
         SNAP: ["checkpoint:Succeeded", "delete:Succeeded"],
         WEB: ["create:Succeeded", "sleep:Succeeded", "delete:Succeeded"]},
        {API: "Deleted", SNAP: "Deleted", WEB: "Deleted"},
    ),
    Scenario(
        "permanent", "a permanent fault: recorded once, never retried; a neighbour converges",
        (applying(cell_doc("api"), cell_doc("web")),),
        {API: ["create:Failed"], WEB: ["create:Succeeded"]},
        {API: "Failed", WEB: "Running"},
        faults="start@api:perm",
    ),
    Scenario(
        "permanent-slow-step",
        "a permanent fault in a slow step, so the daemon's desired-state watcher asks for "
        "the key while it runs (the daemon used to run it a second time)",
        (applying(cell_doc("api")),),
        {API: ["create:Failed"]},
        {API: "Failed"},
        faults="start@api:perm", delays="start:0.3",
    ),
    Scenario(
        "heals", "a fault that heals after one failure, with a snapshot waiting on the cell",
        (applying(cell_doc("api"), snapshot_doc("snap", "api")),
         next_apply(cell_doc("api"), snapshot_doc("snap", "api"))),
        {API: ["create:Failed", "start:Succeeded"], SNAP: ["checkpoint:Succeeded"]},
        {API: "Running", SNAP: "Ready"},
        faults="start@api:1",
    ),
    Scenario(
        "heals-cell-then-snapshot",
        "faults that heal in a cell, then in its snapshot (the resume step always runs)",
        (applying(cell_doc("api"), snapshot_doc("snap", "api")),
         next_apply(cell_doc("api"), snapshot_doc("snap", "api")),
         next_apply(cell_doc("api"), snapshot_doc("snap", "api"))),
        {API: ["create:Failed", "start:Succeeded"],
         SNAP: ["checkpoint:Failed", "checkpoint:Succeeded"]},
        {API: "Running", SNAP: "Ready"},
        faults="start@api:1,checkpoint@api:1",
    ),
]


# -- what a run leaves behind ----------------------------------------------------------------

_ID = re.compile(r"\b([a-z]+)_[0-9a-z]{18}\b")


def _plain(text: str | None) -> str:
    """Ids (cell_…, op_…) replaced by their prefix: the two runs make different ones."""
    return _ID.sub(r"\1_<id>", text or "")


@dataclass(frozen=True)
class History:
    operations: dict[str, list[tuple[Any, ...]]]
    """Per object: each operation (action, status, reason, message, failed step,
    generation, steps), oldest first; each step (name, status, error)."""
    final: dict[str, tuple[Any, ...]]
    """Per object: (phase, Ready status, Ready reason, Ready message, observedGeneration ==
    generation, deleted)."""
    calls: Counter[tuple[str, str, str]]
    """Every mutating backend call (method, cell name, outcome), counted."""

    def summary(self) -> dict[str, list[str]]:
        return {name: [f"{op[0]}:{op[1]}" for op in ops] for name, ops in self.operations.items()}


def history(db: Database) -> History:
    conn = db.conn
    names: dict[str, str] = {}
    for kind, table in (("Cell", "cells"), ("Snapshot", "snapshots")):
        for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
            name = f"{kind}/{row['name']}"
            assert name not in names.values(), f"{name} recorded twice"
            names[row["id"]] = name
    operations: dict[str, list[tuple[Any, ...]]] = {name: [] for name in names.values()}
    for op in conn.execute("SELECT * FROM operations ORDER BY rowid"):
        steps = tuple((s["name"], s["status"], _plain(s["error"])) for s in conn.execute(
            "SELECT name, status, error FROM operation_steps WHERE op_id = ? ORDER BY idx",
            (op["id"],)))
        operations[names[op["object_id"]]].append(
            (op["action"], op["status"], op["reason"] or "", _plain(op["message"]),
             op["current_step"], op["generation"], steps))
    final: dict[str, tuple[Any, ...]] = {}
    for kind, table in (("Cell", "cells"), ("Snapshot", "snapshots")):
        for row in conn.execute(f"SELECT * FROM {table}"):
            ready = next((c for c in _conditions(row["status"]) if c.get("type") == "Ready"), {})
            final[f"{kind}/{row['name']}"] = (
                row["phase"], ready.get("status"), ready.get("reason"), _plain(ready.get("message")),
                row["observed_generation"] == row["generation"], row["deleted_at"] is not None)
    backend = fake.FakeBackend(state_dir=db.state_dir, failures=[])
    try:
        calls = Counter(backend.calls())
    finally:
        backend.close()
    return History(operations, final, calls)


def _conditions(status: str | None) -> list[dict[str, Any]]:
    return list(json.loads(status or "{}").get("conditions", []))


# -- the two ways of reconciling -------------------------------------------------------------


def run_inline(state_dir: Path, scenario: Scenario) -> History:
    """`devcell apply` with no daemon: one converge after each change."""
    db = open_database(state_dir)
    ctx = Context(db, trigger="apply")
    try:
        for change in scenario.changes:
            converge(ctx, change.record(db), timeout=LIMIT_S)
        return history(db)
    finally:
        ctx.close()
        db.close()


def run_daemon(state_dir: Path, scenario: Scenario) -> History:
    """The daemon's workers (no resync: nothing but the changes and their outcomes queues a
    key), left running across the changes as a daemon is."""
    db = open_database(state_dir)
    manager = Manager(state_dir, workers=4, resync_seconds=0)
    manager.start()
    try:
        for change in scenario.changes:
            keys = change.record(db)
            if change.retry:
                assert keys == [], "the daemon left failures for the user's next apply to retry"
            for key in keys:
                manager.enqueue(key, trigger="watch")
            settle(manager, db)
    finally:
        manager.stop(timeout=LIMIT_S)
    try:
        return history(db)
    finally:
        db.close()


def settle(manager: Manager, db: Database) -> None:
    """Poll until the daemon is at rest: no operation Running in the database, nothing queued
    (not even a retry due later) and no worker busy, twice in a row with no reconcile in
    between (a key is briefly neither queued nor busy while its group is busy elsewhere)."""
    deadline = time.monotonic() + LIMIT_S
    seen: int | None = None
    while time.monotonic() < deadline:
        count = manager.reconciles
        idle = (len(manager.queue) == 0 and manager.queue.busy == 0
                and db.conn.execute("SELECT 1 FROM operations WHERE status = 'Running'"
                                    ).fetchone() is None)
        if idle and seen == count:
            return
        seen = count if idle else None
        time.sleep(POLL_S)  # a poll interval, not a synchronisation: the loop checks state
    raise AssertionError(f"the daemon did not settle within {LIMIT_S:g}s: "
                         f"{len(manager.queue)} queued, {manager.queue.busy} busy")


# -- the test --------------------------------------------------------------------------------


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Scenario], None]]:
    """Arm a scenario's faults with a full budget (counts are per process, and both runs
    share this one)."""
    def arm(scenario: Scenario) -> None:
        for var, value in (("DEVCELL_FAKE_FAIL", scenario.faults),
                           ("DEVCELL_FAKE_DELAY", scenario.delays)):
            if value:
                monkeypatch.setenv(var, value)
            else:
                monkeypatch.delenv(var, raising=False)
        fake._ENV_FAILURES.clear()
    yield arm
    fake._ENV_FAILURES.clear()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_inline_converge_and_daemon_record_the_same_history(
        scenario: Scenario, tmp_path: Path, faults: Callable[[Scenario], None]) -> None:
    faults(scenario)
    inline = run_inline(tmp_path / "inline", scenario)
    faults(scenario)
    daemon = run_daemon(tmp_path / "daemon", scenario)

    assert inline.summary() == scenario.expected
    assert {name: final[0] for name, final in inline.final.items()} == scenario.final_phases
    assert daemon.operations == inline.operations
    assert daemon.final == inline.final
    assert daemon.calls == inline.calls
