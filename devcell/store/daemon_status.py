"""The daemon's own status: who runs, what it watches, and whether its manifests are valid.

`devcell get controllers` shows it, and `devcell get cells` warns when a watched file is bad.
"""

from __future__ import annotations

import json
import sqlite3

from devcell.names import printable
from devcell.store import faults
from devcell.store.clock import now
from devcell.store.db import Database

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Protocol

    class _Holder(Protocol):
        @property
        def pid(self) -> int: ...
        @property
        def host(self) -> str: ...
        @property
        def since(self) -> str: ...
        @property
        def manifests(self) -> str | None: ...

NAME = "controller"


def started(db: Database, holder: _Holder) -> None:
    from devcell.store import objects  # here: `get` reads this table without objects' records

    conditions = objects.set_condition([], "ManifestsValid", "True", "Synced", "not synced yet")
    with db.write() as conn:
        conn.execute(
            "INSERT INTO controllers (name, pid, host, started_at, stopped_at, manifests, "
            "conditions, updated_at) VALUES (?, ?, ?, ?, NULL, ?, ?, ?) ON CONFLICT(name) DO "
            "UPDATE SET pid = excluded.pid, host = excluded.host, started_at = excluded.started_at,"
            " stopped_at = NULL, manifests = excluded.manifests, conditions = excluded.conditions,"
            " updated_at = excluded.updated_at",
            (NAME, holder.pid, holder.host, holder.since, holder.manifests,
             json.dumps(conditions), now()))


def stopped(db: Database) -> None:
    with db.write() as conn:
        conn.execute("UPDATE controllers SET stopped_at = ?, updated_at = ? WHERE name = ?",
                     (now(), now(), NAME))


def report_manifests(db: Database, problems: list[str]) -> None:
    """Set the ManifestsValid condition; written only when it changes."""
    row = db.conn.execute("SELECT conditions FROM controllers WHERE name = ?", (NAME,)).fetchone()
    old = faults.loads(row[0]) if row else []
    from devcell.store import objects  # here: `get` reads this table without objects' records

    if problems:
        problems = [printable(p) for p in problems]  # file names and quoted input: escaped
        message = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        new = objects.set_condition(old, "ManifestsValid", "False", "InvalidManifest",
                                    message + " — their objects keep their last applied state")
    else:
        new = objects.set_condition(old, "ManifestsValid", "True", "Synced",
                                    "every manifest file is valid")
    if new == old:
        return
    with db.write() as conn:
        conn.execute("UPDATE controllers SET conditions = ?, updated_at = ? WHERE name = ?",
                     (json.dumps(new), now(), NAME))


def read(conn: sqlite3.Connection) -> dict[str, Any] | None:
    try:
        row = conn.execute("SELECT * FROM controllers WHERE name = ?", (NAME,)).fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    return dict(row, conditions=faults.loads(row["conditions"]))
