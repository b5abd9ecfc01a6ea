"""Object names for shell completion: read-only, quick, and silent when there is nothing.

A TAB press must never create a state directory, take a lock, migrate or repair anything, nor
print an error into the user's command line: the database is opened read-only and any failure
means "no names". (SQLite itself may create the -wal and -shm files of a database in WAL mode
that no one has open; they are made owner-only, like the database.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from devcell import kinds
from devcell.errors import DevCellError
from devcell.store import faults

TABLES = {**{kind.plural: kind.table for kind in kinds.KINDS.values()}, "operations": "operations"}
"""What `names` can list: each kind's objects, and operations (by id)."""
LIMIT = 1000


def names(state_dir: Path, what: str, prefix: str = "") -> list[str]:
    """Names (ids for operations) of live `what` starting with `prefix`, sorted."""
    table = TABLES.get(what)
    path = state_dir / "state.db"
    if table is None or not path.is_file():
        return []
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    if table == "operations":
        sql = ("SELECT id FROM operations WHERE id LIKE ? ESCAPE '\\' "
               "ORDER BY created_at DESC LIMIT ?")
    else:
        sql = (f"SELECT name FROM {table} WHERE deleted_at IS NULL AND name LIKE ? ESCAPE '\\' "
               "ORDER BY name LIMIT ?")
    # SQLite gives a -wal or -shm it creates state.db's own (owner-only) mode.
    try:
        conn = faults.connect(path, timeout=0.5, read_only=True)
        try:
            rows = conn.execute(sql, (pattern, LIMIT)).fetchall()
        finally:
            conn.close()
    except (sqlite3.Error, OSError, DevCellError):
        return []
    return sorted(str(r[0]) for r in rows if isinstance(r[0], str) and r[0].startswith(prefix))
