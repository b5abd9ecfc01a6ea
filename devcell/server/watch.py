"""Watch: the changes of one resource after a version, from the state database.

The version is the change log's seq (store/changes.py: a row for every object each write
touched, written by triggers in the writing transaction), as a list's
`metadata.resourceVersion`. A watch of events sends each event after the version, exactly,
so a client that reconnects with the last version it saw misses none and gets none twice.
A watch of cells, snapshots or operations sends an object's whole record each time it
differs from the one last sent (ADDED, MODIFIED, DELETED); a resume from a version first
sends the objects the log names after it, as they are now, then follows as usual. A version
older than the log keeps is refused 410 Gone (the client lists again), one newer than its
newest 400.

Plain Python polled by the app (one short read per poll, none while nothing committed), so
one watch costs a connection and no thread of its own. The watches of the same objects (the
same resource, selector and names) share one reading of them (Shared). After a commit, the
first of them to look reads the log after the reading's version and re-reads only the
objects it names (cells and snapshots; operations, the newest 500, are read again only when
the log names one), in one read transaction; the others compare only those objects with
what they sent. A commit of 1 cell among 10,000 reads 1 row, not 10,000
(bench/api_list_watch.py); a reading too far behind the log, or naming more than
MOST_TOUCHED objects, reads them all as before, and its watches compare them all.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from typing import Any

from devcell.api import listing
from devcell.server.routes import Resource
from devcell.store import changes
from devcell.store.db import Database

MAX_EVENTS_PER_POLL = 500
MOST_TOUCHED = 500
"""More objects changed than this since a reading: read them all (one query over the
table costs less than naming 500 ids)."""
HISTORY = 256
"""The readings a Shared remembers the changed objects of, for watches that compare late."""
READ_BY_ID = ("Cell", "Snapshot")
"""The kinds a reading re-reads by id; operations are read whole (the newest 500: one that
scrolls out of them is DELETED, as it was) when the log names any."""

Reading = dict[str, tuple[dict[str, Any], str]]
"""Each object's id -> (its document, its key: the document as compared)."""


class Shared:
    """One reading of a resource's objects (those a selector and names choose), shared by the
    watches of the same objects. `read()` answers (the version it is as of, the objects as
    they are at it): read again on its own connection when another connection committed
    since the last reading (PRAGMA data_version, asked before reading, so a commit that lands
    during a reading is read again next time), else the last reading. A watch calls it after
    its own connection saw a commit, so the answer includes that commit. `changed_since`
    says which objects a watch at an older version must compare. Thread-safe: watches poll
    in a pool."""

    def __init__(self, db: Database, resource: Resource, selector: Any,
                 names: list[str]) -> None:
        self.db, self.resource, self.selector, self.names = db, resource, selector, names
        self.users = 0
        self._lock = threading.Lock()
        self._data_version: int | None = None
        self.seq = -1
        """The change log's version the reading is as of (-1: not read yet)."""
        self._reading: Reading = {}
        self._built: dict[str, Any] = {}
        """Each object's signature and document as last read: an object unchanged since
        keeps its document and its key (one commit rebuilt and re-encoded all 10,000)."""
        self._history: deque[tuple[int, int, frozenset[str] | None]] = deque(maxlen=HISTORY)
        """(from version, to version, the objects changed between: None, any of them)."""
        self.readings = 0
        """How many times every object was read (for tests)."""
        self.partial = 0
        """How many times only the objects the log named were read (for tests)."""

    def read(self) -> tuple[int, Reading]:
        with self._lock:
            current = self.db.data_version()
            if current != self._data_version:
                self._data_version = current
                conn = self.db.conn
                conn.execute("BEGIN")  # the log and the rows as one commit left them
                try:
                    self._refresh()
                finally:
                    conn.execute("COMMIT")
            return self.seq, self._reading

    def changed_since(self, version: int) -> set[str] | None:
        """The objects that may differ between version `version` and the reading's (None:
        any: compare them all)."""
        with self._lock:
            if version >= self.seq:
                return set()
            found: set[str] = set()
            reached = False
            for start, end, ids in reversed(self._history):
                if end <= version:
                    break
                if ids is None:
                    return None
                found |= ids
                reached = start <= version
            return found if reached else None

    def _refresh(self) -> None:
        conn = self.db.conn
        latest = changes.latest(conn)
        if self.seq >= 0 and latest == self.seq:
            return  # a commit that changed no object (a token's use, a lease)
        kind = self.resource.kind
        touched: set[str] | None = None
        if self.seq >= 0 and self.seq >= changes.oldest(conn):
            touched = changes.touched(conn, self.seq, latest, kind,
                                      MOST_TOUCHED if kind in READ_BY_ID else None)
        if touched is not None and not touched:
            self._history.append((self.seq, latest, frozenset()))
        elif touched is not None and kind in READ_BY_ID:
            self._read_some(touched)
            self._history.append((self.seq, latest, frozenset(touched)))
        else:
            self._read_all()
            self._history.append((self.seq, latest, None))
        self.seq = latest

    def _read_all(self) -> None:
        rows = listing.rows(self.db, self.resource.plural, self.names, self.selector)
        built = listing.built(self.db, self.resource.plural, rows, self._built)
        reading: Reading = {}
        for key, made in built.items():
            reading[key] = self._kept(key, made)
        self._reading, self._built = reading, built
        self.readings += 1

    def _read_some(self, touched: set[str]) -> None:
        """Re-read only `touched` (each still chosen: in the reading as it is now; else out)."""
        rows = listing.rows(self.db, self.resource.plural, self.names or sorted(touched),
                            self.selector)
        rows = [r for r in rows if r["id"] in touched]
        made_now = listing.built(self.db, self.resource.plural, rows,
                                 {k: self._built[k] for k in touched if k in self._built})
        reading, built = dict(self._reading), dict(self._built)
        for key in touched:
            reading.pop(key, None)
            built.pop(key, None)
        for key, made in made_now.items():
            reading[key] = self._kept(key, made)
            built[key] = made
        self._reading, self._built = reading, built
        self.partial += 1

    def _kept(self, key: str, made: Any) -> tuple[dict[str, Any], str]:
        kept = self._reading.get(key)
        return kept if kept is not None and self._built.get(key) is made else \
            (made[1], _key(made[1]))


class Readings:
    """The Shared readings in use, by what they read; each closed with its last watch
    (thread-safe: taken in the pool's threads, given back in the event loop)."""

    def __init__(self, opener: Any) -> None:
        self._open = opener
        self._lock = threading.Lock()
        self._shared: dict[tuple[str, str, tuple[str, ...]], Shared] = {}

    def take(self, resource: Resource, selector: Any, names: list[str]) -> Shared:
        key = (resource.plural, repr(selector), tuple(names))
        with self._lock:
            shared = self._shared.get(key)
            if shared is None:
                shared = self._shared[key] = Shared(self._open(), resource, selector, names)
            shared.users += 1
            return shared

    def give_back(self, shared: Shared) -> None:
        with self._lock:
            shared.users -= 1
            if shared.users <= 0:
                key = (shared.resource.plural, repr(shared.selector), tuple(shared.names))
                if self._shared.get(key) is shared:
                    del self._shared[key]
                shared.db.close()

    def __len__(self) -> int:
        return len(self._shared)


class Watcher:
    """The state of one watch: what was sent, up to which version. `shared`: the reading
    of its objects it shares with other watches (None: a reading of its own)."""

    def __init__(self, db: Database, resource: Resource, *, selector: Any = None,
                 names: list[str] | None = None, for_object: str | None = None,
                 after: int | None = None, shared: Shared | None = None) -> None:
        self.db, self.resource, self.selector = db, resource, selector
        self.names, self.for_object = names or [], for_object
        if after is not None:
            changes.check(db.conn, after)
        self.version = changes.latest(db.conn) if after is None else after
        self.sent: dict[str, str] = {}
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self._seen_version: int | None = None
        self.shared = shared
        if resource.plural != "events":
            if self.shared is None:
                self.shared = Shared(db, resource, selector, self.names)
            self._seen_version = db.data_version()
            seq, current = self.shared.read()
            if after is None:  # as Kubernetes: every object first, as ADDED
                self.pending = [("ADDED", doc) for doc, _ in current.values()]
            else:
                self._resume(current, after, seq)
            self.sent = {key: compared for key, (_, compared) in current.items()}
            self.version = max(seq, self.version)

    def _resume(self, current: Reading, after: int, seq: int) -> None:
        """The objects the log names after `after` (up to the reading's version), as they are
        now (DELETED if gone or no longer chosen)."""
        touched = changes.touched(self.db.conn, after, seq, self.resource.kind) or set()
        for key, (doc, _) in current.items():
            if key in touched:
                self.pending.append(("MODIFIED", doc))
        for key in sorted(touched - set(current)):
            self.pending.append(("DELETED", self._stub(key)))

    def moved(self) -> bool:
        """Whether another connection committed since the last poll: one PRAGMA read, cheap
        enough for the event loop, so an idle watch never wakes a thread."""
        return bool(self.pending) or self.db.data_version() != self._seen_version

    def poll(self) -> list[dict[str, Any]]:
        """The changes since the last poll, as watch events (JSON-ready)."""
        out: list[dict[str, Any]] = []
        self._seen_version = self.db.data_version()
        if self.resource.plural == "events":
            changes.check(self.db.conn, self.version)  # pruned past it: 410, never a gap
            while True:
                rows = changes.events_after(self.db.conn, self.version, MAX_EVENTS_PER_POLL)
                for row in rows:
                    self.version = int(row["change_seq"])
                    if self._wanted(row):
                        event = dict(row)
                        del event["change_seq"]
                        out.append(_event("ADDED", event, self.version))
                if len(rows) < MAX_EVENTS_PER_POLL or len(out) >= MAX_EVENTS_PER_POLL:
                    break
            return out
        pending, self.pending = self.pending, []
        assert self.shared is not None
        seq, current = self.shared.read()
        if seq > self.version:
            changed = self.shared.changed_since(self.version)
            self.version = seq
            keys = list(current) + [k for k in self.sent if k not in current] \
                if changed is None else sorted(changed)
            for key in keys:
                now = current.get(key)
                if now is None:
                    if self.sent.pop(key, None) is not None:
                        pending.append(("DELETED", self._stub(key)))
                elif self.sent.get(key) != now[1]:  # the same str when unchanged: cheap
                    pending.append(("ADDED" if key not in self.sent else "MODIFIED", now[0]))
                    self.sent[key] = now[1]
        return [_event(kind, doc, self.version) for kind, doc in _once(pending)]

    def _stub(self, key: str) -> dict[str, Any]:
        """What a DELETED change carries: the object's id (its record is gone)."""
        if self.resource.kind == "Operation":
            return {"id": key}
        return {"kind": self.resource.kind, "metadata": {"id": key}}

    def _wanted(self, row: Any) -> bool:
        if self.for_object is not None:
            kind, name = listing.for_target(self.for_object)
            return row["object_kind"] == kind and name in (row["object_name"], row["object_id"])
        return not self.names or row["object_name"] in self.names or \
            row["object_id"] in self.names

    def bookmark(self) -> dict[str, Any]:
        return {"type": "BOOKMARK", "resourceVersion": str(self.version)}


def _once(pending: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The last change of each object, in the order of their last change."""
    last: dict[str, tuple[str, dict[str, Any]]] = {}
    for kind, doc in pending:
        key = _id(doc)
        last.pop(key, None)
        last[key] = (kind, doc)
    return list(last.values())


def _event(kind: str, obj: dict[str, Any], version: int) -> dict[str, Any]:
    return {"type": kind, "resourceVersion": str(version), "object": obj}


def _id(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    return str(meta["id"]) if isinstance(meta, dict) else str(doc["id"])


def _key(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, default=str)
