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


def test_sweep_never_removes_a_workspace_or_checkpoint_that_holds_files(
        ctx: Context, db: Database) -> None:
    """A database that does not know a volume (restored from an old backup, or lost and
    recreated by hand) must not make the sweep delete the user's work: a volume or checkpoint
    with files is kept and reported; an empty one, and an orphan container, are removed."""
    from devcell.backends.container.backend import ContainerBackend
    from devcell.backends.container.workspaces import WorkspaceStore
    from tests.backends.engine import require_engine

    require_engine()
    backend = ctx.backend("container")
    assert isinstance(backend, ContainerBackend)
    store: WorkspaceStore = backend.store
    for volume in ("vol_work", "vol_empty"):
        store.create_volume(cell_id="cell_gone", cell_name="gone", volume_id=volume,
                            from_checkpoint=None)
    work = store.layout.workspace("vol_work")
    (work / "src").mkdir()
    (work / "src" / "main.py").write_text("a week of work\n")
    store.checkpoint(checkpoint_id="snap_work", cell_id="cell_gone", volume_id="vol_work")
    store.checkpoint(checkpoint_id="snap_empty", cell_id="cell_gone", volume_id="vol_empty")

    removed = orphans.sweep(ctx, "container")

    assert {(o.kind, o.id) for o in removed} == {
        (OwnedKind.VOLUME, "vol_empty"), (OwnedKind.CHECKPOINT, "snap_empty")}
    assert (work / "src" / "main.py").read_text() == "a week of work\n"
    assert store.find_checkpoint("snap_work") is not None
    kept = [e["message"] for e in events.for_object(db.conn, "cell_gone")
            if e["reason"] == "OrphanKept"]
    assert len(kept) == 2 and any(str(work) in m for m in kept)
    assert orphans.sweep(ctx, "container") == []  # kept again, never removed
    assert (work / "src" / "main.py").exists()
