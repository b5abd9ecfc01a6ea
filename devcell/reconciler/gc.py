"""`devcell gc` for one backend: judge everything it holds, then remove what nothing needs.

The judging and the steps are the GC controller's (devcell.controllers.gc); this module lists
what the backend holds, plans one operation of removal steps and runs it through the same
executor as every other plan, so a collection is recorded (operations, steps, an event) and
a crash in it is recovered like any other operation's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devcell import failpoints
from devcell.backends.base import Measuring
from devcell.controllers import gc
from devcell.controllers.context import Context
from devcell.controllers.plan import Plan
from devcell.reconciler import executor, orphans
from devcell.store import references


@dataclass
class Collected:
    """What one backend's collection judged and did."""

    backend: str
    judged: list[gc.Judged] = field(default_factory=list)
    planned: list[gc.Judged] = field(default_factory=list)
    op_id: str | None = None
    freed: dict[str, int] = field(default_factory=dict)
    """Resource id -> bytes freed (for a dry run: what removing it would free)."""
    kept: dict[str, str] = field(default_factory=dict)
    """Resource id -> why a planned removal was kept after all (referenced by then)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Resource id -> why its removal failed: not removed, not counted as freed."""
    error: str | None = None


def collect(ctx: Context, backend_name: str, *, approve: bool = False,
            dry_run: bool = False) -> Collected:
    """Collect one backend's garbage (approve: orphans that hold files too)."""
    backend = ctx.backend(backend_name)
    refs = references.read(ctx.db.conn)
    out = Collected(backend_name)
    out.judged = [gc.judge(item, refs) for item in backend.list_owned()]
    wanted = {gc.Verdict.RECLAIM} | ({gc.Verdict.NEEDS_APPROVAL} if approve else set())
    out.planned = [j for j in out.judged if j.verdict in wanted]
    if not dry_run:
        orphans.prune_cell_caches(backend, refs.live_cells)
    if dry_run:
        if isinstance(backend, Measuring):
            out.freed = {j.item.id: backend.exclusive_bytes(j.item.kind, j.item.id)
                         for j in out.planned}
        return out
    if not out.planned:
        return out
    failpoints.hit("gc.planned")
    work = gc.GCWork()
    plan = Plan(gc.target(ctx.db.conn, backend_name), "gc",
                [gc.step_for(j) for j in out.planned], backend_name, work)
    result = executor.execute(ctx, gc.GCController(), plan)
    out.op_id, out.error = result.op_id, result.error
    out.freed, out.kept, out.failed = dict(work.freed), dict(work.skipped), dict(work.failed)
    return out
