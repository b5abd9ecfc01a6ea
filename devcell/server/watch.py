"""Watch: the changes of one resource after a version, from the state database.

The version is the events table's id (every change DevCell makes to an object records an
event, and ids only grow), as a list's `metadata.resourceVersion`. A watch of events sends
each event after the version, exactly, so a client that reconnects with the last id it saw
misses none and gets none twice. A watch of cells, snapshots or operations sends an object's
whole record each time it differs from the one last sent (ADDED, MODIFIED, DELETED), found
by reading them again whenever another connection committed (PRAGMA data_version): a resume
from a version first sends the objects that events after it name, then follows as usual.

Plain Python polled by the app (one short read per poll, none while nothing committed), so
one watch costs a connection and no thread of its own.
"""

from __future__ import annotations

import json
from typing import Any

from devcell.api import listing
from devcell.errors import UsageError
from devcell.server.routes import Resource
from devcell.store import events
from devcell.store.db import Database

MAX_EVENTS_PER_POLL = 500


class Watcher:
    """The state of one watch: what was sent, up to which version."""

    def __init__(self, db: Database, resource: Resource, *, selector: Any = None,
                 names: list[str] | None = None, for_object: str | None = None,
                 after: int | None = None) -> None:
        self.db, self.resource, self.selector = db, resource, selector
        self.names, self.for_object = names or [], for_object
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
                self.pending = [("ADDED", doc) for doc in current.values()]
                self.sent = {key: _key(doc) for key, doc in current.items()}
            else:
                self._resume(current, after)

    def _resume(self, current: dict[str, dict[str, Any]], after: int) -> None:
        """The objects events after `after` name, as they are now (DELETED if gone); the rest
        counted as sent."""
        kind = self.resource.kind
        touched: set[str] = set()
        for row in events.after(self.db.conn, after, MAX_EVENTS_PER_POLL * 20):
            if kind == "Operation" and row["op_id"]:
                touched.add(row["op_id"])
            elif row["object_kind"] == kind and row["object_id"]:
                touched.add(row["object_id"])
        for key, doc in current.items():
            if key in touched:
                self.pending.append(("MODIFIED", doc))
            self.sent[key] = _key(doc)
        for key in sorted(touched - set(current)):
            self.pending.append(("DELETED", self._stub(key)))

    def _documents(self) -> dict[str, dict[str, Any]]:
        rows = listing.rows(self.db, self.resource.plural, self.names, self.selector)
        docs = listing.documents(self.db, self.resource.plural, rows)
        return {_id(doc): doc for _, doc in docs}

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
            for key, doc in current.items():
                if self.sent.get(key) != _key(doc):
                    pending.append(("ADDED" if key not in self.sent else "MODIFIED", doc))
                    self.sent[key] = _key(doc)
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
