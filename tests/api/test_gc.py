"""`devcell gc` as a library call (fake backend): what it removes, what it keeps, and that it
is recorded as an operation with a step per removal."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import gc
from devcell.backends.base import Owned, OwnedKind
from devcell.controllers.gc import Verdict, judge
from devcell.errors import ManifestError
from devcell.store import desired, operations
from devcell.store.db import open_database
from devcell.store.references import References
from tests.controllers.support import cell_doc, snapshot_doc


def fake(state: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(state / "backends" / "fake.db", isolation_level=None)
    return conn


def ids(state: Path, table: str) -> set[str]:
    conn = fake(state)
    try:
        return {r[0] for r in conn.execute(f"SELECT id FROM {table}")}
    finally:
        conn.close()


def state_sql(state: Path, sql: str, *params: str) -> list[Any]:
    conn = sqlite3.connect(state / "state.db", isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def leak(state: Path, table: str, resource_id: str, cell_id: str) -> None:
    """A backend resource a crash or an older DevCell left behind."""
    conn = fake(state)
    try:
        conn.execute(f"INSERT INTO {table} (id, cell_id, cell_name) VALUES (?, ?, 'x')",
                     (resource_id, cell_id))
    finally:
        conn.close()


@pytest.fixture
def world(state: Path, write: Any) -> dict[str, str]:
    """Cells, snapshots, a fork, a sleeping cell; then leaks of every kind."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("s1", "api"), snapshot_doc("s2", "api"),
                 cell_doc("exp", fork_of="s1"), cell_doc("zz", "Sleeping"), cell_doc("old"))
    assert api.apply(state, [path]).ok
    assert api.delete(state, "Cell", "old").ok
    rows = dict(state_sql(state, "SELECT name, id FROM cells") +
                state_sql(state, "SELECT name, id FROM snapshots"))
    # s1 deleted behind the fork's back (an older DevCell did not refuse it): the fork still
    # depends on its checkpoint, which must stay.
    state_sql(state, "UPDATE snapshots SET deleted_at = '2026-01-01' WHERE name = 's1'")
    leak(state, "checkpoints", "snap_deletedbutleft00001", rows["api"])
    state_sql(state, "INSERT INTO snapshots (id, name, cell_id, spec, spec_hash, manifest_hash, "
                     "labels, annotations, generation, resource_version, phase, "
                     "observed_generation, status, created_at, updated_at, deleted_at) VALUES "
                     "('snap_deletedbutleft00001', 'gone', ?, '{}', '', '', '{}', '{}', 1, 1, "
                     "'Deleted', 1, '{}', '', '', '2026-01-01')", rows["api"])
    leak(state, "checkpoints", f"sleep-{rows['old']}-g1", rows["old"])  # a deleted cell's
    leak(state, "volumes", "vol_ofadeletedcell000001", rows["old"])
    leak(state, "volumes", "vol_neverrecorded0000001", "cell_neverrecorded000001")
    leak(state, "checkpoints", f"sleep-{rows['api']}-g7", rows["api"])  # a live cell's
    return rows


def test_gc_removes_what_nothing_references_and_keeps_the_rest(
        state: Path, world: dict[str, str]) -> None:
    before = ids(state, "checkpoints")
    report = gc.collect(state)
    assert report.ok
    assert ids(state, "volumes") == before_volumes(state)
    removed = before - ids(state, "checkpoints")
    assert removed == {"snap_deletedbutleft00001", f"sleep-{world['old']}-g1"}
    kept = ids(state, "checkpoints")
    assert {world["s1"], world["s2"], f"sleep-{world['api']}-g7"} <= kept
    assert "vol_ofadeletedcell000001" not in ids(state, "volumes")
    assert "vol_neverrecorded0000001" not in ids(state, "volumes")  # empty: no approval needed
    # A second collection finds nothing more.
    again = gc.collect(state)
    assert [c.planned for c in again.collected] == [[]]


def before_volumes(state: Path) -> set[str]:
    """The volumes live cells own (what must stay)."""
    return {r[0] for r in state_sql(state, "SELECT id FROM volumes WHERE deleted_at IS NULL")}


def test_gc_is_an_operation_with_a_step_per_removal(state: Path, world: dict[str, str]) -> None:
    report = gc.collect(state)
    (collected,) = report.collected
    assert collected.op_id is not None
    db = open_database(state)
    try:
        op = operations.get(db.conn, collected.op_id)
        assert op is not None and op["status"] == "Succeeded" and op["action"] == "gc"
        steps = operations.steps(db.conn, collected.op_id)
        assert sorted(str(s.outputs["id"]) for s in steps) == sorted(
            j.item.id for j in collected.planned)
        assert all(s.status == "Succeeded" for s in steps)
        reasons = [r[0] for r in db.conn.execute("SELECT reason FROM events")]
        assert "Collected" in reasons
    finally:
        db.close()


def test_a_dry_run_removes_nothing(state: Path, world: dict[str, str]) -> None:
    before = (ids(state, "checkpoints"), ids(state, "volumes"))
    report = gc.collect(state, dry_run=True)
    assert len(report.collected[0].planned) == 4
    assert (ids(state, "checkpoints"), ids(state, "volumes")) == before
    assert state_sql(state, "SELECT count(*) FROM operations WHERE action = 'gc'") == [(0,)]


REFS = References(
    live_cells=frozenset({"cell_live"}), deleted_cells=frozenset({"cell_dead"}),
    live_snapshots=frozenset({"snap_live"}), deleted_snapshots=frozenset({"snap_dead",
                                                                          "snap_forked"}),
    depended_on=frozenset({"snap_forked"}), sleep_checkpoints=frozenset({"sleep-x"}))


@pytest.mark.parametrize(("kind", "rid", "owner", "content", "verdict"), [
    (OwnedKind.CHECKPOINT, "snap_live", "cell_dead", "/w", Verdict.KEEP),
    (OwnedKind.CHECKPOINT, "snap_forked", "cell_dead", "/w", Verdict.KEEP),
    (OwnedKind.CHECKPOINT, "sleep-x", "cell_dead", "/w", Verdict.KEEP),
    (OwnedKind.CHECKPOINT, "sleep-y", "cell_live", "/w", Verdict.KEEP),
    (OwnedKind.CHECKPOINT, "snap_dead", "cell_live", "/w", Verdict.RECLAIM),
    (OwnedKind.CHECKPOINT, "sleep-z", "cell_dead", "/w", Verdict.RECLAIM),
    (OwnedKind.CHECKPOINT, "snap_unknown", "cell_unknown", None, Verdict.RECLAIM),
    (OwnedKind.CHECKPOINT, "snap_unknown", "cell_unknown", "/w", Verdict.NEEDS_APPROVAL),
    (OwnedKind.VOLUME, "vol_a", "cell_live", "/w", Verdict.KEEP),
    (OwnedKind.VOLUME, "vol_a", "cell_dead", "/w", Verdict.RECLAIM),
    (OwnedKind.VOLUME, "vol_a", "cell_unknown", None, Verdict.RECLAIM),
    (OwnedKind.VOLUME, "vol_a", "cell_unknown", "/w", Verdict.NEEDS_APPROVAL),
    (OwnedKind.CELL, "cell_live", "cell_live", None, Verdict.KEEP),
    (OwnedKind.CELL, "cell_dead", "cell_dead", None, Verdict.RECLAIM),
])
def test_what_gc_keeps_reclaims_or_asks_approval_for(
        kind: OwnedKind, rid: str, owner: str, content: str | None, verdict: Verdict) -> None:
    assert judge(Owned(kind, rid, owner, content), REFS).verdict is verdict


def test_gc_finishes_a_deletion_a_killed_command_left_undone(state: Path, write: Any) -> None:
    """`devcell delete snapshot` killed after recording the deletion (kill -9 before its
    operation ran) leaves the snapshot Deleting with its checkpoint on disk and no
    operation; apply refuses the name meanwhile. `devcell gc` finishes that deletion (the
    checkpoint goes) before it collects; a dry run only names it."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("s1", "api"), snapshot_doc("s2", "api"))
    assert api.apply(state, [path]).ok
    (snap_id,) = [r[0] for r in state_sql(state, "SELECT id FROM snapshots WHERE name = 's2'")]
    assert snap_id in ids(state, "checkpoints")
    db = open_database(state)
    try:
        desired.delete(db, "Snapshot", "s2")  # recorded; the process dies before reconciling
    finally:
        db.close()
    with pytest.raises(ManifestError, match="devcell gc"):
        api.apply(state, [path])
    dry = gc.collect(state, dry_run=True)
    assert dry.finished == ("snapshot/s2",) and snap_id in ids(state, "checkpoints")
    report = gc.collect(state)
    assert report.ok and report.finished == ("snapshot/s2",) and not report.unfinished
    assert snap_id not in ids(state, "checkpoints")
    assert state_sql(state, "SELECT deleted_at IS NOT NULL FROM snapshots WHERE id = ?",
                     snap_id) == [(1,)]
    assert gc.collect(state).finished == ()
    assert api.apply(state, [path]).ok  # the name is free again
