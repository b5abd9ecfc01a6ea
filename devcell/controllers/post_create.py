"""What a cell's status says of its postCreate hooks: the cell controller's part of them.

The backend runs `hooks.postCreate` once per runtime, after its first start and before its
services (backends/supervisor.py holds them). A hook that fails leaves the cell running but
not Ready (reason PostCreateFailed, the hook's output tail in the message, `describe` and an
event), so the developer can get in with `exec` or ssh and see why; it runs again only when
asked (`devcell cell rerun-hooks`, a recorded operation) or when its inputs change (the
hook's text or the image: the runtime is then made again), never on a plain re-apply, and not
on a runtime made again on the root filesystem kept from one where the same hooks succeeded
(what they installed is there). The record in `status.postCreate` is dropped when a runtime is
created.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from devcell.backends.base import Outputs
from devcell.store import events, objects
from devcell.store.clock import now

KIND = "Cell"
FAILED = "PostCreateFailed"
SHOWN_OUTPUT = 2000
"""Characters of a failed hook's output kept in the status."""


def forget(conn: sqlite3.Connection, cell_id: str) -> None:
    """A runtime was created: whatever its predecessor's hooks did is gone."""
    fresh = objects.get(conn, KIND, cell_id)
    if fresh is None or "postCreate" not in fresh.status:
        return
    status = {k: v for k, v in fresh.status.items() if k != "postCreate"}
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)


def record(conn: sqlite3.Connection, cell_id: str, outputs: Outputs) -> None:
    """A step that ran postCreate (a first start, a rerun): its result in the cell's status,
    and an event saying it. Outputs without a postCreate result change nothing."""
    state = outputs.get("postCreate")
    fresh = objects.get(conn, KIND, cell_id)
    if state not in ("Succeeded", "Failed") or fresh is None:
        return
    result: dict[str, Any] = {"state": state, "at": now()}
    if state == "Failed":
        result.update(hook=outputs.get("hook"), exitCode=outputs.get("exitCode"),
                      output=str(outputs.get("output") or "")[-SHOWN_OUTPUT:])
    status = dict(fresh.status, postCreate=result)
    objects.write_status(conn, fresh, phase=fresh.phase, status=status,
                         observed_generation=fresh.observed_generation)
    failed = state == "Failed"
    events.record(conn, kind=KIND, object_id=fresh.id, name=fresh.name,
                  reason=FAILED if failed else "PostCreateSucceeded",
                  message=failure(fresh.name, result) if failed else
                  "postCreate hooks succeeded; the services start",
                  type="Warning" if failed else "Normal")


def not_ready(name: str, status: dict[str, Any]) -> str | None:
    """Why the cell is not Ready because of its postCreate hooks (None: they are no reason)."""
    result = status.get("postCreate") or {}
    if result.get("state") != "Failed":
        return None
    return failure(name, result)


def failure(name: str, result: dict[str, Any]) -> str:
    code = result.get("exitCode")
    how = f"exited with status {code}" if code is not None else "did not finish in time"
    output = str(result.get("output") or "").strip()
    return (f"postCreate hook {result.get('hook')!r} {how}; the cell runs without its "
            f"services: get in with `devcell exec {name}` or ssh, fix it, then "
            f"`devcell cell rerun-hooks {name}`" + (f"; its output ends: {output}" if output
                                                     else ""))
