"""Never take a lost database for a fresh install, nor another program's database for DevCell's.

A state directory whose `state.db` is missing, empty or truncated to nothing, while the
directory still holds what an earlier database recorded (workspace volumes, checkpoints,
container run directories, vm machines and disks, the fake backend's records: every
backend's guarded roots in devcell/backend_registry.py), is refused: starting afresh there
would make every one of those look unaccounted for, and the daemon's orphan sweep would then
remove them. The fix is the user's (restore the database, or move the leftovers out first),
named in the message. A database that holds tables but not DevCell's schema is refused too,
rather than having DevCell's tables written into it.

Both checks cost nothing on the common path: they run only when the database is missing,
empty, or not at DevCell's latest schema version.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from devcell.errors import StateUnusable, StorageError

OWN_TABLES = frozenset({"migrations", "cells", "operations"})


def leftovers(state_dir: Path) -> list[str]:
    """What in `state_dir` an earlier database recorded, as `volumes/ (2 entries)` and so on:
    the guarded storage roots of every backend in the registry (devcell/backend_registry.py)."""
    from devcell import backend_registry

    return backend_registry.held(state_dir, (root for backend in backend_registry.BACKENDS
                                             for root in backend.roots if root.guarded))


def database_exists(state_dir: Path) -> bool:
    """Whether `state_dir` has a state database; False only for a fresh state directory. A
    missing database beside what an earlier one recorded is refused (StateUnusable), so
    that no caller reads a lost database as "nothing recorded" (`wait --for delete` saying
    deleted, `image prune` taking every image for unused)."""
    path = state_dir / "state.db"
    if path.exists():
        return True
    refuse_leftovers(state_dir, path)
    return False


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
