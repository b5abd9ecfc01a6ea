"""A cell's runtime hold: a state asked for by a runtime decision, not by its manifest.

`cell sleep`, `cell start` and an idle sleep decide what a cell does now; they are not a
change of what the manifest declares. So they are recorded beside the spec (`cells.held`,
JSON: state, by, reason, at), never in it: the spec and its manifest hash stay what was
applied, a re-apply of the unchanged manifest (by hand or by the GitOps daemon, whatever other
file changed) finds it unchanged and leaves the cell as it is held, and `get`/`describe`/`diff`
show both. Which wins:

- the hold, while the manifest's `spec.state` stays what it was when the hold was made;
- the manifest, as soon as an apply changes `spec.state` (to anything): the hold is cleared and
  an event says so. A manifest that says `state: Sleeping` is a declared sleep, not a hold.

A hold bumps the generation (what the reconciler converges moved) but not the spec hash.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from devcell.records import Record
from devcell.store import events
from devcell.store.clock import now
from devcell.store.objects import ObjectRecord

DEFAULT_STATE = "Running"


class Hold(Record):
    state: str
    """The state the cell is held in (Sleeping, Running, Stopped)."""
    by: str
    """Who decided: the verb (`cell sleep`, `cell start`) or `idle`."""
    at: str
    reason: str = ""
    """Why, in words (an idle sleep: how long it was idle and its last activity)."""

    def document(self) -> dict[str, str]:
        return {"state": self.state, "by": self.by, "at": self.at,
                **({"reason": self.reason} if self.reason else {})}

    def describe(self) -> str:
        """'held Sleeping by `cell sleep` at TIME (why)'."""
        why = f" ({self.reason})" if self.reason else ""
        return f"held {self.state} by `{self.by}` at {self.at}{why}"


def declared_state(spec: dict[str, Any]) -> str:
    """The state the manifest declares (Running when it says none)."""
    return str(spec.get("state") or DEFAULT_STATE)


def of(cell: ObjectRecord) -> Hold | None:
    raw = cell.extra.get("held")
    if not raw:
        return None
    found = json.loads(raw) if isinstance(raw, str) else raw
    return Hold(str(found["state"]), str(found.get("by", "")), str(found.get("at", "")),
                str(found.get("reason", "")))


def desired_state(cell: ObjectRecord) -> str:
    """The state the cell is to be in: its hold's, else its manifest's."""
    hold = of(cell)
    return hold.state if hold is not None else declared_state(cell.spec)


def write(conn: sqlite3.Connection, cell: ObjectRecord, hold: Hold | None) -> None:
    """Record (or clear, None) the hold, bumping the generation so the cell converges to it."""
    text = None if hold is None else json.dumps(hold.document())
    cur = conn.execute(
        "UPDATE cells SET held = ?, generation = generation + 1, "
        "resource_version = resource_version + 1, updated_at = ? "
        "WHERE id = ? AND resource_version = ?", (text, now(), cell.id, cell.resource_version))
    if cur.rowcount != 1:
        from devcell.errors import Conflict

        raise Conflict(f'cell "{cell.name}" was modified by someone else (resourceVersion '
                       f"{cell.resource_version} is stale); re-read and retry")
    cell.extra["held"] = text
    cell.generation += 1
    cell.resource_version += 1


def hold(conn: sqlite3.Connection, cell: ObjectRecord, state: str, *, by: str,
         reason: str = "") -> bool:
    """Hold `cell` in `state` (a runtime decision); False when it already is there.

    Asking for the state the manifest declares ends the hold instead: nothing is held
    against the manifest any more."""
    before = desired_state(cell)
    if before == state:
        return False
    if declared_state(cell.spec) == state:
        write(conn, cell, None)
        message = (f"desired state {before} -> {state} ({by}): the hold is ended, the "
                   f"manifest's state {state} is followed again")
    else:
        write(conn, cell, Hold(state, by, now(), reason))
        message = (f"desired state {before} -> {state} ({by}"
                   f"{': ' + reason if reason else ''}); held until `devcell cell "
                   f"{'start' if state != 'Running' else 'sleep'}` or a change of spec.state "
                   f"in its manifest (which declares {declared_state(cell.spec)})")
    events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason="StateChanged",
                  message=message)
    return True


def manifest_wins(conn: sqlite3.Connection, cell: ObjectRecord, new_spec: dict[str, Any]
                  ) -> bool:
    """An apply that changes `spec.state` ends the cell's hold (the manifest wins); True
    when a hold was ended. Called inside the apply's write, before the spec is updated."""
    current = of(cell)
    if current is None or declared_state(new_spec) == declared_state(cell.spec):
        return False
    conn.execute("UPDATE cells SET held = NULL WHERE id = ?", (cell.id,))
    cell.extra["held"] = None
    events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason="HoldEnded",
                  message=f"the manifest's state changed ({declared_state(cell.spec)} -> "
                          f"{declared_state(new_spec)}) and wins over the state "
                          f"{current.describe()}")
    return True
