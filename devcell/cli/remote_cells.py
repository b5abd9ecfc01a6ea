"""`snapshot create|restore` and `cell sleep|start|fork|restart|rerun-hooks` through a server
(cli/remote.py).

Each is the cell's action route (POST /api/v1/cells/NAME/ACTION, server/actions.py: the
library call the verb makes on a state directory) asked to wait as the verb waits for a
running daemon (wait=true, --timeout); its answer is printed by converge_output's printer:
the same `kind/name outcome` lines, the same error line for an object that did not settle
(with the daemon that reconciles it, as the answer names it), the same exit code. A name
already recorded is recorded again as the verb records it (exclusive=false: `unchanged`),
which the server allows only for a snapshot of the same cell or a cell the caller may change.
A restore is its snapshot's route (POST /api/v1/snapshots/NAME/restore), said by
cmd_restore's printer.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from devcell.cli import converge_output as output
from devcell.names import printable

MAX_TIMEOUT_S = 3600
"""The longest wait the server accepts (openapi.MAX_TIMEOUT_S)."""


def run_snapshot_create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "exclusive": False}
    if args.ttl is not None:
        body["ttl"] = args.ttl
    if args.consistency is not None:
        body["consistency"] = args.consistency
    return _act(args, "snapshot", body)


def run_cell_fork(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"name": args.name, "snapshot": args.snapshot, "exclusive": False}
    if args.count is not None:
        body["count"] = args.count
    if args.port:
        body["ports"] = {str(inside): host for inside, host in args.port}
    if args.no_ports:
        body["publish"] = False
    return _act(args, "fork", body)


def run_cell_sleep(args: argparse.Namespace) -> int:
    code = _act(args, "sleep", None)
    kept = _kept(args.remote, args.cell) if code == 0 else None
    if kept:  # what the sleep kept, as its backend can keep it (cmd_cells.run_cell_sleep)
        print(printable(f"cell/{args.cell} {kept.removeprefix('cell is ')}"))
    return code


def run_cell_start(args: argparse.Namespace) -> int:
    return _act(args, "start", None)


def run_cell_restart(args: argparse.Namespace) -> int:
    return _act(args, "restart", {"service": args.service} if args.service else None)


def run_cell_rerun_hooks(args: argparse.Namespace) -> int:
    return _act(args, "rerun-hooks", None)


def run_snapshot_restore(args: argparse.Namespace) -> int:
    """The restore asked of the server (POST /api/v1/snapshots/NAME/restore, waited for as
    the verb waits for a running daemon) and said by cmd_restore's own printer."""
    from devcell.cli import cmd_restore

    sent = _seconds(args.timeout)
    doc = args.remote.restore_answer(args.snapshot, cell=args.cell, safety=args.safety,
                                     dry_run=args.dry_run, approve=args.approve, wait=True,
                                     timeout=sent)
    shown = cmd_restore.Said(
        str(doc["cell"]), str(doc["snapshot"]), doc.get("safety"), bool(doc.get("running")),
        doc.get("changedSince"), doc.get("changes"), bool(doc.get("needsApproval")),
        doc.get("operation"), bool(doc.get("done")), doc.get("awaiting"), doc.get("failed"))
    return cmd_restore.say(shown, dry_run=args.dry_run, held=True, ok=bool(doc.get("ok")),
                           finish=lambda: _unsettled(args, doc, sent))


def _act(args: argparse.Namespace, verb: str, body: dict[str, Any] | None) -> int:
    """The action asked for, waited for, and printed as the verb prints its report."""
    from devcell.cli.remote_apply import _recorded

    sent = _seconds(args.timeout)
    doc = args.remote.action(args.cell, verb, body, wait=True, timeout=sent)
    shown = output.changes()
    shown(_recorded(doc))
    shown.settled(_settled(doc))
    return _unsettled(args, doc, sent)


def _unsettled(args: argparse.Namespace, doc: dict[str, Any], sent: int) -> int:
    """An error line for each object of the answer that did not settle (the daemon named,
    a timeout in the command's own words), as converge_output.exit_code says it; the exit
    code."""
    by = (f" (reconciled by the controller, {doc['reconciledBy']})"
          if doc.get("reconciledBy") else "")
    said = f"timed out after {sent:g}s: "
    for result in doc.get("results", []):
        if result.get("status") == "settled":
            continue
        message = str(result.get("message", ""))
        if message.startswith(said):  # the time the command was given, as it says it
            message = f"timed out after {args.timeout:.3g}s: {message[len(said):]}"
        sys.stderr.write(printable(f"error: {str(result.get('kind', '')).lower()}/"
                                   f"{result.get('name')}: {message}{by}") + "\n")
    return 0 if doc.get("ok", True) else 1


def _settled(doc: dict[str, Any]) -> Any:
    """The answer as the report converge_output.Changes.settled reads (its expired
    snapshots: retention the action's converge applied)."""
    from types import SimpleNamespace

    return SimpleNamespace(converged=SimpleNamespace(objects=[],
                                                     expired=list(doc.get("expired", []))))


def _seconds(timeout: float) -> int:
    """--timeout as the server's timeoutSeconds: whole seconds, 1 to an hour."""
    return max(1, min(math.ceil(timeout), MAX_TIMEOUT_S))


def _kept(client: Any, cell: str) -> str | None:
    """What a sleeping cell kept, from its Ready condition (api.cells.kept)."""
    from devcell.errors import NotFound

    try:
        doc = client.get("cells", cell)
    except NotFound:
        return None
    status = doc.get("status") or {}
    if status.get("phase") != "Sleeping":
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("message") or "") or None
    return None
