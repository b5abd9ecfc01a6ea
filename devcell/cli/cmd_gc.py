"""`devcell gc`: arguments in, one devcell.api call, what it removed (and would not) printed."""

from __future__ import annotations

import argparse
import sys

from devcell.api import gc
from devcell.api.render import size
from devcell.cli import converge_output as output
from devcell.controllers.gc import Verdict
from devcell.names import printable
from devcell.store import db as dbmod


def run_gc(args: argparse.Namespace) -> int:
    with output.terminal(args.verbose):
        report = gc.collect(dbmod.resolve_state_dir(args.state_dir), approve=args.approve,
                            dry_run=args.dry_run)
    out, err = sys.stdout, sys.stderr
    verb = "would remove" if args.dry_run else "removed"
    total = 0
    for what in report.finished:
        out.write(f"{printable(what)}: {'would finish' if args.dry_run else 'finished'} "
                  "its interrupted deletion\n")
    for what, why in report.unfinished.items():
        out.write(f"{printable(what)}: its deletion is still not done: {printable(why)}\n")
    for what, why in report.awaiting.items():
        out.write(f"{printable(what)}: {printable(why)}\n")
    for done in report.collected:
        for judged in done.planned:
            item = judged.item
            what = f"{item.kind}/{printable(item.id)}"
            if item.id in done.kept:
                out.write(f"{what} kept: {printable(done.kept[item.id])}\n")
            elif item.id in done.freed or args.dry_run:
                freed = done.freed.get(item.id, 0)
                total += freed
                out.write(f"{what} {verb} ({size(freed)}): {printable(judged.why)}\n")
        for judged in done.judged:
            if judged.verdict is Verdict.NEEDS_APPROVAL and not args.approve:
                out.write(f"{judged.item.kind}/{printable(judged.item.id)} kept: "
                          f"{printable(judged.why)}; `devcell gc --approve` removes it\n")
        for item_id, why in done.failed.items():
            kind = next((j.item.kind for j in done.planned if j.item.id == item_id), "resource")
            err.write(f"error: {kind}/{printable(item_id)}: not removed: {printable(why)}\n")
        if done.error is not None:
            err.write(f"error: {done.backend}: operation {done.op_id}: "
                      f"{printable(done.error)}\n")
    for name, why in report.unavailable.items():
        err.write(f"error: backend {name} not collected: {printable(why)}\n")
    ops = [c.op_id for c in report.collected if c.op_id]
    recorded = f" (operation {', '.join(ops)})" if ops else ""
    out.write(f"{'would free' if args.dry_run else 'freed'} {size(total)}{recorded}\n")
    return 0 if report.ok else 1
