"""The key property: once converged, reconciling again plans nothing.

A hypothesis test generates sets of Cells (random state, services, env, labels), Snapshots of
them and forks of those snapshots, records them, converges, and then checks that every
controller decides Settled (or, for objects that legitimately cannot progress, Wait), that the
backend matches the desired state, and that a second converge records no operation and makes
no backend call. A second generated version of the same objects (state/env/label changes and
some deletions) must converge and be idempotent in the same way.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell.backends.base import CellRef
from devcell.controllers.cell import runtime_hash
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Settled, Wait
from devcell.store import desired, operations, volumes
from devcell.store.db import Database, open_database
from tests.controllers.support import (
    all_keys,
    apply,
    cell_doc,
    context_for,
    converge_all,
    decide,
    fake,
    op_count,
    record,
    snapshot_doc,
)

STATES = ["Running", "Stopped", "Sleeping"]
# Hypothesis runs many examples, each with its own state directory: keep them in memory when
# the machine has a tmpfs (fsync on a real disk dominates the runtime otherwise).
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
# DEVCELL_TEST_EXAMPLES=500 for a deeper search by hand; the suite keeps it modest.
HYPOTHESIS = settings(max_examples=int(os.environ.get("DEVCELL_TEST_EXAMPLES", "25")),
                      deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture,
                                             HealthCheck.too_slow])

# -- a model of what should happen -------------------------------------------------------------


@dataclass
class CellModel:
    name: str
    state: str
    fork_of: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    deleted: bool = False

    def doc(self) -> dict[str, Any]:
        return cell_doc(self.name, self.state, labels=self.labels, fork_of=self.fork_of,
                        **self.spec)


@dataclass
class SnapModel:
    name: str
    cell: str
    taken: bool = False
    cell_gone: bool = False

    def doc(self) -> dict[str, Any]:
        return snapshot_doc(self.name, self.cell)


@dataclass
class World:
    cells: dict[str, CellModel]
    snaps: dict[str, SnapModel]

    def docs(self) -> list[dict[str, Any]]:
        """Documents in creation order (dependencies first), deleted cells left out."""
        order: list[CellModel | SnapModel] = sorted(
            [*self.cells.values(), *self.snaps.values()], key=lambda o: int(o.name[1:]))
        return [o.doc() for o in order if not (isinstance(o, CellModel) and o.deleted)]

    def cell_can_settle(self, name: str) -> bool:
        cell = self.cells[name]
        return cell.fork_of is None or self.snaps[cell.fork_of].taken

    def settle(self) -> None:
        """Advance the model as a converge would: take every snapshot that can be taken."""
        changed = True
        while changed:
            changed = False
            for snap in self.snaps.values():
                if snap.taken or snap.cell_gone:
                    continue
                cell = self.cells[snap.cell]
                if cell.deleted:
                    snap.cell_gone = True
                    changed = True
                elif cell.state == "Running" and self.cell_can_settle(cell.name):
                    snap.taken = True
                    changed = True


names_st = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
env_st = st.lists(
    st.fixed_dictionaries({"name": st.from_regex(r"[A-Z][A-Z0-9_]{0,5}", fullmatch=True),
                           "value": st.text(st.characters(codec="ascii",
                                                          categories=["L", "N"]), max_size=8)},
                          optional={"secret": st.booleans()}),
    max_size=3, unique_by=lambda v: v["name"])
services_st = st.lists(
    st.fixed_dictionaries({"name": names_st,
                           "command": st.lists(st.sampled_from(["sh", "-c", "sleep 1", "true"]),
                                               min_size=1, max_size=3)},
                          optional={"restart": st.sampled_from(["Always", "OnFailure",
                                                                "Never"])}),
    max_size=2, unique_by=lambda s: s["name"])
labels_st = st.dictionaries(names_st, names_st, max_size=2)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["image"] = draw(st.sampled_from(["busybox", "alpine:3", "debian:12"]))
    services = draw(services_st)
    if services:
        spec["services"] = services
    env = draw(env_st)
    if env:
        spec["env"] = env
    return spec


@st.composite
def worlds(draw: st.DrawFn) -> World:
    cells: dict[str, CellModel] = {}
    snaps: dict[str, SnapModel] = {}
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["cell", "cell", "snapshot", "fork"]))
        name = f"o{i}"
        if kind == "snapshot" and cells:
            snaps[name] = SnapModel(name, draw(st.sampled_from(sorted(cells))))
        elif kind == "fork" and snaps:
            cells[name] = CellModel(name, draw(st.sampled_from(STATES)),
                                    fork_of=draw(st.sampled_from(sorted(snaps))),
                                    spec=draw(specs()), labels=draw(labels_st))
        else:
            cells[name] = CellModel(name, draw(st.sampled_from(STATES)), spec=draw(specs()),
                                    labels=draw(labels_st))
    return World(cells, snaps)


@st.composite
def edits(draw: st.DrawFn, world: World) -> dict[str, Any]:
    """A second version: per cell, maybe a new state, spec or labels; maybe a deletion."""
    out: dict[str, Any] = {}
    for name in sorted(world.cells):
        change = draw(st.sampled_from(["none", "state", "spec", "labels", "delete"]))
        if change == "state":
            out[name] = ("state", draw(st.sampled_from(STATES)))
        elif change == "spec":
            out[name] = ("spec", draw(specs()))
        elif change == "labels":
            out[name] = ("labels", draw(labels_st))
        elif change == "delete":
            out[name] = ("delete", None)
    return out


# -- checks ------------------------------------------------------------------------------------


def check_converged(ctx: Context, world: World) -> None:
    """Every object is where the model says, decide() agrees, and the backend matches."""
    db = ctx.db
    backend = fake(ctx)
    for name, model in world.cells.items():
        rows = db.conn.execute("SELECT id FROM cells WHERE name = ? ORDER BY created_at",
                               (name,)).fetchall()
        assert len(rows) == 1, name
        cell = record(db, "Cell", rows[0][0])
        ref = CellRef(cell.id, cell.name, cell.spec)
        decision = decide(ctx, "Cell", cell.id)
        if model.deleted:
            assert cell.deleted_at is not None and cell.phase == "Deleted", name
            assert decision == Settled()
            assert not backend.observe(ref).exists
            assert volumes.for_cell(db.conn, cell.id) is None
            continue
        if not world.cell_can_settle(name):
            assert isinstance(decision, Wait), (name, decision)
            assert decision.reason == "WaitingForSnapshot"
            assert cell.phase == "Pending"
            assert not backend.observe(ref).exists
            continue
        assert decision == Settled(), (name, decision)
        assert cell.phase == model.state, name
        assert cell.observed_generation == cell.generation, name
        ready = cell.condition("Ready")
        assert ready is not None and ready["status"] == "True", name
        observed = backend.observe(ref)
        if model.state == "Sleeping":
            assert not observed.exists, name
        else:
            assert observed.exists, name
            assert observed.running == (model.state == "Running"), name
            assert observed.runtime_hash == runtime_hash(cell.spec, db.hash_key), name
        vol = volumes.for_cell(db.conn, cell.id)
        assert vol is not None and backend.volume_exists(vol.id), name
        if model.fork_of is not None:
            snap = record(db, "Snapshot", model.fork_of)
            assert vol.from_snapshot_id == snap.id
            assert cell.extra["forked_from"] == snap.id
    for name, smodel in world.snaps.items():
        snap = record(db, "Snapshot", name)
        decision = decide(ctx, "Snapshot", snap.id)
        if smodel.taken:
            assert decision == Settled(), (name, decision)
            assert snap.phase == "Ready" and snap.extra["consistency"] == "metadata"
            assert backend.checkpoint_exists(snap.id)
        elif smodel.cell_gone:
            assert isinstance(decision, Blocked) and decision.message, (name, decision)
            assert snap.phase == "Failed"
        else:
            assert isinstance(decision, Wait), (name, decision)
            assert decision.reason == "WaitingForCell"
            assert snap.extra["checkpoint_ref"] is None


def check_idempotent(ctx: Context) -> None:
    """A second converge over every object records nothing and calls no mutating backend method."""
    db = ctx.db
    ops, calls = op_count(db), len(fake(ctx).calls())
    events = db.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    versions = db.conn.execute(
        "SELECT group_concat(id || ':' || resource_version) FROM "
        "(SELECT id, resource_version FROM cells UNION ALL "
        " SELECT id, resource_version FROM snapshots ORDER BY id)").fetchone()[0]
    report = converge_all(ctx, all_keys(db))
    assert report.operations == []
    assert op_count(db) == ops
    assert len(fake(ctx).calls()) == calls
    assert db.conn.execute("SELECT count(*) FROM events").fetchone()[0] == events
    assert db.conn.execute(
        "SELECT group_concat(id || ':' || resource_version) FROM "
        "(SELECT id, resource_version FROM cells UNION ALL "
        " SELECT id, resource_version FROM snapshots ORDER BY id)").fetchone()[0] == versions


def no_failed_operations(db: Database) -> None:
    failed = db.conn.execute("SELECT object_name, message FROM operations "
                             "WHERE status != ?", (operations.OpStatus.SUCCEEDED,)).fetchall()
    assert [tuple(r) for r in failed] == []


# -- the properties ----------------------------------------------------------------------------


@HYPOTHESIS
@given(world=worlds(), data=st.data())
def test_converged_world_plans_nothing_the_second_time(world: World, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        db = open_database(Path(tmp) / "state")
        try:
            with context_for(db) as ctx:
                result = apply(db, *world.docs())
                assert all(c.outcome == "created" for c in result.changes)
                converge_all(ctx, result.to_reconcile)
                world.settle()
                no_failed_operations(db)
                check_converged(ctx, world)
                check_idempotent(ctx)

                # version 2: edit the same objects, delete some cells
                changes = data.draw(edits(world), label="edits")
                deleting = []
                for name, (what, value) in changes.items():
                    model = world.cells[name]
                    if what == "state":
                        model.state = value
                    elif what == "spec":
                        model.spec = value
                    elif what == "labels":
                        model.labels = value
                    else:
                        deleting.append(name)
                docs = [d for d in world.docs() if d["metadata"]["name"] not in deleting]
                apply(db, *docs)
                for name in deleting:
                    desired.delete(db, "Cell", name)
                    world.cells[name].deleted = True
                converge_all(ctx, all_keys(db))
                world.settle()
                no_failed_operations(db)
                check_converged(ctx, world)
                check_idempotent(ctx)
        finally:
            db.close()


@HYPOTHESIS
@given(spec=specs(), steps=st.lists(
    st.tuples(st.sampled_from(STATES), st.booleans()), min_size=1, max_size=6))
def test_any_sequence_of_state_and_spec_changes_converges_idempotently(
        spec: dict[str, Any], steps: list[tuple[str, bool]]) -> None:
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        db = open_database(Path(tmp) / "state")
        try:
            with context_for(db) as ctx:
                world = World({"o0": CellModel("o0", "Running", spec=spec)}, {})
                apply(db, world.cells["o0"].doc())
                converge_all(ctx)
                check_converged(ctx, world)
                check_idempotent(ctx)
                for i, (state, touch_spec) in enumerate(steps):
                    model = world.cells["o0"]
                    model.state = state
                    if touch_spec:
                        model.spec = dict(model.spec, image=f"image-{i}")
                    apply(db, model.doc())
                    converge_all(ctx)
                    no_failed_operations(db)
                    check_converged(ctx, world)
                    check_idempotent(ctx)
        finally:
            db.close()


# -- explicit transitions ----------------------------------------------------------------------


@pytest.mark.parametrize("via", ["apply", "set_cell_state"])
def test_running_sleeping_running_stopped(db: Database, ctx: Context, via: str) -> None:
    world = World({"o0": CellModel("o0", "Running", spec={"image": "busybox"})}, {})
    apply(db, world.cells["o0"].doc())
    converge_all(ctx)
    check_converged(ctx, world)
    check_idempotent(ctx)
    actions = [operations.for_object(db.conn, record(db, "Cell", "o0").id, 1)[0]["action"]]
    for state in ("Sleeping", "Running", "Stopped"):
        world.cells["o0"].state = state
        if via == "apply":
            apply(db, world.cells["o0"].doc())
        else:
            desired.set_cell_state(db, "o0", state)
        converge_all(ctx)
        check_converged(ctx, world)
        check_idempotent(ctx)
        cell = record(db, "Cell", "o0")
        actions.append(operations.for_object(db.conn, cell.id, 1)[0]["action"])
    assert actions == ["create", "sleep", "wake", "stop"]
    assert op_count(db) == 4
    cell = record(db, "Cell", "o0")
    assert cell.generation == 4 and cell.observed_generation == 4
    # one volume for the cell's whole life
    assert db.conn.execute("SELECT count(*) FROM volumes").fetchone()[0] == 1


def test_reapplying_the_same_manifests_is_a_no_op(db: Database, ctx: Context) -> None:
    docs = [cell_doc("api", env=[{"name": "X", "value": "1"}]), snapshot_doc("snap", "api"),
            cell_doc("exp", fork_of="snap")]
    apply(db, *docs)
    converge_all(ctx)
    again = apply(db, *docs)
    assert [c.outcome for c in again.changes] == ["unchanged"] * 3
    assert again.to_reconcile == []
    check_idempotent(ctx)
