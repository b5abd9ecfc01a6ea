"""Never take a lost database for a fresh install, nor another program's database for DevCell's.

A state directory whose `state.db` is missing, empty or truncated to nothing, while the
directory still holds what an earlier database recorded (workspace volumes, checkpoints,
container run directories, the fake backend's records), is refused: starting afresh there
would make every one of those look unaccounted for, and the daemon's orphan sweep would then
remove them. The fix is the user's (restore the database, or move the leftovers out first),
named in the message. A database that holds tables but not DevCell's schema is refused too,
rather than having DevCell's tables written into it.

Both checks cost nothing on the common path: they run only when the database is missing,
empty, or not at DevCell's latest schema version.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from devcell.errors import StateUnusable, StorageError

LEFTOVERS = ("volumes", "images/checkpoints", "containers")
"""Directories (relative to the state directory) whose entries only a recorded object made."""
RECORDS = ("backends/fake.db",)
"""Files a backend writes only for objects the state database recorded."""
OWN_TABLES = frozenset({"migrations", "cells", "operations"})


def leftovers(state_dir: Path) -> list[str]:
    """What in `state_dir` an earlier database recorded, as `volumes/ (2 entries)` and so on."""
    found = []
    for rel in LEFTOVERS:
        try:
            with os.scandir(state_dir / rel) as entries:
                count = sum(1 for e in entries if not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            continue
        if count:
            found.append(f"{rel}/ ({count} entr{'y' if count == 1 else 'ies'})")
    for rel in RECORDS:
        try:
            if (state_dir / rel).stat().st_size > 0:
                found.append(rel)
        except OSError:
            continue
    return found


def refuse_leftovers(state_dir: Path, db_path: Path) -> None:
    """Refuse a missing or empty database beside what an earlier one recorded."""
    found = leftovers(state_dir)
    if not found:
        return
    what = "missing" if not db_path.exists() else "empty"
    raise StateUnusable(
        f"{db_path} is {what}, but {state_dir} still holds what an earlier database recorded "
        f"({', '.join(found)}); DevCell will not start afresh over them (they would be taken "
        "for orphans and removed). Restore state.db from a backup; or, to start afresh, move "
        f"those entries out of {state_dir} first (see docs/architecture.md, The store)",
        cause=StorageError.CORRUPT_DATABASE, path=str(db_path))


def refuse_foreign(conn: sqlite3.Connection, state_dir: Path, db_path: Path) -> None:
    """Refuse a database that is not DevCell's, or an empty one beside leftovers.

    Called only when the schema version is not the latest: a fresh database (version 0, no
    tables), one to upgrade (DevCell's tables present), or one that is not DevCell's.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    if version == 0 and not tables:
        refuse_leftovers(state_dir, db_path)
        return
    from devcell.store import migrations

    if version > migrations.LATEST:
        return  # a newer DevCell's: migrations.ensure_current says so
    if not OWN_TABLES <= tables:
        shown = ", ".join(sorted(tables)[:5]) or "none"
        raise StateUnusable(
            f"{db_path} is not a DevCell database (schema version {version}, tables: {shown}); "
            "DevCell will not write into another program's database: move it out of "
            f"{state_dir} (or point --state-dir elsewhere), or restore DevCell's state.db "
            "from a backup",
            cause=StorageError.CORRUPT_DATABASE, path=str(db_path))
