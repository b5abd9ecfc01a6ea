"""Find what a backend holds that the database does not account for, and deal with it.

Backends tag everything they make with its owner (a cell id; for checkpoints, the snapshot or
sleep id). After a crash, a restart sweeps: a resource whose owner is a live object is left to
the controllers (which adopt an unrecorded volume or checkpoint instead of making another);
a resource whose owner is gone, or was never recorded, is removed. Each removal is an event.

Except a volume or checkpoint that holds files, or a vm cell's machine (its root disk and
memory may hold the user's work; a running one is never ended here). A database restored
from an old backup, or a crash between the copy and the commit, can leave the user's work
unaccounted for; removing a workspace is a destructive step that needs a recorded decision
(as `delete` asks approval for a changed workspace), and the sweep has none. It keeps such a
resource and records an `OrphanKept` warning naming its path, so the user can copy what
matters and then remove it with `devcell gc --approve` (the recorded decision: an
operation), or restore the database that recorded it.

The sweep also drops the caches a backend keeps per cell (the container backend's build
digests) of cells that no longer exist: derived data, so neither an event nor a decision.
"""

from __future__ import annotations

from devcell.backends.base import Backend, CellRef, KeepsCellCaches, Owned, OwnedKind
from devcell.controllers.context import Context
from devcell.errors import DevCellError
from devcell.log import logger
from devcell.store import events, objects


def sweep(ctx: Context, backend_name: str) -> list[Owned]:
    """Remove orphans from one backend; returns what was removed."""
    backend = ctx.backend(backend_name)
    cells, snaps, sleeps = objects.accounted_for(ctx.db.conn)
    removed = []
    for item in backend.list_owned():
        if item.kind == OwnedKind.CHECKPOINT:
            # A snapshot's checkpoint, or the sleep checkpoint its cell's status names.
            keep = item.id in snaps or item.id in sleeps
        else:
            keep = item.cell_id in cells
        if keep:
            continue
        if item.content is not None:
            _kept(ctx, backend_name, item)
            continue
        try:
            if item.kind == OwnedKind.CELL:
                backend.delete(_ref(item))
            elif item.kind == OwnedKind.VOLUME:
                backend.delete_volume(item.id)
            else:
                backend.delete_checkpoint(item.id)
        except DevCellError as exc:
            logger.warning("could not remove orphan {} {}: {}", item.kind, item.id, exc)
            continue
        removed.append(item)
        with ctx.db.write() as conn:
            events.record(conn, kind="Controller", object_id=item.cell_id, name="controller",
                          reason="OrphanRemoved", type="Warning",
                          message=f"{backend_name} {item.kind} {item.id} (owner {item.cell_id}) "
                                  "was not accounted for by the state database; removed")
        logger.warning("removed orphan {} {} of {}", item.kind, item.id, item.cell_id)
    prune_cell_caches(backend, frozenset(cells))
    return removed


def prune_cell_caches(backend: Backend, live_cell_ids: frozenset[str]) -> list[str]:
    """Drop the backend's per-cell caches of cells the database no longer has (a cache holds
    nothing of the user's: no event, no approval); returns the cell names dropped."""
    if not isinstance(backend, KeepsCellCaches):
        return []
    try:
        dropped = backend.prune_cell_caches(live_cell_ids)
    except OSError as exc:
        logger.warning("could not prune the caches of deleted cells: {}", exc)
        return []
    if dropped:
        logger.info("dropped the caches of {} deleted cells: {}", len(dropped),
                    ", ".join(dropped))
    return dropped


def _kept(ctx: Context, backend_name: str, item: Owned) -> None:
    with ctx.db.write() as conn:
        events.record(conn, kind="Controller", object_id=item.cell_id, name="controller",
                      reason="OrphanKept", type="Warning",
                      message=f"{backend_name} {item.kind} {item.id} (owner {item.cell_id}) is "
                              "not accounted for by the state database but holds files "
                              f"({item.content}); kept: a workspace is removed only on a "
                              "recorded decision. Copy what matters, then remove it with "
                              "`devcell gc --approve`, or restore the database that recorded it")
    logger.warning("kept orphan {} {} of {}: it holds files ({})", item.kind, item.id,
                   item.cell_id, item.content)


def _ref(item: Owned) -> CellRef:
    return CellRef(item.cell_id, item.cell_id, {}, None)
