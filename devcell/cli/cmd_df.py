"""`devcell df`: what the state directory takes on disk and what could be freed, by type, as
`docker system df` shows it; `-v` lists what each row counts. One devcell.api call, printed."""

from __future__ import annotations

import argparse
import sys

from devcell.api import df, render
from devcell.names import printable
from devcell.store import db as dbmod


def _share(part: int, whole: int) -> str:
    return f"{render.size(part)} ({round(100 * part / whole) if whole else 0}%)"


def run_df(args: argparse.Namespace) -> int:
    return print_report(args, df.df(dbmod.resolve_state_dir(args.state_dir)))


def print_report(args: argparse.Namespace, report: df.Report) -> int:
    """The warnings, then the table (with -v each type's items) or the document (here and
    through a server)."""
    for problem in report.problems:
        sys.stderr.write(f"warning: {printable(problem)}\n")
    if args.output in ("json", "yaml"):
        (render.as_json if args.output == "json" else render.as_yaml)(
            report.document(verbose=args.verbose >= 1))
        return 0
    render.table(["TYPE", "TOTAL", "ACTIVE", "SIZE", "RECLAIMABLE"],
                 [[r.type, r.total, r.active, render.size(r.size), _share(r.reclaimable, r.size)]
                  for r in report.rows])
    if args.verbose >= 1:
        for row in report.rows:
            items = [i for i in report.items if i.type == row.type]
            sys.stdout.write(f"\n{printable(row.type)}:\n")  # a server's, through --server
            if not items:
                sys.stdout.write("(none)\n")
                continue
            render.table(["NAME", "OWNER", "BACKEND", "ACTIVE", "SIZE", "LOGICAL", "DETAIL"],
                         [[i.name, i.owner, i.backend, "yes" if i.active else "no",
                           render.size(i.size),
                           "-" if i.logical is None else render.size(i.logical), i.detail or "-"]
                          for i in items])
    return 0
