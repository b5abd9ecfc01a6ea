"""`devcell snapshot restore`: arguments in, one devcell.api call, what it did printed.

A dry run prints the plan and what would be replaced. A restore waiting at its approval gate
prints `cell/NAME restore waiting for approval`, then on stderr what it would replace and
the `devcell op resume` command that approves it (exit 1), as `delete` does.
"""

from __future__ import annotations

import argparse
import sys

from devcell.api import restore as api
from devcell.cli import converge_output as output
from devcell.names import printable
from devcell.store import db as dbmod


def _say(text: str) -> None:
    sys.stdout.write(printable(text) + "\n")


def run_snapshot_restore(args: argparse.Namespace) -> int:
    result = api.restore(
        dbmod.resolve_state_dir(args.state_dir), args.snapshot, cell=args.cell,
        safety=args.safety, dry_run=args.dry_run,
        options=output.options(args, approve=args.approve),
        hooks=output.hooks(args, lambda recorded: None))
    p = result.preview
    if args.dry_run:
        _preview(p)
        return 0
    assert result.report is not None
    if result.done:
        safety = f"; safety snapshot/{p.safety} holds what was there" if p.safety else ""
        _say(f"cell/{p.cell} restored from snapshot/{p.snapshot}{safety}"
             f" (operation {result.operation})")
    elif result.awaiting is not None:
        _say(f"cell/{p.cell} restore waiting for approval")
        if result.report.converged.holder is not None:  # inline, the report says it below
            sys.stderr.write(printable(
                f"error: cell/{p.cell}: operation {result.operation} {result.awaiting}; "
                f"approve it with `devcell op resume {result.operation} --input "
                f"confirm={p.cell}` (or pass --approve)") + "\n")
            return 1
    elif result.failed is not None:
        _say(f"cell/{p.cell} restore failed")
        if result.report.ok:
            sys.stderr.write(printable(f"error: cell/{p.cell}: {result.failed}") + "\n")
            return 1
    else:
        _say(f"cell/{p.cell} restore requested")
    return output.exit_code(result.report)


def _preview(p: api.Preview) -> None:
    _say(f"cell/{p.cell} would be restored from snapshot/{p.snapshot} (dry run)")
    steps = (["stop"] if p.running else []) + (["checkpoint (safety)"] if p.safety else []) \
        + ["restore-workspace"] + (["start"] if p.running else [])
    _say(f"  steps: {', '.join(steps)}")
    _say(f"  safety snapshot: {p.safety}" if p.safety else
         "  safety snapshot: none (--no-safety-snapshot)")
    since = f"snapshot/{p.changed_since}" if p.changed_since else "creation (no snapshot yet)"
    if p.changes is not None:
        _say(f"  changed since {since}: {p.changes.summary()}")
    _say("  approval: needed (--approve, or `devcell op resume` once it waits)"
         if p.needs_approval else "  approval: not needed")
