"""devcell.api.cells: snapshot, fork, sleep and start as library calls (fake backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import cells
from devcell.api.reports import Status
from devcell.errors import ManifestError, NotFound
from devcell.store import desired, objects
from devcell.store.db import open_database
from tests.api.conftest import Seen
from tests.controllers.support import cell_doc


@pytest.fixture
def api_cell(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok


def phase(state: Path, kind: str, name: str) -> str:
    db = open_database(state)
    try:
        return objects.require(db.conn, kind, name).phase
    finally:
        db.close()


@pytest.mark.usefixtures("api_cell")
def test_snapshot_then_fork(state: Path, seen: Seen) -> None:
    report = cells.snapshot(state, "api", name="snap", hooks=seen.hooks())
    assert [(c.kind, c.name, c.outcome) for c in report.recorded.changes] == [
        ("Snapshot", "snap", "created")]
    assert seen.names == ["recorded", "inline"] and report.ok
    assert phase(state, "Snapshot", "snap") == "Ready"
    forked = cells.fork(state, "api", snapshot="snap", name="exp")
    assert [(o.kind, o.name, o.status) for o in forked.converged.objects] == [
        ("Cell", "exp", Status.SETTLED)]
    assert phase(state, "Cell", "exp") == "Running"


@pytest.mark.usefixtures("api_cell")
def test_fork_refuses_a_snapshot_of_another_cell(state: Path, write: Any) -> None:
    assert api.apply(state, [write("db.yaml", cell_doc("db"))]).ok
    assert cells.snapshot(state, "db", name="dbsnap").ok
    with pytest.raises(ManifestError, match='was taken of cell "db", not of "api"'):
        cells.fork(state, "api", snapshot="dbsnap", name="exp")
    with pytest.raises(NotFound, match='snapshot "nope" not found'):
        cells.fork(state, "api", snapshot="nope", name="exp")


def test_a_bad_name_is_refused_before_any_state_is_made(state: Path) -> None:
    with pytest.raises(ManifestError, match="--name"):
        cells.snapshot(state, "api", name="Not A Name")
    assert not state.exists()


@pytest.mark.usefixtures("api_cell")
def test_sleep_and_start(state: Path) -> None:
    report = cells.sleep(state, "api")
    assert [c.outcome for c in report.recorded.changes] == ["configured"] and report.ok
    assert phase(state, "Cell", "api") == "Sleeping"
    again = cells.sleep(state, "api")
    assert [c.outcome for c in again.recorded.changes] == ["unchanged"]
    assert not again.converged.waited
    assert cells.start(state, "api").ok
    assert phase(state, "Cell", "api") == "Running"


@pytest.mark.usefixtures("api_cell")
def test_a_cell_being_deleted_keeps_its_state(state: Path) -> None:
    db = open_database(state)
    desired.delete(db, "Cell", "api")  # asked for, not converged yet
    db.close()
    with pytest.raises(ManifestError, match="is being deleted"):
        cells.sleep(state, "api")
