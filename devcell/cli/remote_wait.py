"""`devcell wait` through a server (cli/remote.py), and the waits `apply` and `delete` do
after the server recorded their changes: the object's document read again until its
condition holds (reconciler.waiting.judge, the rule `wait` applies on a state directory),
it is gone, or the time runs out. The server's daemon converges; this only watches."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from devcell import ids
from devcell.errors import NotFound, UsageError
from devcell.names import name_problem, printable

POLL_S = 0.2
"""How often an object's document is read again while waiting."""
PLURAL = {"Cell": "cells", "Snapshot": "snapshots"}


class Waited:
    """How one wait ended: `failed` (why) or None when the condition was met; `gated`: it
    failed because an operation of the object waits for approval."""

    def __init__(self, name: str, failed: str | None = None, *, gated: bool = False) -> None:
        self.name, self.failed, self.gated = name, failed, gated


def until(client: Any, kind: str, name: str, *, condition: str, want: str, deadline: float,
          timeout: float, appear: bool = False, given: float | None = None) -> Waited:
    """Wait for `kind` `name`'s condition (`delete`: gone); `appear`: a name not recorded yet
    is waited for too (`wait`'s rule), else it is the answer (NotFound)."""
    from devcell.reconciler import waiting

    detail = "not recorded yet"
    while True:
        try:
            doc = client.get(PLURAL[kind], name)
        except NotFound:
            if condition == "delete":
                return Waited(name)
            if not appear:
                return Waited(name, "it was deleted")
            doc = None
        if doc is not None:
            shown = str(doc.get("metadata", {}).get("name", name))
            if condition == "create":
                return Waited(shown)
            gate = awaiting_approval(doc, shown)
            if gate is not None:
                return Waited(shown, gate, gated=True)
            if condition == "delete":
                detail = f"phase {doc.get('status', {}).get('phase', '?')}"
            else:
                status = doc.get("status") or {}
                outcome = waiting.judge(kind, int(doc["metadata"].get("generation") or 0),
                                        status.get("observedGeneration"),
                                        str(status.get("phase")), status,
                                        condition=condition, want=want)
                if outcome.done:
                    return Waited(shown)
                if outcome.failed:
                    return Waited(shown, outcome.failed)
                detail = outcome.detail
        if time.monotonic() >= deadline:
            if doc is None and condition != "delete":
                raise NotFound(f'{kind.lower()} "{name}" not found (waited '
                               f'{given if given is not None else timeout:g}s for '
                               f"it to be created){_close(client, kind, name)}")
            return Waited(name, f"timed out after {timeout:.3g}s: {detail}")
        time.sleep(POLL_S)


def awaiting_approval(doc: dict[str, Any], name: str) -> str | None:
    """Why waiting for an object is over when an operation of it waits for approval, as
    `wait` says it on a state directory (reconciler.waiting.check: the operation, its gate,
    the command that approves it), from the Ready condition the daemon recorded; None if none
    does. (A deletion waited for would wait until the time ran out.)"""
    import re

    from devcell.controllers.plan import resume_command

    for cond in (doc.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready" \
                and cond.get("reason") == "AwaitingApproval":
            message = str(cond.get("message") or "")
            found = re.match(r"operation (op_[0-9a-z]+) ", message)
            if found is not None:
                return f"{message}; approve it with `{resume_command(found.group(1), name)}`"
    return None


def _close(client: Any, kind: str, name: str) -> str:
    """The server's '; did you mean "NAME"?' for a name not recorded."""
    try:
        client.get(PLURAL[kind], name)
    except NotFound as exc:
        said = str(exc)
        return said[said.index(";"):] if ";" in said else ""
    return ""


def run_wait(args: argparse.Namespace) -> int:
    """`wait` as cmd_controller.run_wait waits on a state directory, each object's document
    read through the server."""
    from devcell.cli.cmd_get import NAMES_AND_SELECTOR

    client = args.remote
    if not args.names and not args.selector:
        raise UsageError(f"wait needs a NAME or -l SELECTOR (e.g. devcell wait "
                         f"{args.kind.lower()} api --for condition=Ready)")
    if args.names and args.selector:
        raise UsageError(NAMES_AND_SELECTOR)
    names = list(dict.fromkeys(args.names))
    for name in names:
        problem = None if ids.looks_like_id(name) else name_problem(name)
        if problem:
            raise UsageError(f"{args.kind.lower()} name {printable(name)!r} can never be "
                             f"recorded: {problem}")
    if args.selector:
        from devcell.manifests import selectors

        selectors.parse(args.selector)  # refused here, as on a state directory
        listed = client.rows(PLURAL[args.kind], selector=args.selector)
        names = [item["row"]["name"] for item in listed.get("items", [])
                 if item["row"].get("deleted_at") is None]
        if not names:
            raise NotFound("no matching resources found")
    condition, want = args.condition
    deadline = time.monotonic() + args.timeout
    for name in names:
        left = max(deadline - time.monotonic(), 0.0)
        done = until(client, args.kind, name, condition=condition, want=want,
                     deadline=time.monotonic() + left, timeout=left, appear=True,
                     given=args.timeout)
        what = f"{args.kind.lower()}/{done.name}"
        if done.failed is not None:
            sys.stderr.write(printable(f"error: {what}: {done.failed}") + "\n")
            return 1
        if condition == "create":
            sys.stdout.write(printable(f"{what} created") + "\n")
        else:
            met = "deleted" if condition == "delete" else f"condition met ({condition}={want})"
            sys.stdout.write(printable(f"{what} {met}") + "\n")
    return 0
