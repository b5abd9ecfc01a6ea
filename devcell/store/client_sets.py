"""What each API client applied from each of its paths, so that `apply --prune` through the API
prunes as it does on the state directory.

On the state directory a prune deletes the objects applied from under the paths given to
`apply -f` whose documents are gone: each object records the file it came from (its source).
An apply through the API is one stream, recorded like `apply -f -` (source `-`: its paths are
the client's, on another machine, and must never be read as the server's: a build context, a
host command's folder). So the client says which of its paths each part of the stream was
read from (`from=LINE:PATH`), and the server keeps, beside the objects, which objects each
user applied from each of their paths: a row of `applied_sources` keyed `api:USER:PATH`
(never a file's key: a file's is absolute, so no prune of the server's files reaches these,
nor these a file's), its entries `(kind, name, object id)`.

A prune through the API then deletes what the caller's applies recorded under the paths it
gives (those paths, or folders above them) that this apply does not declare: only objects
still live under the same id (one deleted and made again is another's), still applied
through the API (one a file or the watched directory applied since is theirs) and matching
the selector when one is given. Each object is in one path's entries at most (the latest
apply of it, as an object's source is), and what a prune removed leaves its path's entries.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from devcell.store import faults, objects, sources

if TYPE_CHECKING:
    from devcell.manifests.selectors import Selector

PREFIX = "api:"
STDIN = "-"
Origins = tuple[tuple[int, str], ...]
"""(the stream's line, the client's path its documents from there on were read from; `-`:
standard input, recorded under no path)."""


@dataclass(frozen=True)
class ClientSet:
    """One apply through the API: who sent it, where its parts were read, whether it prunes."""

    user: str
    origins: Origins
    prune: bool = False
    selector: Selector | None = None
    may_delete: Callable[[sqlite3.Connection, str, str], None] | None = None
    """Raises (errors.Forbidden, naming its rule) when the caller may not delete the object
    (kind, name) a prune would: the whole apply is then refused, nothing recorded."""

    @property
    def roots(self) -> list[str]:
        return sorted({path for _, path in self.origins if path != STDIN})


def key(user: str, path: str) -> str:
    return f"{PREFIX}{user}:{path}"


def path_at(origins: Origins, line: int) -> str:
    """The client's path the stream's `line` was read from (`-` before the first origin)."""
    found = STDIN
    for first, path in sorted(origins):
        if first <= line:
            found = path
    return found


def under(path: str, roots: Iterable[str]) -> bool:
    """`path` is one of `roots` or under one (a trailing slash or not)."""
    return any(path in (r, r.rstrip("/")) or path.startswith(r.rstrip("/") + "/")
               for r in roots)


def _rows(conn: sqlite3.Connection, prefix: str) -> list[tuple[str, list[sources.Entry]]]:
    rows = conn.execute("SELECT path, objects FROM applied_sources WHERE substr(path, 1, ?) = ?",
                        (len(prefix), prefix)).fetchall()
    return [(row[0], [(e[0], e[1], e[2]) for e in faults.loads(row[1])]) for row in rows]


def candidates(conn: sqlite3.Connection, applied: ClientSet, keep: set[tuple[str, str]]
               ) -> list[tuple[str, str, str]]:
    """(kind, name, id) of each live object the caller applied under its roots that `keep`
    does not hold (and the selector matches): what its prune deletes."""
    mine = key(applied.user, "")
    roots = applied.roots
    out: dict[tuple[str, str], str] = {}
    for path, entries in _rows(conn, mine):
        if not under(path[len(mine):], roots):
            continue
        for kind, name, object_id in entries:
            if (kind, name) in keep or (kind, name) in out:
                continue
            record = objects.get(conn, kind, object_id)
            if record is None or record.id != object_id or record.source != STDIN:
                continue
            if applied.selector is not None and not applied.selector.matches(record.labels):
                continue
            out[(kind, name)] = object_id
    return [(kind, name, object_id) for (kind, name), object_id in sorted(out.items())]


def remember(conn: sqlite3.Connection, applied: ClientSet,
             placed: Sequence[tuple[int, str, str, str]]) -> None:
    """Record what this apply placed: (line, kind, name, id) of each object it declared. Each
    leaves every other path's entries (anyone's: the latest apply of an object is its
    origin). What a prune deleted stays while its deletion is not done (the next prune says
    it again, as a prune on the state directory finishes one a crash interrupted); with a
    prune, the caller's paths under its roots drop what is gone."""
    by_path: dict[str, dict[tuple[str, str], str]] = {}
    declared: set[tuple[str, str]] = set()
    for line, kind, name, object_id in placed:
        declared.add((kind, name))
        path = path_at(applied.origins, line)
        if path != STDIN:
            by_path.setdefault(key(applied.user, path), {})[(kind, name)] = object_id
    mine = key(applied.user, "")
    for path, entries in _rows(conn, PREFIX):
        swept = applied.prune and path.startswith(mine) and under(path[len(mine):],
                                                                  applied.roots)
        kept = {(k, n): i for k, n, i in entries
                if (k, n) not in declared and not (swept and _gone(conn, k, i))}
        if path in by_path:
            kept.update(by_path.pop(path))
        _write(conn, path, kept, before=len(entries))
    for path, found in by_path.items():
        _write(conn, path, found, before=-1)


def _gone(conn: sqlite3.Connection, kind: str, object_id: str) -> bool:
    record = objects.get(conn, kind, object_id)
    return record is None or record.id != object_id


def _write(conn: sqlite3.Connection, path: str, entries: dict[tuple[str, str], str],
           *, before: int) -> None:
    if not entries:
        if before >= 0:
            sources.forget(conn, path)
        return
    listed = [(k, n, i) for (k, n), i in sorted(entries.items())]
    if before == len(listed) and before >= 0:
        row = conn.execute("SELECT objects FROM applied_sources WHERE path = ?",
                           (path,)).fetchone()
        if row is not None and [list(e) for e in listed] == json.loads(row[0]):
            return  # unchanged: no write
    sources.remember(conn, path, "", listed)
