"""Deleting frees what it deletes: a snapshot's checkpoint, a cell's volumes (fake backend).

The class these tests cover: a deletion that decided from what the database recorded rather
than from what the backend holds (a checkpoint or volume made by an operation that died before
recording it), or that waited on another object and was never looked at again once that
object was gone (a snapshot deleted with a fork whose deletion waited for approval). Each left
bytes on disk that nothing referenced.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from devcell.api import apply as api
from devcell.api import ops
from devcell.api.converging import Options
from devcell.backends.base import CellRef
from devcell.backends.fake import FakeBackend
from devcell.store import objects
from devcell.store.db import open_database
from tests.api.conftest import suspended
from tests.controllers.support import cell_doc, snapshot_doc


def dirty(state: Path, cell: str) -> None:
    """Someone edits the cell's fake workspace: deleting it now needs approval."""
    conn = sqlite3.connect(state / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1 WHERE cell_name = ?", (cell,))
    conn.commit()
    conn.close()


def fake_rows(state: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(state / "backends" / "fake.db")
    try:
        return {table: [r[0] for r in conn.execute(f"SELECT id FROM {table}")]
                for table in ("cells", "volumes", "checkpoints")}
    finally:
        conn.close()


def live(state: Path, kind: str) -> list[str]:
    db = open_database(state)
    try:
        return [r.name for r in objects.list_live(db.conn, kind)]
    finally:
        db.close()


def record_of(state: Path, kind: str, name: str) -> objects.ObjectRecord:
    db = open_database(state)
    try:
        return objects.require(db.conn, kind, name)
    finally:
        db.close()


def test_a_snapshot_waiting_for_a_gated_fork_goes_when_the_fork_is_approved(
        state: Path, write: Any) -> None:
    """`delete -f` of a fork and its snapshot, the fork's workspace changed: the fork waits
    for approval, the snapshot for the fork. Approving the fork later (`op resume`) must
    finish the snapshot too, freeing its checkpoint, not leave it for some later command."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("snap", "api"),
                 cell_doc("exp", fork_of="snap"))
    assert api.apply(state, [path]).ok
    dirty(state, "exp")
    report = api.delete_files(state, [path])
    assert not report.ok  # the fork waits for approval, its snapshot for the fork
    assert live(state, "Snapshot") == ["snap"]
    op = suspended(state)
    resumed = ops.resume(state, op["id"], inputs=[f"confirm={op['object_name']}"])
    assert resumed.ok, resumed.converged
    assert live(state, "Cell") == [] and live(state, "Snapshot") == []
    assert fake_rows(state) == {"cells": [], "volumes": [], "checkpoints": []}


def test_the_snapshot_goes_when_its_last_fork_is_deleted_on_its_own(
        state: Path, write: Any) -> None:
    path = write("all.yaml", cell_doc("api"), snapshot_doc("snap", "api"),
                 cell_doc("exp", fork_of="snap"))
    assert api.apply(state, [path]).ok
    dirty(state, "exp")
    assert not api.delete_files(state, [path]).ok
    report = api.delete(state, "Cell", "exp", options=Options(approve=True))
    assert report.ok, report.converged
    assert live(state, "Snapshot") == []
    assert fake_rows(state)["checkpoints"] == []


def test_deleting_a_snapshot_removes_a_checkpoint_it_never_recorded(
        state: Path, write: Any) -> None:
    """A checkpoint taken by an operation that died before recording it (the snapshot row
    has no checkpoint_ref) is still the snapshot's: deleting the snapshot removes it."""
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    cell = record_of(state, "Cell", "api")
    # The snapshot's cell is stopped, so the snapshot waits instead of being taken...
    assert api.apply(state, [write("api.yaml", cell_doc("api", "Stopped"))]).ok
    assert not api.apply(state, [write("snap.yaml", snapshot_doc("snap", "api"))]).ok
    snap = record_of(state, "Snapshot", "snap")
    assert snap.extra["checkpoint_ref"] is None
    # ...while a checkpoint with its id lies in the backend (a crash before the commit).
    backend = FakeBackend(state_dir=state)
    backend.checkpoint(CellRef(cell.id, cell.name, cell.spec), snap.id)
    backend.close()
    assert api.delete(state, "Snapshot", "snap").ok
    assert fake_rows(state)["checkpoints"] == []


def test_deleting_a_cell_removes_a_volume_it_never_recorded(state: Path, write: Any) -> None:
    """The volume's create-volume step ran, and the process died before recording it."""
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    conn = sqlite3.connect(state / "state.db", isolation_level=None)
    conn.execute("DELETE FROM attachments")
    conn.execute("DELETE FROM volumes")
    conn.close()
    assert fake_rows(state)["volumes"]
    assert api.delete(state, "Cell", "api").ok
    assert fake_rows(state) == {"cells": [], "volumes": [], "checkpoints": []}


def test_deleting_every_snapshot_and_cell_leaves_nothing_in_the_backend(
        state: Path, write: Any) -> None:
    """Cells, forks of forks, a sleeping cell, snapshots of each: deleted in any grouping,
    nothing stays behind."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("s1", "api"),
                 snapshot_doc("s2", "api"), cell_doc("exp", fork_of="s1"),
                 snapshot_doc("s3", "exp"), cell_doc("exp2", fork_of="s3"),
                 cell_doc("zz", "Sleeping"))
    assert api.apply(state, [path]).ok
    assert fake_rows(state)["checkpoints"]
    assert api.delete(state, "Snapshot", "s2").ok
    assert api.delete(state, "Cell", "api").ok  # its snapshots stay
    assert live(state, "Snapshot") == ["s1", "s3"]
    report = api.delete_files(state, [path], options=Options(approve=True))
    assert report.ok, report.converged
    assert live(state, "Cell") == [] and live(state, "Snapshot") == []
    assert fake_rows(state) == {"cells": [], "volumes": [], "checkpoints": []}


def test_a_fork_keeps_working_after_its_parent_and_snapshots_are_deleted(
        state: Path, write: Any) -> None:
    path = write("all.yaml", cell_doc("api"), snapshot_doc("s1", "api"),
                 snapshot_doc("s2", "api"), cell_doc("exp", fork_of="s1"))
    assert api.apply(state, [path]).ok
    assert api.delete(state, "Cell", "api").ok
    assert api.delete(state, "Snapshot", "s2").ok
    assert live(state, "Snapshot") == ["s1"]  # the fork still names it: kept
    for desired_state in ("Stopped", "Running", "Sleeping", "Running"):
        report = api.apply(state, [write("exp.yaml", cell_doc("exp", desired_state,
                                                              fork_of="s1"))])
        assert report.ok, report.converged
        assert record_of(state, "Cell", "exp").phase == desired_state
    assert api.apply(state, [write("s4.yaml", snapshot_doc("s4", "exp"))]).ok
