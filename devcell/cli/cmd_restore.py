"""`devcell snapshot restore`: arguments in, one devcell.api call, what it did printed.

A dry run prints the plan and what would be replaced. A restore waiting at its approval gate
prints `cell/NAME restore waiting for approval`, then on stderr what it would replace and
the `devcell op resume` command that approves it (exit 1), as `delete` does. The printing
(`say`) reads a Said, so that the same words come through a server (cli/remote_cells.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NamedTuple

from devcell.api import restore as api
from devcell.cli import converge_output as output
from devcell.names import printable
from devcell.store import db as dbmod


class Said(NamedTuple):
    """What the command says of a restore: its plan, and how it went."""

    cell: str
    snapshot: str
    safety: str | None
    running: bool
    changed_since: str | None
    changes: str | None
    """What it replaces that no snapshot holds, summed up (None: the backend cannot say)."""
    needs_approval: bool
    operation: str | None = None
    done: bool = False
    awaiting: str | None = None
    failed: str | None = None


def said(result: api.Restored) -> Said:
    p = result.preview
    return Said(p.cell, p.snapshot, p.safety, p.running, p.changed_since,
                p.changes.summary() if p.changes is not None else None, p.needs_approval,
                result.operation, result.done, result.awaiting, result.failed)


def _say(text: str) -> None:
    sys.stdout.write(printable(text) + "\n")


def run_snapshot_restore(args: argparse.Namespace) -> int:
    result = api.restore(
        dbmod.resolve_state_dir(args.state_dir), args.snapshot, cell=args.cell,
        safety=args.safety, dry_run=args.dry_run,
        options=output.options(args, approve=args.approve),
        hooks=output.hooks(args, lambda recorded: None))
    if args.dry_run:
        return say(said(result), dry_run=True)
    report = result.report
    assert report is not None
    return say(said(result), held=report.converged.holder is not None, ok=report.ok,
               finish=lambda: output.exit_code(report))


def say(s: Said, *, dry_run: bool = False, held: bool = False, ok: bool = True,
        finish: Callable[[], int] = lambda: 0) -> int:
    """Print the restore as the command says it: the plan of a dry run, else how it went
    (`held`: a daemon carries it out; `ok`: converging settled; `finish` prints what did not
    settle and gives the exit code)."""
    if dry_run:
        _preview(s)
        return 0
    if s.done:
        safety = f"; safety snapshot/{s.safety} holds what was there" if s.safety else ""
        _say(f"cell/{s.cell} restored from snapshot/{s.snapshot}{safety}"
             f" (operation {s.operation})")
    elif s.awaiting is not None:
        _say(f"cell/{s.cell} restore waiting for approval")
        if held:  # inline, the report says it below
            sys.stderr.write(printable(
                f"error: cell/{s.cell}: operation {s.operation} {s.awaiting}; "
                f"approve it with `devcell op resume {s.operation} --input "
                f"confirm={s.cell}` (or pass --approve)") + "\n")
            return 1
    elif s.failed is not None:
        _say(f"cell/{s.cell} restore failed")
        if ok:
            sys.stderr.write(printable(f"error: cell/{s.cell}: {s.failed}") + "\n")
            return 1
    else:
        _say(f"cell/{s.cell} restore requested")
    return finish()


def _preview(s: Said) -> None:
    _say(f"cell/{s.cell} would be restored from snapshot/{s.snapshot} (dry run)")
    steps = (["stop"] if s.running else []) + (["checkpoint (safety)"] if s.safety else []) \
        + ["restore-workspace"] + (["start"] if s.running else [])
    _say(f"  steps: {', '.join(steps)}")
    _say(f"  safety snapshot: {s.safety}" if s.safety else
         "  safety snapshot: none (--no-safety-snapshot)")
    since = f"snapshot/{s.changed_since}" if s.changed_since else "creation (no snapshot yet)"
    if s.changes is not None:
        _say(f"  changed since {since}: {s.changes}")
    _say("  approval: needed (--approve, or `devcell op resume` once it waits)"
         if s.needs_approval else "  approval: not needed")
