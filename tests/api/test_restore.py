"""`devcell snapshot restore` as a library call (fake backend, metadata level): one recorded
operation with its steps, the safety snapshot recorded Ready before the workspace is
replaced, the approval gate when the workspace changed, and every refusal changing nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from devcell import backends
from devcell.api import apply as api
from devcell.api import ops
from devcell.api import restore as restoring
from devcell.api.converging import Options
from devcell.backends.fake import FakeBackend
from devcell.errors import CapabilityMissing
from devcell.store import actor, objects, operations
from devcell.store.db import open_database
from tests.api.conftest import dirty_workspaces, suspended
from tests.conftest import db_fingerprint
from tests.controllers.support import cell_doc, snapshot_doc


@pytest.fixture
def world(state: Path, write: Any) -> Path:
    path = write("all.yaml", cell_doc("api"), snapshot_doc("s1", "api"), cell_doc("other"),
                 snapshot_doc("o1", "other"), cell_doc("exp", fork_of="s1"))
    assert api.apply(state, [path]).ok
    return state


def _fake(state: Path) -> sqlite3.Connection:
    return sqlite3.connect(state / "backends" / "fake.db", isolation_level=None)


def _calls(state: Path) -> list[tuple[str, str]]:
    conn = _fake(state)
    try:
        return [(m, t) for m, t in conn.execute(
            "SELECT method, target FROM calls WHERE outcome = 'ok' ORDER BY seq")]
    finally:
        conn.close()


def _record(state: Path, kind: str, name: str) -> objects.ObjectRecord:
    db = open_database(state)
    try:
        return objects.require(db.conn, kind, name)
    finally:
        db.close()


def _steps(state: Path, op_id: str) -> list[tuple[str, str]]:
    db = open_database(state)
    try:
        return [(s.name, s.status) for s in operations.steps(db.conn, op_id)]
    finally:
        db.close()


def test_restore_is_one_operation_stop_safety_restore_start(world: Path) -> None:
    before = len(_calls(world))
    with actor.acting_as("an-admin"):  # the safety snapshot is still the cell's owner's
        done = restoring.restore(world, "s1")
    assert done.done and done.report is not None and done.report.ok
    assert done.preview.safety == "api-pre-restore-1"
    assert _steps(world, str(done.operation)) == [
        ("stop", "Succeeded"), ("checkpoint", "Succeeded"),
        ("restore-workspace", "Succeeded"), ("start", "Succeeded")]
    assert _calls(world)[before:] == [("stop", "api"), ("checkpoint", "api"),
                                      ("restore_workspace", "api"), ("start", "api")]
    safety = _record(world, "Snapshot", "api-pre-restore-1")
    assert safety.phase == "Ready" and safety.extra["cell_id"] == _record(world, "Cell", "api").id
    assert safety.extra["checkpoint_ref"] and safety.source == "restore"
    assert safety.extra["owner"] == _record(world, "Cell", "api").extra["owner"] != "an-admin"
    cell = _record(world, "Cell", "api")
    assert cell.phase == "Running" and cell.extra["restore"] is None
    assert cell.status["restore"]["snapshot"] == "s1"
    conn = _fake(world)
    try:
        assert conn.execute("SELECT restored_from FROM volumes v JOIN cells c ON "
                            "c.volume_id = v.id WHERE c.name = 'api'").fetchone()[0] == \
            _record(world, "Snapshot", "s1").id
    finally:
        conn.close()


def test_no_safety_snapshot_when_told_and_a_stopped_cell_stays_stopped(
        world: Path, write: Any) -> None:
    assert api.apply(world, [write("stop.yaml", cell_doc("api", "Stopped"))]).ok
    done = restoring.restore(world, "s1", safety=False)
    assert done.done and done.preview.safety is None
    assert _steps(world, str(done.operation)) == [("restore-workspace", "Succeeded")]
    assert _record(world, "Cell", "api").phase == "Stopped"
    db = open_database(world)
    try:
        assert sorted(s.name for s in objects.list_live(db.conn, "Snapshot")) == ["o1", "s1"]
    finally:
        db.close()


def test_a_changed_workspace_waits_for_approval_and_says_what_is_replaced(world: Path) -> None:
    dirty_workspaces(world)
    before = len(_calls(world))
    held = restoring.restore(world, "s1")
    assert not held.done and held.report is not None and not held.report.ok
    (problem,) = held.report.converged.problems
    assert problem.awaiting_approval == held.operation
    assert "changed since its last snapshot (snapshot s1)" in problem.message
    assert "the safety snapshot api-pre-restore-1 keeps them" in problem.message
    assert _calls(world)[before:] == [], "nothing done before the approval"
    op = suspended(world)
    assert op["action"] == "restore"
    resumed = ops.resume(world, op["id"], inputs=["confirm=api"])
    assert resumed.ok
    assert _steps(world, op["id"])[-2:] == [("restore-workspace", "Succeeded"),
                                             ("start", "Succeeded")]
    assert _record(world, "Snapshot", "api-pre-restore-1").phase == "Ready"
    assert _record(world, "Cell", "api").extra["restore"] is None


def test_approve_up_front_passes_the_gate(world: Path) -> None:
    dirty_workspaces(world)
    done = restoring.restore(world, "s1", options=Options(approve=True))
    assert done.done


def test_cancelling_the_gate_keeps_the_workspace_and_forgets_the_request(world: Path) -> None:
    dirty_workspaces(world)
    restoring.restore(world, "s1")
    op = suspended(world)
    before = len(_calls(world))
    assert ops.cancel(world, op["id"]).ok
    assert _record(world, "Cell", "api").extra["restore"] is None
    assert _calls(world)[before:] == []
    # and a later restore is asked afresh (the cancelled one does not come back)
    assert restoring.restore(world, "s1", options=Options(approve=True)).done


def test_dry_run_says_what_would_happen_and_writes_nothing(world: Path) -> None:
    dirty_workspaces(world)
    fingerprint = db_fingerprint(world)
    calls = _calls(world)
    preview = restoring.restore(world, "s1", dry_run=True)
    assert preview.report is None and not preview.done
    p = preview.preview
    assert (p.cell, p.snapshot, p.safety, p.running, p.changed_since) == (
        "api", "s1", "api-pre-restore-1", True, "s1")
    assert p.needs_approval and p.changes is not None and p.changes.changed == 1
    assert db_fingerprint(world) == fingerprint and _calls(world) == calls


def test_a_fork_may_go_back_to_the_snapshot_it_was_forked_from(world: Path) -> None:
    done = restoring.restore(world, "s1", cell="exp")
    assert done.done and done.preview.cell == "exp" and done.preview.safety == "exp-pre-restore-1"


@pytest.mark.parametrize(("snapshot", "cell", "words"), [
    ("o1", "api", 'snapshot "o1" was taken of cell "other", not of cell "api"'),
    ("nope", None, 'snapshot "nope" not found'),
    ("s1", "nope", 'cell "nope" not found'),
])
def test_refusals_change_nothing(world: Path, snapshot: str, cell: str | None,
                                 words: str) -> None:
    fingerprint = db_fingerprint(world)
    with pytest.raises(Exception) as caught:
        restoring.restore(world, snapshot, cell=cell)
    assert words in str(caught.value)
    assert db_fingerprint(world) == fingerprint


def test_a_snapshot_of_a_deleted_cell_needs_a_cell_and_never_goes_into_another(
        world: Path) -> None:
    assert api.delete(world, "Cell", "other").ok
    with pytest.raises(restoring.RestoreRefused, match="which is deleted; give the cell"):
        restoring.restore(world, "o1")
    with pytest.raises(restoring.RestoreRefused, match="fork") as refused:
        restoring.restore(world, "o1", cell="api")
    assert 'was taken of cell "other" (deleted), not of cell "api"' in str(refused.value)


def test_a_cell_made_again_under_a_deleted_cells_name_is_not_its_snapshots_cell(
        world: Path, write: Any) -> None:
    """Refused by the cell's id, and said so: not "taken of cell "other", not of cell
    "other"" (attack46 F3)."""
    assert api.delete(world, "Cell", "other").ok
    assert api.apply(world, [write("again.yaml", cell_doc("other"))]).ok
    with pytest.raises(restoring.RestoreRefused) as refused:
        restoring.restore(world, "o1", cell="other")
    assert 'snapshot "o1" was taken of cell "other" (deleted), not of cell "other"' in \
        str(refused.value)


def test_a_backend_without_workspace_restore_is_refused_by_name(
        world: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Plain(FakeBackend):
        restore_workspace = None

    monkeypatch.setitem(backends._classes, "fake", Plain)
    fingerprint = db_fingerprint(world)
    with pytest.raises(CapabilityMissing, match="the fake backend cannot restore a workspace "
                                                "in place.*devcell cell fork api --snapshot s1"):
        restoring.restore(world, "s1")
    assert db_fingerprint(world) == fingerprint


def test_asked_again_after_an_interruption_it_keeps_the_same_safety_snapshot(
        world: Path) -> None:
    """A request left recorded (its process killed) is replaced by the same request with the
    same safety snapshot id: a checkpoint taken before the kill is the tree before."""
    from devcell.store import restores

    db = open_database(world)
    try:
        cell = objects.require(db.conn, "Cell", "api")
        snap = objects.require(db.conn, "Snapshot", "s1")
        first = restores.new_request(snapshot_id=snap.id, snapshot="s1",
                                     safety_id="snap_0000000000interrup", safety="api-keep")
        with db.write() as conn:
            restores.record(conn, cell, first)
    finally:
        db.close()
    done = restoring.restore(world, "s1")
    assert done.done
    assert _record(world, "Snapshot", "api-keep").id == "snap_0000000000interrup"


def test_asking_again_with_approve_approves_the_restore_that_waits(world: Path) -> None:
    dirty_workspaces(world)
    held = restoring.restore(world, "s1")
    assert held.awaiting is not None and not held.done
    done = restoring.restore(world, "s1", options=Options(approve=True))
    assert done.done and done.operation == held.operation
    assert done.preview.safety == "api-pre-restore-1"
    assert _record(world, "Snapshot", "api-pre-restore-1").phase == "Ready"


def test_another_restore_while_one_waits_is_refused(world: Path, write: Any) -> None:
    assert api.apply(world, [write("s2.yaml", snapshot_doc("s2", "api"))]).ok
    dirty_workspaces(world)
    held = restoring.restore(world, "s1")
    with pytest.raises(Exception, match=f"has operation {held.operation} \\(restore\\) waiting"):
        restoring.restore(world, "s2", options=Options(approve=True))


def test_deleting_the_snapshot_a_restore_waits_on_waits_for_that_restore(world: Path) -> None:
    """The restore reads the snapshot's checkpoint: a `delete snapshot` asked while the
    restore waits at its gate (or runs) waits for it, so the restore still succeeds and the
    snapshot goes after it, instead of the restore failing and leaving the cell Failed."""
    dirty_workspaces(world)
    restoring.restore(world, "o1")
    op = suspended(world)
    api.delete(world, "Snapshot", "o1", options=Options(wait=False))
    snap = _record(world, "Snapshot", "o1")
    assert snap.deleting and snap.extra["checkpoint_ref"]
    assert "restore of other" in str(snap.status)
    assert ("delete_checkpoint", snap.id) not in _calls(world)
    assert ops.resume(world, op["id"], inputs=["confirm=other"]).ok
    cell = _record(world, "Cell", "other")
    assert cell.phase == "Running" and cell.status["restore"]["snapshot"] == "o1"
    # the restore done, the deletion goes on (the same reconcile pass finishes it)
    db = open_database(world)
    try:
        assert objects.get(db.conn, "Snapshot", snap.id) is None
    finally:
        db.close()
