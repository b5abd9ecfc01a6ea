"""`devcell port-forward CELL [LOCAL:]REMOTE... [--address 127.0.0.1]`: relay local ports to a
running cell's ports until Ctrl-C (api/port_forward.py)."""

from __future__ import annotations

import argparse
import os
import sys
import threading

from devcell import names
from devcell.cli.cell_open import open_cell
from devcell.store import activity, forwards
from devcell.store import db as dbmod


def run_port_forward(args: argparse.Namespace) -> int:
    from devcell.api import port_forward

    mappings = port_forward.parse(args.ports)
    address = port_forward.loopback(args.address)
    attached = open_cell(args, verb="forwarding anyway", by="port-forward")
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    try:
        forwarder = port_forward.Forwarder(
            attached, mappings, address,
            on_error=lambda message: sys.stderr.write(f"error: {names.printable(message)}\n"),
            activity=activity.Connections(state_dir, attached.ref.id, "port-forward"))
        shown = f"[{address}]" if ":" in address else address
        for item in forwarder.listening:
            sys.stdout.write(f"Forwarding from {shown}:{item.local} -> {item.remote}\n")
        sys.stdout.flush()
        noted = forwards.record(state_dir, forwards.Forward(
            os.getpid(), attached.ref.id, address,
            tuple((item.local, item.remote) for item in forwarder.listening)))
        try:
            forwarder.serve(threading.Event())
        except KeyboardInterrupt:  # Ctrl-C is how a forward ends, as kubectl's
            return 0
        finally:
            noted.unlink(missing_ok=True)
            forwarder.close()
    finally:
        attached.close()
    return 0
