"""`devcell gc`: arguments in, one devcell.api call, what it removed (and would not) printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from devcell.api import gc
from devcell.api.render import size
from devcell.cli import converge_output as output
from devcell.names import printable
from devcell.store import db as dbmod


def run_gc(args: argparse.Namespace) -> int:
    with output.terminal(args.verbose):
        report = gc.collect(dbmod.resolve_state_dir(args.state_dir), approve=args.approve,
                            dry_run=args.dry_run)
    return print_report(args, report.document())


def print_report(args: argparse.Namespace, doc: dict[str, Any]) -> int:
    """What gc did (GCReport.document: here, and through a server), and its exit code."""
    out, err = sys.stdout, sys.stderr
    verb = "would remove" if args.dry_run else "removed"
    total = 0
    for what in doc["finished"]:
        out.write(f"{printable(what)}: {'would finish' if args.dry_run else 'finished'} "
                  "its interrupted deletion\n")
    for what, why in doc["unfinished"].items():
        out.write(f"{printable(what)}: its deletion is still not done: {printable(why)}\n")
    for what, why in doc["awaiting"].items():
        out.write(f"{printable(what)}: {printable(why)}\n")
    for done in doc["backends"]:
        for item in done["planned"]:
            what = f"{printable(item['kind'])}/{printable(item['id'])}"
            freed = item["freedBytes"]
            if item["keptBecause"] is not None:
                out.write(f"{what} kept: {printable(item['keptBecause'])}\n")
            elif freed is not None or args.dry_run:
                total += freed or 0
                out.write(f"{what} {verb} ({size(freed or 0)}): {printable(item['why'])}\n")
        if not args.approve:
            for item in done["needsApproval"]:
                out.write(f"{printable(item['kind'])}/{printable(item['id'])} kept: "
                          f"{printable(item['why'])}; `devcell gc --approve` removes it\n")
        for item in done["failed"]:
            err.write(f"error: {printable(item['kind'])}/{printable(item['id'])}: not removed: "
                      f"{printable(item['why'])}\n")
        if done["error"] is not None:
            err.write(f"error: {printable(done['backend'])}: operation "
                      f"{printable(str(done['operation']))}: {printable(done['error'])}\n")
    for name, why in doc["unavailable"].items():
        err.write(f"error: backend {printable(name)} not collected: {printable(why)}\n")
    ops = [printable(c["operation"]) for c in doc["backends"] if c["operation"]]
    recorded = f" (operation {', '.join(ops)})" if ops else ""
    out.write(f"{'would free' if args.dry_run else 'freed'} {size(total)}{recorded}\n")
    return 0 if doc["ok"] else 1
