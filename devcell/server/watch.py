"""Watch: the changes of one resource after a version, from the state database.

The version is the events table's id (every change DevCell makes to an object records an
event, and ids only grow), as a list's `metadata.resourceVersion`. A watch of events sends
each event after the version, exactly, so a client that reconnects with the last id it saw
misses none and gets none twice. A watch of cells, snapshots or operations sends an object's
whole record each time it differs from the one last sent (ADDED, MODIFIED, DELETED), found
by reading them again whenever another connection committed (PRAGMA data_version): a resume
from a version first sends the objects that events after it name, then follows as usual.

Plain Python polled by the app (one short read per poll, none while nothing committed), so
one watch costs a connection and no thread of its own. The watches of the same objects (the
same resource, selector and names) share one reading of them (Shared): a commit makes the
first of them to look read every object again, on the reading's own connection, and the others
compare what they sent with that reading instead of each reading every object again (with
100 watches of 10,000 cells, one read per commit instead of 100: bench/api_list_watch.py).
A reading rebuilds only the documents of the objects whose stored values changed
(views.built_documents' signatures); the others keep their document and key, so an unchanged
object costs its row's comparison, not a JSON parse and encoding.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from devcell.api import listing
from devcell.errors import UsageError
from devcell.server.routes import Resource
from devcell.store import events, views
from devcell.store.db import Database

MAX_EVENTS_PER_POLL = 500

Reading = dict[str, tuple[dict[str, Any], str]]
"""Each object's id -> (its document, its key: the document as compared)."""


class Shared:
    """One reading of a resource's objects (those a selector and names choose), shared by the
    watches of the same objects. `read()` answers the objects as they are now: read again on
    its own connection when another connection committed since the last reading (PRAGMA
    data_version, asked before reading, so a commit that lands during a reading is read
    again next time), else the last reading. A watch calls it after its own connection saw
    a commit, so the answer includes that commit. Thread-safe: watches poll in a pool."""

    def __init__(self, db: Database, resource: Resource, selector: Any,
                 names: list[str]) -> None:
        self.db, self.resource, self.selector, self.names = db, resource, selector, names
        self.users = 0
        self._lock = threading.Lock()
        self._data_version: int | None = None
        self._reading: Reading = {}
        self._built: dict[str, views.Built] = {}
        """Each object's signature and document as last read: an object unchanged since
        keeps its document and its key (one commit rebuilt and re-encoded all 10,000)."""
        self.readings = 0
        """How many times every object was read (for tests)."""

    def read(self) -> Reading:
        with self._lock:
            current = self.db.data_version()
            if current != self._data_version:
                self._data_version = current
                rows = listing.rows(self.db, self.resource.plural, self.names, self.selector)
                built = listing.built(self.db, self.resource.plural, rows, self._built)
                reading: Reading = {}
                for key, made in built.items():
                    kept = self._reading.get(key)
                    reading[key] = kept if kept is not None and \
                        self._built.get(key) is made else (made[1], _key(made[1]))
                self._reading, self._built = reading, built
                self.readings += 1
            return self._reading


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
    of its objects it shares with other watches (None: it reads them itself)."""

    def __init__(self, db: Database, resource: Resource, *, selector: Any = None,
                 names: list[str] | None = None, for_object: str | None = None,
                 after: int | None = None, shared: Shared | None = None) -> None:
        self.db, self.resource, self.selector = db, resource, selector
        self.names, self.for_object = names or [], for_object
        self.shared = shared
        latest = events.latest_id(db.conn)
        if after is not None and after > latest:
            raise UsageError(f"resourceVersion {after}: the newest is {latest} (a version "
                             "comes from a list's metadata.resourceVersion or a watch's "
                             "events)")
        self.version = latest if after is None else after
        self.data_version: int | None = None
        self.sent: dict[str, str] = {}
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self._seen_version: int | None = None
        if resource.plural != "events":
            self.data_version = db.data_version()
            current = self._documents()
            if after is None:  # as Kubernetes: every object first, as ADDED
                self.pending = [("ADDED", doc) for doc, _ in current.values()]
                self.sent = {key: compared for key, (_, compared) in current.items()}
            else:
                self._resume(current, after)

    def _resume(self, current: Reading, after: int) -> None:
        """The objects events after `after` name, as they are now (DELETED if gone); the rest
        counted as sent."""
        kind = self.resource.kind
        touched: set[str] = set()
        for row in events.after(self.db.conn, after, MAX_EVENTS_PER_POLL * 20):
            if kind == "Operation" and row["op_id"]:
                touched.add(row["op_id"])
            elif row["object_kind"] == kind and row["object_id"]:
                touched.add(row["object_id"])
        for key, (doc, compared) in current.items():
            if key in touched:
                self.pending.append(("MODIFIED", doc))
            self.sent[key] = compared
        for key in sorted(touched - set(current)):
            self.pending.append(("DELETED", self._stub(key)))

    def _documents(self) -> Reading:
        if self.shared is not None:
            return self.shared.read()
        rows = listing.rows(self.db, self.resource.plural, self.names, self.selector)
        docs = listing.documents(self.db, self.resource.plural, rows)
        return {_id(doc): (doc, _key(doc)) for _, doc in docs}

    def moved(self) -> bool:
        """Whether another connection committed since the last poll: one PRAGMA read, cheap
        enough for the event loop, so an idle watch never wakes a thread."""
        return bool(self.pending) or self.db.data_version() != self._seen_version

    def poll(self) -> list[dict[str, Any]]:
        """The changes since the last poll, as watch events (JSON-ready)."""
        out: list[dict[str, Any]] = []
        self._seen_version = self.db.data_version()
        if self.resource.plural == "events":
            while True:
                rows = events.after(self.db.conn, self.version, MAX_EVENTS_PER_POLL)
                for row in rows:
                    self.version = int(row["id"])
                    if self._wanted(row):
                        out.append(_event("ADDED", dict(row), self.version))
                if len(rows) < MAX_EVENTS_PER_POLL or len(out) >= MAX_EVENTS_PER_POLL:
                    break
            return out
        pending, self.pending = self.pending, []
        current_version = self.db.data_version()
        if current_version != self.data_version:
            self.data_version = current_version
            self.version = max(self.version, events.latest_id(self.db.conn))
            current = self._documents()
            for key, (doc, compared) in current.items():
                if self.sent.get(key) != compared:  # the same str when unchanged: cheap
                    pending.append(("ADDED" if key not in self.sent else "MODIFIED", doc))
                    self.sent[key] = compared
            for key in [k for k in self.sent if k not in current]:
                del self.sent[key]
                pending.append(("DELETED", self._stub(key)))
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
