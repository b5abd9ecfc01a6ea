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
from typing import TYPE_CHECKING

from devcell.names import printable

if TYPE_CHECKING:  # the verbs' records, imported where they are built or compared: the
    # remote verbs print a server's answer with these printers and converge nothing here
    from devcell.api.converging import Hooks, Options
    from devcell.api.reports import Recorded, Report
    from devcell.store.desired import Change


def options(args: argparse.Namespace, *, wait: bool = True, approve: bool = False,
            workers: int | None = None) -> Options:
    """The converge options of a command: its --timeout and --run-store, and the flags only
    some commands have (--wait, --approve, --workers)."""
    from devcell.api.converging import Options

    return Options(timeout=args.timeout, wait=wait, approve=approve, workers=workers,
                   run_store=args.run_store)


def hooks(args: argparse.Namespace, on_recorded: Callable[[Recorded], None]) -> Hooks:
    from devcell.api.converging import Hooks

    return Hooks(on_recorded=on_recorded, inline=lambda: terminal(args.verbose))


DELETIONS = ("deleted", "pruned")
"""Outcomes that claim an object is gone: printed once converging says whether it is."""


class Changes:
    """Print one line per object: `kind/name not found` (skipped), then `kind/name outcome`.

    A deletion is printed only once converging says what happened (`settled`): `deleted` when
    it is done (or left to the daemon), `deletion waiting for approval` when a gate stopped it,
    `deletion requested` when it is recorded but not done; the error lines say why and what to
    do. In a dry run (a suffix), every line is printed as recorded."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix
        self.deferred: list[Change] = []

    def __call__(self, recorded: Recorded) -> None:
        out = sys.stdout
        out.write("".join(printable(f"{kind.lower()}/{name} not found") + "\n"
                          for kind, name in recorded.missing))
        for c in recorded.changes:
            if c.outcome in DELETIONS and not self.suffix:
                self.deferred.append(c)
            else:
                out.write(printable(f"{c.kind.lower()}/{c.name} {c.outcome}{self.suffix}") + "\n")
        out.flush()

    def unsettled(self) -> None:
        """The verb stopped before converging said anything (interrupted, an error): the
        deletions it recorded are requested, no more."""
        for c in self.deferred:
            sys.stdout.write(printable(f"{c.kind.lower()}/{c.name} deletion requested") + "\n")
        self.deferred.clear()
        sys.stdout.flush()

    def settled(self, report: Report) -> None:
        results = {(o.kind, o.name): o for o in report.converged.objects}
        if self.deferred:  # a server's answer printed by a remote verb usually has none
            from devcell.api.reports import Status
        for c in self.deferred:
            result = results.get((c.kind, c.name))
            if result is None or result.status is Status.SETTLED:
                what = c.outcome
            elif result.awaiting_approval is not None:
                what = "deletion waiting for approval"
            else:
                what = "deletion requested"
            sys.stdout.write(printable(f"{c.kind.lower()}/{c.name} {what}") + "\n")
        self.deferred.clear()
        for name in report.converged.expired:  # retention applied by this converge
            sys.stdout.write(printable(f"snapshot/{name} expired") + "\n")
        sys.stdout.flush()


def changes(suffix: str = "") -> Changes:
    return Changes(suffix)


def exit_code(report: Report, shown: Changes | None = None) -> int:
    """Print the deletions `shown` deferred, then an error line for whatever did not settle;
    0 when everything did, else 1."""
    from devcell.api.reports import Status

    if shown is not None:
        shown.settled(report)
    converged = report.converged
    op = converged.operation
    if op is not None and op.status is not Status.SETTLED:
        what = f"failed: {op.message}" if op.status is Status.FAILED else op.message
        sys.stderr.write(printable(f"error: operation {op.op_id} {what}") + "\n")
    by = (f" (reconciled by the controller, {converged.holder.describe()})"
          if converged.holder is not None else "")
    for o in converged.problems:
        sys.stderr.write(printable(f"error: {o.kind.lower()}/{o.name}: {o.message}{by}") + "\n")
    for o in converged.retention_pending:
        sys.stderr.write(printable(f"warning: {o.kind.lower()}/{o.name}: retention not applied "
                                   f"yet ({o.message}); the next command or the daemon tries "
                                   "again") + "\n")
    return 0 if report.ok else 1


@contextmanager
def terminal(verbose: int) -> Iterator[None]:
    """Log sinks at the -v level and, on a terminal, progress bars, while a verb converges."""
    from devcell import progress
    from devcell.cli import log_sink

    log_sink.configure(verbose)
    previous = progress.install(progress.TerminalBars() if sys.stderr.isatty() else None)
    try:
        yield
    finally:
        progress.install(previous)
