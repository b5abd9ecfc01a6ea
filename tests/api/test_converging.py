"""devcell.api.converging while a daemon holds the lease: the verbs record, approve and wait
for what the daemon records, and never reconcile themselves.

The lease is taken in-process (devcell.reconciler.lease.Lease); a `StandIn` reconciles on
another thread where a test needs the "daemon" to make progress.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devcell.api import apply as api
from devcell.api import ops
from devcell.api.converging import Hooks, Options
from devcell.api.reports import Status
from devcell.reconciler.lease import Lease
from devcell.store.db import open_database
from tests.api.conftest import Seen, StandIn, dirty_workspaces, suspended
from tests.controllers.support import cell_doc


def test_with_a_daemon_the_call_waits_and_reports_the_holder(
        state: Path, write: Any, stand_in: StandIn) -> None:
    open_database(state).close()
    with Lease(state) as held:
        report = api.apply(state, [write("api.yaml", cell_doc("api"))],
                           hooks=Hooks(on_recorded=stand_in.hook))
    converged = report.converged
    assert converged.holder == held.holder and converged.waited and report.ok
    assert [(o.name, o.status) for o in converged.objects] == [("api", Status.SETTLED)]


def test_with_a_daemon_nothing_is_reconciled_in_process(
        state: Path, write: Any, seen: Seen) -> None:
    open_database(state).close()
    with Lease(state):
        report = api.apply(state, [write("api.yaml", cell_doc("api"))],
                           options=Options(timeout=0.2), hooks=seen.hooks())
    assert seen.names == ["recorded"]  # no inline converge
    [waiting] = report.converged.problems
    assert waiting.status is Status.WAITING and waiting.message.startswith("timed out after 0.2s")
    assert not report.ok


def test_without_wait_the_call_returns_once_recorded(state: Path, write: Any) -> None:
    open_database(state).close()
    with Lease(state) as held:
        report = api.apply(state, [write("api.yaml", cell_doc("api"))],
                           options=Options(wait=False))
    assert report.converged.holder == held.holder
    assert not report.converged.waited and report.converged.objects == () and report.ok


def test_approve_passes_a_waiting_gate_to_the_daemon(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    dirty_workspaces(state)
    assert not api.delete(state, "Cell", "api").ok  # inline: waits for approval
    with Lease(state):
        api.delete(state, "Cell", "api", options=Options(approve=True, wait=False))
    op = suspended(state)
    assert op["reason"] == "Approved"
    assert json.loads(op["resume_input"]) == {"approvedBy": "--approve"}


def test_resume_with_a_daemon_waits_for_the_operation(
        state: Path, write: Any, stand_in: StandIn) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    dirty_workspaces(state)
    api.delete(state, "Cell", "api")
    op_id = str(suspended(state)["id"])
    with Lease(state) as held:
        late = ops.resume(state, op_id, inputs=["confirm=api"], options=Options(timeout=0.2))
        assert late.converged.operation is not None
        assert (late.converged.operation.status, late.converged.operation.message) == (
            Status.WAITING, "did not finish within 0.2s")
        assert late.converged.objects == () and not late.ok
        # still suspended (approved): resumed again, this time a daemon runs it
        report = ops.resume(state, op_id, inputs=["confirm=api"],
                            hooks=Hooks(on_recorded=stand_in.hook))
    assert report.converged.holder == held.holder and report.ok
    assert report.converged.operation is not None
    assert report.converged.operation.status is Status.SETTLED
    db = open_database(state)
    assert db.conn.execute("SELECT status FROM operations WHERE id = ?",
                           (op_id,)).fetchone()[0] == "Succeeded"
    db.close()
