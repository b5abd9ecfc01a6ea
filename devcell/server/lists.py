"""A list's JSON encoded once per state of the database and sent, the same bytes, to every
client asking for the same list while that state holds.

A list's documents are a function of the database alone (api.listing: no clock, no file
beside it), and SQLite says exactly when the database changed: PRAGMA data_version on a
connection of our own (the probe, which never writes) moves whenever any other connection,
in this process or another, commits. So an encoding made at data_version V is what any list
read at V would be, byte for byte, and is served only while the probe still says V: a commit
moves it and the next request encodes anew. The version is read before the reading begins,
so a commit that lands during a reading is read again by the next request, never missed.

What decides a list's bytes is its key: the resource, the query (selector, for, page) and
the asker's view (auth.policy.list_view): bytes are shared only between requests of the same
key, so a list shaped for one user is never served to another whose view differs.

With 100 clients listing 10,000 cells at once, each read and encoded the whole list on its
own (14 MiB of JSON each, ~116 MiB of Python objects while it was built, ~40 at once in the
thread pool: the daemon grew to 4.7 GB and lists took minutes, bench/api_list_watch.py).
Here the requests for one key wait for the one encoding in progress (single flight), at most
MAX_ENCODES encodings run at once (the rest queue: memory stays bounded, nobody gets a 503),
and the body goes out in CHUNK_BYTES pieces as the client reads them, so a slow client holds
a piece, not a copy of the whole list. A request waiting while commits keep landing is served
by the first reading that began after it arrived (that reading includes every commit before
the request), so waiters never re-read one after another.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any, NamedTuple

import anyio
from starlette.concurrency import run_in_threadpool

MAX_ENCODES = 2
"""Lists read and encoded at once (the daemon has a core or two; each encoding of 10,000
cells holds ~116 MiB while it is built)."""
KEEP_BYTES = 64 * 1024 * 1024
"""The encodings kept between requests, least recently used dropped first (one is kept
while it is being sent, whatever this says)."""
CHUNK_BYTES = 256 * 1024
"""A body's piece: what one connection holds beyond what the socket buffers."""


FRAGMENTED = frozenset({"cells", "snapshots"})
"""The lists whose objects' encodings are kept between states (Fragments)."""


class Fragments:
    """Each object of one list as last encoded, with its signature (views.changed_documents:
    every stored value its document is made of): after a commit only the objects whose
    signature changed are built and encoded again (a commit re-encoded all 10,000 cells:
    ~2 s where the rows' comparison takes ~0.3 s). The body is the same bytes a whole
    encoding gives (`list_body`). Used under its list's lock only."""

    def __init__(self) -> None:
        self.signatures: dict[str, tuple[Any, ...]] = {}
        self.pieces: dict[str, bytes] = {}

    def items(self, db: Any, kind: str, rows: list[dict[str, Any]]) -> list[bytes]:
        """The encoded document of each row still recorded, in the rows' order."""
        from devcell.api import listing
        from devcell.store import views

        signatures, made = views.changed_documents(
            db.conn, listing.KIND_OF_TABLE[kind], [r["id"] for r in rows], self.signatures)
        pieces = {key: encoded(made[key]) if key in made else self.pieces[key]
                  for key in signatures}
        self.signatures, self.pieces = signatures, pieces
        return [pieces[r["id"]] for r in rows if r["id"] in pieces]

    @property
    def size(self) -> int:
        """Roughly the bytes held: the pieces, and the rows their signatures keep."""
        return 2 * sum(len(p) for p in self.pieces.values())


def encoded(doc: Any) -> bytes:
    """As JSONResponse renders a document."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


def list_body(items: list[bytes], meta: dict[str, str]) -> bytes:
    """A List of these encoded items: the bytes `encoded` gives of the whole document."""
    return b"".join((b'{"apiVersion":"v1","kind":"List","items":[', b",".join(items),
                     b'],"metadata":', encoded(meta), b"}"))


class Encoded(NamedTuple):
    version: int
    """The probe's data_version read before the reading began."""
    started: int
    """When the reading began, on the requests' clock (Lists.body): a request that arrived
    before it gets these bytes whatever committed since (they are newer than its arrival)."""
    body: bytes


class Lists:
    """The encodings of one server's lists. Used from the event loop only (its locks are
    the loop's); the reading and encoding run in the thread pool."""

    def __init__(self, opener: Callable[[], Any]) -> None:
        self._open = opener
        self._probe: Any = None
        self._kept: OrderedDict[Hashable, Encoded] = OrderedDict()
        self._locks: dict[Hashable, anyio.Lock] = {}
        self._fragments: dict[Hashable, Fragments] = {}
        self._encodes: anyio.Semaphore | None = None
        self._clock = 0
        """Counts arrivals and readings (the event loop's: one thread)."""
        self.encodings = 0
        """How many times a list was read and encoded (for tests)."""

    async def body(self, key: Hashable, produce: Callable[[], bytes]) -> bytes:
        """The list `key` as the database is now: the kept encoding while the database has
        not changed since it was made, else `produce()`'s (run in the thread pool, one per
        key at a time, MAX_ENCODES at a time in all)."""
        self._clock += 1
        arrived = self._clock
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = anyio.Lock()
        try:
            async with lock:
                kept = self._kept.get(key)
                if kept is not None and (kept.started > arrived or
                                         kept.version == await self._version()):
                    self._kept.move_to_end(key)  # read after this request arrived, or
                    return kept.body  # nothing committed since it was read
                if self._encodes is None:
                    self._encodes = anyio.Semaphore(MAX_ENCODES)
                async with self._encodes:
                    version = await self._version()  # before the reading begins
                    self._clock += 1
                    started = self._clock
                    try:  # a commit during the reading is read by the next request
                        body = await run_in_threadpool(produce)
                    except BaseException:
                        if key not in self._kept:
                            self._fragments.pop(key, None)
                        raise
                    self.encodings += 1
                self._keep(key, Encoded(version, started, body))
                return body
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(key, None)

    def fragments(self, key: Hashable) -> Fragments:
        """The list's objects as last encoded (kept and dropped with its encoding)."""
        found = self._fragments.get(key)
        if found is None:
            found = self._fragments[key] = Fragments()
        return found

    async def _version(self) -> int:
        if self._probe is None:
            self._probe = await run_in_threadpool(self._open)
        version: int = self._probe.data_version()  # one PRAGMA: cheap for the event loop
        return version

    def _keep(self, key: Hashable, encoded: Encoded) -> None:
        self._kept[key] = encoded
        self._kept.move_to_end(key)
        total = sum(self._size(k) for k in self._kept)
        while total > KEEP_BYTES and len(self._kept) > 1:
            dropped = next(iter(self._kept))
            total -= self._size(dropped)
            del self._kept[dropped]
            self._fragments.pop(dropped, None)

    def _size(self, key: Hashable) -> int:
        fragments = self._fragments.get(key)
        return len(self._kept[key].body) + (0 if fragments is None else fragments.size)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        self._kept.clear()
        self._fragments.clear()


async def pieces(body: bytes) -> AsyncIterator[bytes]:
    """The body in CHUNK_BYTES pieces (a streaming response sends each once the previous one
    left: uvicorn waits for the socket to drain)."""
    view = memoryview(body)
    for start in range(0, len(body), CHUNK_BYTES):
        yield bytes(view[start:start + CHUNK_BYTES])
