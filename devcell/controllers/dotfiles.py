"""When a cell's dotfiles (`spec.dotfiles`) are installed, and what the cell's status says of
them: the cell controller's part of backends/dotfiles.py.

A cell's home lives in its runtime (the container's writable layer, the vm's root disk), so
the dotfiles are installed once per runtime: after the start that follows its create, and
again only when spec.dotfiles changes. Stopping and starting, or waking a saved machine,
keeps them; a runtime made again (an update, a sleep that released it, a fork's own) starts
from the image and gets them again. The record in `status.dotfiles` names the spec's digest
it was made for and is dropped when a runtime is created, so a crash between the create and
the install installs on the next reconcile. A failed install script keeps the cell running
but not Ready (reason DotfilesFailed, its output's tail in the message and the event) until
spec.dotfiles changes or the runtime is made again: the developer gets in and fixes it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.backends.base import Outputs
from devcell.controllers.plan import Step
from devcell.controllers.steps import StepName
from devcell.manifests.model import digest
from devcell.store import events, objects
from devcell.store.clock import now

KIND = "Cell"
FAILED = "DotfilesFailed"
SHOWN_OUTPUT = 2000
"""Characters of a failed install's output shown in the condition and the event."""


def wanted(spec: dict[str, Any]) -> str | None:
    """The digest of spec.dotfiles (None: the cell has none)."""
    dotfiles = spec.get("dotfiles")
    return digest(dotfiles) if dotfiles else None


def plan(cell: objects.ObjectRecord, steps: list[Step]) -> Step | None:
    """The install step a plan that leaves the cell running needs, if any: none recorded for
    this spec, or a runtime about to be created (its home starts empty)."""
    want = wanted(cell.spec)
    if want is None:
        return None
    recorded = (cell.status.get("dotfiles") or {}).get("digest")
    if recorded == want and not any(s.name == StepName.CREATE for s in steps):
        return None
    return Step(StepName.INSTALL_DOTFILES, {"digest": want})


def forget(conn: sqlite3.Connection, cell_id: str) -> None:
    """A runtime was created: whatever was installed in the previous one is gone."""
    fresh = objects.get(conn, KIND, cell_id)
    if fresh is None or "dotfiles" not in fresh.status:
        return
    status = {k: v for k, v in fresh.status.items() if k != "dotfiles"}
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)


def record(conn: sqlite3.Connection, cell_id: str, step: Step, outputs: Outputs) -> None:
    """The install's result in the cell's status, and an event saying it."""
    fresh = objects.get(conn, KIND, cell_id)
    if fresh is None:
        return
    result = {"digest": step.args["digest"], "state": outputs.get("state"),
              "commit": outputs.get("commit"), "target": outputs.get("target"),
              "how": outputs.get("how"), "exitCode": outputs.get("exitCode"), "at": now()}
    if outputs.get("output") is not None:
        result["output"] = str(outputs["output"])[-SHOWN_OUTPUT:]
    objects.write_status(conn, fresh, phase=fresh.phase,
                         status=dict(fresh.status, dotfiles=result),
                         observed_generation=fresh.observed_generation)
    failed = result["state"] != "Installed"
    message = _failure(result) if failed else (
        f"dotfiles at {result['target']} (commit {str(result['commit'])[:12]}): {result['how']}")
    events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                  reason=FAILED if failed else "DotfilesInstalled",
                  message=message,
                  type="Warning" if failed else "Normal")


def not_ready(spec: dict[str, Any], status: dict[str, Any]) -> str | None:
    """Why the cell is not Ready because of its dotfiles (None: they are no reason)."""
    result = status.get("dotfiles") or {}
    if result.get("state") in (None, "Installed") or result.get("digest") != wanted(spec):
        return None
    return _failure(result)


def _failure(result: dict[str, Any]) -> str:
    output = str(result.get("output") or "").strip()
    return (f"the dotfiles install ({result.get('how')}, in {result.get('target')}) exited "
            f"with status {result.get('exitCode')}; the cell runs: get in with `devcell "
            "exec` or ssh and fix it, then change spec.dotfiles to install again"
            + (f"; its output ends: {output}" if output else ""))
