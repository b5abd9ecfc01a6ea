"""devcell.api.wake: a failed wake sets a saved machine aside only when resuming it failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import wake
from devcell.controllers.steps import StepName
from devcell.store import objects, operations
from devcell.store.db import open_database
from tests.controllers.support import cell_doc


@pytest.fixture
def asleep_with_machine(state: Path, write: Any) -> str:
    """A cell recorded asleep with a saved machine (as a vm cell's sleep leaves it)."""
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    db = open_database(state)
    try:
        with db.write() as conn:
            record = objects.require(conn, "Cell", "api")
            objects.write_status(conn, record, phase=record.phase,
                                 status=dict(record.status, sleep={"machine": True,
                                                                   "checkpointId": "c1"}),
                                 observed_generation=record.observed_generation)
        return record.id
    finally:
        db.close()


def _failed_operation(state: Path, object_id: str, failed: str) -> None:
    """The cell's latest operation, failed in step `failed` after a step that succeeded."""
    db = open_database(state)
    try:
        with db.write() as conn:
            op_id = operations.new_operation_id()
            names = ["create-volume", failed, "start"]
            operations.create(conn, op_id=op_id, object_kind="Cell", object_id=object_id,
                              object_name="api", action="start", trigger="test",
                              generation=1, step_names=names)
            operations.finish_step(conn, op_id, 0, ok=True, duration_ms=1.0)
            operations.finish_step(conn, op_id, 1, ok=False, duration_ms=1.0, error="boom")
            operations.finish(conn, op_id, status=operations.OpStatus.FAILED,
                              failed_step=failed)
    finally:
        db.close()


def _sleep_status(state: Path) -> dict[str, Any]:
    db = open_database(state)
    try:
        return dict(objects.require(db.conn, "Cell", "api").status.get("sleep") or {})
    finally:
        db.close()


def test_a_failed_restore_sets_the_saved_machine_aside(state: Path,
                                                        asleep_with_machine: str) -> None:
    _failed_operation(state, asleep_with_machine, StepName.RESTORE_MACHINE)
    assert wake.set_machine_aside(state, "api", "it would not resume") == "it would not resume"
    assert _sleep_status(state)["restoreFailed"] == "it would not resume"


@pytest.mark.parametrize("failed", [StepName.PULL_IMAGE, StepName.CREATE, StepName.START])
def test_a_failure_elsewhere_keeps_the_saved_machine(state: Path, asleep_with_machine: str,
                                                     failed: StepName) -> None:
    """An engine gone or a failing hook says nothing against the saved machine: setting it
    aside would boot cold and lose the processes a later start could still resume."""
    _failed_operation(state, asleep_with_machine, failed)
    assert wake.set_machine_aside(state, "api") is None
    assert "restoreFailed" not in _sleep_status(state)


def test_no_operation_keeps_the_saved_machine(state: Path, asleep_with_machine: str) -> None:
    db = open_database(state)
    try:
        with db.write() as conn:
            conn.execute("DELETE FROM operation_steps")
            conn.execute("DELETE FROM operations")
    finally:
        db.close()
    assert wake.set_machine_aside(state, "api") is None
