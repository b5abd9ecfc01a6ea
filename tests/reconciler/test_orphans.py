"""The orphan sweep over the fake backend: what the backend lists (Backend.list_owned) and the
database does not account for is removed, with an event; everything live is left alone."""

from __future__ import annotations

from devcell.backends.base import CellRef, OwnedKind
from devcell.controllers.context import Context
from devcell.reconciler import orphans
from devcell.store import events
from devcell.store.db import Database
from tests.controllers.support import apply, cell_doc, converge_all, fake, snapshot_doc


def test_sweep_removes_only_what_the_database_does_not_account_for(ctx: Context,
                                                                   db: Database) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    assert converge_all(ctx).ok
    backend = fake(ctx)
    live = {(o.kind, o.id) for o in backend.list_owned()}
    assert {kind for kind, _ in live} == set(OwnedKind)  # a cell, its volume, the snapshot's
    stray = CellRef("cell_stray", "stray", {}, "vol_stray")  # its operation died uncommitted
    backend.create_volume(stray, "vol_stray", from_checkpoint=None)
    backend.create(stray, "hash-1")
    backend.checkpoint(stray, "snap_stray")

    removed = orphans.sweep(ctx, "fake")

    assert {(o.kind, o.id) for o in removed} == {
        (OwnedKind.CELL, "cell_stray"), (OwnedKind.VOLUME, "vol_stray"),
        (OwnedKind.CHECKPOINT, "snap_stray")}
    assert {(o.kind, o.id) for o in backend.list_owned()} == live
    reasons = [(e["reason"], e["message"]) for e in events.for_object(db.conn, "cell_stray")]
    assert len(reasons) == 3 and all(r == "OrphanRemoved" for r, _ in reasons)
    assert any("fake volume vol_stray (owner cell_stray)" in m for _, m in reasons)
    assert orphans.sweep(ctx, "fake") == []  # nothing left to remove
