"""One recorded cell, read from the state database opened read-only with plain sqlite3.

`devcell exec`'s fast path needs a cell's id, backend and recorded phase, nothing else, and
its whole budget is a few milliseconds: `Database` (migrations, guards, WAL set-up, the error
classes) and `objects` (dataclasses) cost more than that to import. This reads the one row and
answers None for anything unusual (no database, another schema version, a locked or damaged
file, no such cell), and the caller then takes the full path, which opens the database as
every command does and says what is wrong. Nothing is written: SQLite opens the file with
`mode=ro` (a first reader of a WAL database makes its -shm and -wal files, owner-only).

Through `_sqlite3`, the C module `sqlite3` wraps: `sqlite3`'s own import (datetime, its
adapters) costs ~1.7 ms more, a tenth of what the whole fast path may spend.
"""

from __future__ import annotations

import _sqlite3
import os

SCHEMA_VERSION = 12
"""`migrations.LATEST`, spelled out (importing migrations costs more than this whole read; a
test pins the two equal). A database at any other version is left to the full path, which
upgrades it or refuses it."""
BUSY_TIMEOUT_S = 5.0


class Glance:
    """What the fast path decides on: the cell, its backend, and whether its recorded phase
    is settled (Running, converged, not being deleted)."""

    __slots__ = ("id", "name", "backend", "phase", "converged", "deleting")

    def __init__(self, id: str, name: str, backend: str, phase: str, converged: bool,
                 deleting: bool) -> None:
        self.id, self.name, self.backend, self.phase = id, name, backend, phase
        self.converged, self.deleting = converged, deleting


def cell(state_dir: str, ref: str) -> Glance | None:
    """The live cell named `ref` (or with id `ref`), or None: not found, or not readable here
    (the full path says why)."""
    path = os.path.join(state_dir, "state.db")
    if not os.path.isfile(path) or not (path + ref).isascii() and not _utf8(path + ref):
        return None  # a non-UTF-8 argument (lone surrogates): the full path says not found
    uri = "file:" + path.replace("%", "%25").replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    # A first reader makes the WAL's -shm and -wal: SQLite gives them state.db's owner-only mode.
    try:
        conn = _sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except _sqlite3.Error:
        return None
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            return None
        # A name is a DNS-1123 label and an id holds a '_': `ref` can match one row at most.
        rows = conn.execute(
            "SELECT id, name, backend, phase, generation = observed_generation, "
            "deleting_at IS NOT NULL FROM cells WHERE deleted_at IS NULL AND (id = ? OR name = ?) "
            "LIMIT 2", (ref, ref)).fetchall()
    except _sqlite3.Error:
        return None
    finally:
        conn.close()
    if len(rows) != 1:
        return None
    found = rows[0]
    return Glance(str(found[0]), str(found[1]), str(found[2] or ""), str(found[3] or ""),
                  bool(found[4]), bool(found[5]))


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
