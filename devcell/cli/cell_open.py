"""Opening a cell for a command that works on it (exec, logs, ssh, port-forward, code): its
backend and reference after one look at its runtime, waking it first when the command needs
it awake. Apart from cmd_exec so that `logs` does not import the terminal handling (termios,
tty) exec needs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from devcell import names
from devcell.cli import log_sink

if TYPE_CHECKING:
    from devcell.api.attach import Attached


def open_cell(args: argparse.Namespace, *, verb: str, by: str = "") -> Attached:
    """The cell's backend and reference, after observing its runtime (api/attach.py); a
    runtime that drifted is said on stderr, with what the command does anyway (`verb`). A
    sleeping cell is woken first for `by` (ssh, exec, port-forward), and that is said."""
    from devcell.api.attach import attach

    log_sink.configure(args.verbose)
    attached = attach(args.state_dir, args.cell)
    if by and attached.phase == "Sleeping":
        attached.close()
        wake_for(args, by)
        attached = attach(args.state_dir, args.cell)
    if attached.drift is not None:
        name = names.printable(attached.ref.name)
        sys.stderr.write(f"warning: cell {name}: its runtime {attached.drift.seen} (recorded "
                         f"{attached.drift.recorded}); `devcell cell start {name}` repairs it; "
                         f"{verb}\n")
    return attached


def wake_for(args: argparse.Namespace, by: str) -> None:
    """Wake the sleeping cell for `by`, saying so on stderr (api/wake.py)."""
    from devcell.api import wake
    from devcell.store import db as dbmod

    name = names.printable(args.cell)
    sys.stderr.write(f"cell {name} is asleep; waking it for {by}...\n")
    sys.stderr.flush()
    woken = wake.wake(dbmod.resolve_state_dir(args.state_dir), args.cell, by=by)
    if woken.fallback is not None:
        sys.stderr.write(f"cell {name}: resuming its saved machine failed "
                         f"({names.printable(woken.fallback)}); booted cold from its kept "
                         "workspace instead: its processes were not restored\n")
    else:
        sys.stderr.write(f"cell {name} woken in {woken.seconds:.1f}s: "
                         f"{names.printable(woken.note)}\n")
    sys.stderr.flush()
