"""`devcell gc`: reclaim what nothing references, in every backend the state directory uses.

Runs in the calling process under the reconcile lock (so no inline reconcile runs beside it)
whether or not a daemon holds the lease: what a collection removes is by then referenced by
nothing, and ids are never reused, so a daemon's concurrent work cannot come to need it.
Without a daemon, operations a dead process left Running are failed first (as every inline
converge does) and the trees killed removals left are cleared. A deletion that waits for
approval is named, with the command that gives it, daemon or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import backends
from devcell.controllers.context import Context
from devcell.errors import BackendUnavailable
from devcell.reconciler import gc as engine
from devcell.reconciler import lease
from devcell.store import db as dbmod
from devcell.store import guard, objects, storage_lock


@dataclass(frozen=True)
class GCReport:
    collected: tuple[engine.Collected, ...] = ()
    """One per backend."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Backend -> why it could not be collected (its engine unreachable)."""
    recovered: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    """Deletions asked for before and left undone (a killed `devcell delete`), finished now
    ("snapshot/NAME"); in a dry run, those that would be."""
    unfinished: dict[str, str] = field(default_factory=dict)
    """Such deletions still not done -> why (failed, waiting for a fork, ...)."""
    awaiting: dict[str, str] = field(default_factory=dict)
    """Deletions that wait for approval (not interrupted: the user is asked) -> how to give it."""

    @property
    def ok(self) -> bool:
        return not self.unavailable and all(
            c.error is None and not c.failed for c in self.collected)

    def document(self) -> dict[str, Any]:
        """What `devcell gc` says, as data (the API's answer; the CLI prints this, here and
        through a server): each backend's planned removals (`keptBecause`: judged again and
        kept; `freedBytes`: freed, or what a dry run would free when measured; neither: its
        removal failed, in `failed`), those that need --approve, and how the rest went."""
        from devcell.controllers.gc import Verdict

        def item(j: Any) -> dict[str, Any]:
            return {"kind": str(j.item.kind), "id": j.item.id, "why": j.why}

        backends = []
        for c in self.collected:
            kinds = {j.item.id: str(j.item.kind) for j in c.planned}
            backends.append({
                "backend": c.backend, "operation": c.op_id, "error": c.error,
                "planned": [{**item(j), "keptBecause": c.kept.get(j.item.id),
                             "freedBytes": c.freed.get(j.item.id)} for j in c.planned],
                "needsApproval": [item(j) for j in c.judged
                                  if j.verdict is Verdict.NEEDS_APPROVAL],
                "failed": [{"kind": kinds.get(i, "resource"), "id": i, "why": why}
                           for i, why in c.failed.items()]})
        return {"finished": list(self.finished), "unfinished": dict(self.unfinished),
                "awaiting": dict(self.awaiting), "backends": backends,
                "unavailable": dict(self.unavailable), "ok": self.ok}


def collect(state_dir: Path, *, approve: bool = False, dry_run: bool = False) -> GCReport:
    """Judge and (unless dry_run) remove each backend's unreferenced volumes and checkpoints;
    approve: also orphans that hold files."""
    from devcell.controllers.context import Context
    from devcell.reconciler import converge, recovery

    if not guard.database_exists(state_dir):  # nothing was ever recorded: nothing to judge
        return GCReport()
    db = dbmod.open_database(state_dir)
    ctx = Context(db, trigger="gc", approve=approve)
    collected = []
    unavailable: dict[str, str] = {}
    recovered: list[str] = []
    finished: list[str] = []
    unfinished: dict[str, str] = {}
    awaiting: dict[str, str] = {}
    try:
        if lease.current_holder(state_dir) is None:  # else the daemon finishes them
            finished, unfinished, awaiting = _finish_deletions(ctx, dry_run=dry_run)
        else:  # but not one that waits for the user's approval: it is named all the same
            awaiting = _awaiting_deletions(ctx)
        with converge.reconcile_lock(ctx), storage_lock.collecting(state_dir):
            if not dry_run and lease.current_holder(state_dir) is None:
                recovered = sorted({op for op, _, _ in recovery.recover_interrupted(db)})
                recovery.remove_dead_temporaries(state_dir)
            for name in backends.holding(state_dir, objects.backends_in_use(db.conn)):
                try:
                    collected.append(engine.collect(ctx, name, approve=approve, dry_run=dry_run))
                except BackendUnavailable as exc:
                    unavailable[name] = str(exc)
    finally:
        ctx.close()
        db.close()
    return GCReport(tuple(collected), unavailable, tuple(recovered), tuple(finished),
                    unfinished, awaiting)


def _finish_deletions(ctx: Context, *, dry_run: bool
                      ) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Carry out the deletions a dead process asked for and never finished (the object
    stays Deleting, its bytes on disk, with no operation), as `devcell delete` again would:
    what a collection must reclaim first, since only then is nothing referencing it. One
    that waits for approval is named as such, never taken for interrupted.
    (finished, still not done -> why, awaiting approval -> how to approve)"""
    from devcell.reconciler import converge

    pending = objects.deleting(ctx.db.conn)
    shown = {key: f"{key[0].lower()}/{name}" for key, name in pending}
    awaiting = _awaiting_deletions(ctx, pending)
    left = {key: what for key, what in shown.items() if what not in awaiting}
    if dry_run or not left:  # one waiting for approval is the user's to approve, not gc's
        return list(left.values()), {}, awaiting
    report = converge.converge(ctx, list(left))
    finished, unfinished = [], {}
    for key, what in left.items():
        if objects.get(ctx.db.conn, key[0], key[1]) is None:
            finished.append(what)
        else:
            unfinished[what] = report.failed.get(key) or report.waiting.get(key) or "not done"
    return finished, unfinished, awaiting


def _awaiting_deletions(ctx: Context, pending: list[tuple[objects.Key, str]] | None = None
                        ) -> dict[str, str]:
    """The deletions asked for that wait for approval ("kind/NAME" -> how to give it)."""
    pending = objects.deleting(ctx.db.conn) if pending is None else pending
    return {f"{key[0].lower()}/{name}": why for key, name in pending
            if (why := _awaiting_approval(ctx, key[1])) is not None}


def _awaiting_approval(ctx: Context, object_id: str) -> str | None:
    """Why the deletion of `object_id` waits (for approval: a suspended operation), or None
    when it was left undone by a process that died."""
    from devcell.controllers.plan import resume_command
    from devcell.store import operations

    op = operations.suspended_for(ctx.db.conn, object_id)
    if op is None or op["reason"] != "AwaitingApproval":
        return None
    return (f"its deletion waits for approval (operation {op['id']}: {op['message']}); "
            f"approve it with `{resume_command(op['id'], op['object_name'])}`")
