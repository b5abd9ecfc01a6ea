"""Which cells an operation froze and has not yet resumed (`cells.frozen_at`): `get` shows
them as Frozen.

A snapshot freezes its cell (the cgroup freezer) between `quiesce` and `resume`; an operation
killed in between (SIGKILL, a power cut) leaves the cell frozen while its phase still says
Running: its dev server stops answering and nothing said why. The mark is written with the
quiesce step's record, before the checkpoint (the long part) starts, and cleared with the
resume step's, or when the cell controller observes the cell running unfrozen (it resumes a
frozen cell it finds). It is display state, not desired state: no resource version moves.
"""

from __future__ import annotations

import sqlite3

from devcell.store.clock import now


def mark(conn: sqlite3.Connection, cell_id: str) -> None:
    conn.execute("UPDATE cells SET frozen_at = ? WHERE id = ?", (now(), cell_id))


def clear(conn: sqlite3.Connection, cell_id: str) -> None:
    conn.execute("UPDATE cells SET frozen_at = NULL WHERE id = ? AND frozen_at IS NOT NULL",
                 (cell_id,))
