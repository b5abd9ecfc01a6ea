"""Print what a library verb (devcell.api) recorded and how converging ended, kubectl-style.

Also what the terminal shows while a verb converges inline: the log sinks (-v) and, on a
terminal, progress bars for long workspace copies. The verb calls these through its Hooks, so
they are set up only when something is reconciled in this process.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from devcell.api.converging import Hooks, Options
from devcell.api.reports import Recorded, Report, Status
from devcell.names import printable


def options(args: argparse.Namespace, *, wait: bool = True, approve: bool = False,
            workers: int | None = None) -> Options:
    """The converge options of a command: its --timeout and --run-store, and the flags only
    some commands have (--wait, --approve, --workers)."""
    return Options(timeout=args.timeout, wait=wait, approve=approve, workers=workers,
                   run_store=args.run_store)


def hooks(args: argparse.Namespace, on_recorded: Callable[[Recorded], None]) -> Hooks:
    return Hooks(on_recorded=on_recorded, inline=lambda: terminal(args.verbose))


def changes(suffix: str = "") -> Callable[[Recorded], None]:
    """Print one line per object: `kind/name not found` (skipped), then `kind/name outcome`."""
    def show(recorded: Recorded) -> None:
        out = sys.stdout
        out.write("".join(printable(f"{kind.lower()}/{name} not found") + "\n"
                          for kind, name in recorded.missing))
        out.write("".join(printable(f"{c.kind.lower()}/{c.name} {c.outcome}{suffix}") + "\n"
                          for c in recorded.changes))
        out.flush()
    return show


def exit_code(report: Report) -> int:
    """Print an error line for whatever did not settle; 0 when everything did, else 1."""
    converged = report.converged
    op = converged.operation
    if op is not None and op.status is not Status.SETTLED:
        what = f"failed: {op.message}" if op.status is Status.FAILED else op.message
        sys.stderr.write(printable(f"error: operation {op.op_id} {what}") + "\n")
    by = (f" (reconciled by the controller, {converged.holder.describe()})"
          if converged.holder is not None else "")
    for o in converged.problems:
        sys.stderr.write(printable(f"error: {o.kind.lower()}/{o.name}: {o.message}{by}") + "\n")
    return 0 if report.ok else 1


@contextmanager
def terminal(verbose: int) -> Iterator[None]:
    """Log sinks at the -v level and, on a terminal, progress bars, while a verb converges."""
    from devcell import progress
    from devcell.cli import logs

    logs.configure(verbose)
    previous = progress.install(progress.TerminalBars() if sys.stderr.isatty() else None)
    try:
        yield
    finally:
        progress.install(previous)
