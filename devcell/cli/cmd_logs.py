"""`devcell logs CELL [SERVICE] [-f] [--tail N] [--since D] [--timestamps]`: a cell's service
logs, read as hostile files in bounded amounts, printed escaped."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from devcell import names
from devcell.api import log_lines, logs
from devcell.backends.base import CellRef
from devcell.backends.log_source import ServiceLogs
from devcell.cli.cell_open import open_cell
from devcell.errors import UsageError

if TYPE_CHECKING:
    from devcell.api.attach import Attached

_Tail = logs.Tail  # the tests' name for it


def run_logs(args: argparse.Namespace) -> int:
    try:
        since = (None if args.since is None
                 else log_lines.since_cutoff(args.since, time.time()))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    attached = open_cell(args, verb="showing its logs as last written")
    try:
        if args.sidecar is not None:
            _print_sidecar(args, attached, since)
            return 0
        _say_sidecars(attached.ref)
        _print_logs(args, attached.ref, attached.interactive().log_sources(attached.ref), since)
    except KeyboardInterrupt:  # Ctrl-C ends a follow normally, also while the backlog prints
        if not args.follow:
            raise
    finally:
        attached.close()
    return 0


def _options(args: argparse.Namespace, since: str | None) -> logs.Options:
    return logs.Options(service=args.service, tail=None if args.tail < 0 else args.tail,
                        since=since, timestamps=args.timestamps, follow=args.follow)


def _say_sidecars(ref: CellRef) -> None:
    """Which sidecars the cell has: their output is the engine's, not in these logs."""
    found = logs.sidecar_names(ref)
    if found:
        shown = ", ".join(names.printable(n) for n in found)
        sys.stderr.write(f"devcell: cell {names.printable(ref.name)} has sidecars ({shown}): "
                         f"devcell logs {names.printable(ref.name)} --sidecar NAME shows "
                         "one's output\n")


def _print_sidecar(args: argparse.Namespace, attached: Attached, since: str | None) -> None:
    logs.sidecar(attached, args.sidecar, _options(args, since))


def _print_logs(args: argparse.Namespace, ref: CellRef, service_logs: ServiceLogs,
                since: str | None) -> None:
    logs.services(ref, service_logs, _options(args, since))
