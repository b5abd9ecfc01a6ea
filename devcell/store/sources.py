"""What each manifest file held when it was last applied, so an unchanged file need not be
parsed again: the no-op re-apply fast path."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3

from devcell.store import faults
from devcell.store.clock import now

Entry = tuple[str, str, str]
"""(kind, name, manifest_hash) of one object in a file."""


def seal(key: bytes, digest: str) -> str:
    """What is recorded of a file's digest: keyed, since a file's bytes hold its secrets
    (a plain SHA-256 of a file whose other lines are known gives a short secret away)."""
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def recorded(conn: sqlite3.Connection, paths: list[str]) -> dict[str, tuple[str, list[Entry]]]:
    """path -> (sealed digest, entries) for the given paths that were applied before."""
    out: dict[str, tuple[str, list[Entry]]] = {}
    if not paths:
        return out
    for start in range(0, len(paths), 500):
        chunk = paths[start:start + 500]
        marks = ",".join("?" for _ in chunk)
        for row in conn.execute(
            f"SELECT path, digest, objects FROM applied_sources WHERE path IN ({marks})", chunk
        ):
            out[row[0]] = (row[1], [(e[0], e[1], e[2]) for e in faults.loads(row[2])])
    return out


def remember(conn: sqlite3.Connection, path: str, digest: str, entries: list[Entry]) -> None:
    conn.execute(
        "INSERT INTO applied_sources (path, digest, objects, applied_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(path) DO UPDATE SET digest = excluded.digest, objects = excluded.objects, "
        "applied_at = excluded.applied_at",
        (path, digest, json.dumps(entries), now()),
    )


def forget(conn: sqlite3.Connection, path: str) -> None:
    conn.execute("DELETE FROM applied_sources WHERE path = ?", (path,))
