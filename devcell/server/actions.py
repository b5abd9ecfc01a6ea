"""Actions on one cell: sleep, start, snapshot, fork, restart, rerun-hooks (POST
/api/v1/cells/NAME/ACTION).

Each is the library call the CLI's verb makes (api.cells: `cell sleep`, `cell start`, `snapshot
create`, `cell fork`, `cell restart`, `cell rerun-hooks`), authorized as the policy's verb of
the same name on the recorded cell (a snapshot's and a fork's too: they are taken of it) and
recorded in the caller's name (store.actor). A request answers once the action is recorded (202:
the daemon converges it; the answer's `resourceVersion` is where a watch sees it happen) or,
with wait=true, once its objects settled or failed or `timeoutSeconds` ran out (200, with the
operations that ran). A wait polls the database as a watch does: one PRAGMA read on the event
loop while nothing commits, a check in the thread pool when something did; it holds a connection
and a watch's slot, never a thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.errors import Conflict, NotFound, UsageError
from devcell.names import printable
from devcell.records import Record, field
from devcell.server import bodies

POLL_SECONDS = 0.1
"""How often a wait looks for a commit."""
MAX_FORK_PORTS = 64
"""Ports a fork's body may map (a cell publishes few)."""
MAX_FORK_COUNT = 100
"""Forks one request may make (`cell fork --count`'s most)."""
MAX_BODY_BYTES = 64 * 1024
"""An action's body: a few names, at most MAX_FORK_PORTS ports (a 15 MiB snapshot name went
through difflib's suggestion and was echoed whole: ~0.9 GB for one request)."""
MAX_TEXT = {"name": 63, "snapshot": 63, "ttl": 32, "service": 63}
"""The longest string each field may be (names are DNS labels; ttl a duration like 7d)."""
CONSISTENCIES = ("filesystem", "machine")
"""snapshot's `consistency`: as the Snapshot schema's enum (the action builds the manifest
itself, and a value the reconciler cannot read failed on every retry, forever)."""


class Request(Record):
    """What an action was asked to do: its verb and, for snapshot, fork and restart, the
    body's fields (checked by `parse`)."""

    verb: str
    name: str | None = None
    """The new snapshot's or fork's name."""
    ttl: str | None = None
    consistency: str | None = None
    snapshot: str | None = None
    """fork: the snapshot of the cell to fork from."""
    publish: bool = True
    """fork: publish the cell's ports (False: none)."""
    ports: dict[int, int] = field(default_factory=dict)
    """fork: container port -> the fork's host port."""
    count: int | None = None
    """fork: make `count` forks, NAME-1 to NAME-N (each name must be free)."""
    exclusive: bool = True
    """snapshot, fork: a name already recorded is a conflict (False: it is recorded again as
    the CLI's verb records it, `unchanged` when it says the same; a snapshot only of this
    cell, a fork only over a cell the caller may change, and whose sharedWith only its owner
    may change when the source's differs)."""
    service: str | None = None
    """restart: only this service (None: all the cell's)."""


_FIELDS: dict[str, dict[str, type]] = {
    "snapshot": {"name": str, "ttl": str, "consistency": str, "exclusive": bool},
    "fork": {"name": str, "snapshot": str, "publish": bool, "ports": dict, "exclusive": bool,
             "count": int},
    "restart": {"service": str},
}
_REQUIRED: dict[str, tuple[str, ...]] = {"snapshot": ("name",), "fork": ("name", "snapshot"),
                                         "restart": ()}


def parse(verb: str, data: bytes) -> Request:
    """The action's request from its JSON body (none for sleep, start and rerun-hooks; restart's
    may be left out); UsageError naming the field that cannot be used."""
    if verb not in _FIELDS:
        return Request(verb)
    if not _REQUIRED[verb] and not data.strip():
        return Request(verb)
    allowed = _FIELDS[verb]
    body = bodies.json_object(data, verb, allowed,
                              " and ".join(_REQUIRED[verb] or _FIELDS[verb]))
    for key in _REQUIRED[verb]:
        if key not in body:
            raise UsageError(f"{verb}: the field {key!r} is required")
    for key, value in body.items():
        if not isinstance(value, allowed[key]) or (allowed[key] is not bool
                                                   and isinstance(value, bool)):
            raise UsageError(f"{verb}: {key} must be a {allowed[key].__name__}")
    for key, most in MAX_TEXT.items():
        if isinstance(body.get(key), str) and len(body[key]) > most:
            raise UsageError(f"{verb}: {key} is at most {most} characters")
    if body.get("consistency") is not None and body["consistency"] not in CONSISTENCIES:
        raise UsageError(f"snapshot: consistency is {' or '.join(CONSISTENCIES)}, not "
                         f"{printable(body['consistency'])!r}")
    count = body.get("count")
    if count is not None and not 1 <= count <= MAX_FORK_COUNT:
        raise UsageError(f"fork: count must be 1 to {MAX_FORK_COUNT}")
    ports = _ports(body.get("ports") or {})
    if ports and body.get("publish") is False:
        raise UsageError("fork: ports and publish: false contradict each other")
    return Request(verb, name=body.get("name"), ttl=body.get("ttl"),
                   consistency=body.get("consistency"), snapshot=body.get("snapshot"),
                   publish=body.get("publish", True), ports=ports,
                   exclusive=body.get("exclusive", True), count=count,
                   service=body.get("service"))


def _ports(given: dict[str, Any]) -> dict[int, int]:
    """A fork's `ports`: {"CONTAINER": HOST, ...}, each a port number."""
    if len(given) > MAX_FORK_PORTS:
        raise UsageError(f"fork: at most {MAX_FORK_PORTS} ports")
    out: dict[int, int] = {}
    for inside, host in given.items():
        if not (inside.isascii() and inside.isdigit() and 0 < int(inside[:6]) < 65536
                and len(inside) <= 5):
            raise UsageError(f"fork: ports: {printable(inside)!r} is not a container port "
                             "(1-65535)")
        if isinstance(host, bool) or not isinstance(host, int) or not 0 < host < 65536:
            raise UsageError(f"fork: ports.{inside}: a host port (1-65535)")
        out[int(inside)] = host
    return out


class Recorded(Record):
    """An action recorded: the answer (an apply result with the events' version before it),
    and when it was recorded (the store's clock), to find the operations it caused."""

    doc: dict[str, Any]
    since: str


def record(state_dir: Path, principal: Any, cell: str, request: Request) -> Recorded:
    """Authorize and record `request` on `cell` in `principal`'s name."""
    from devcell.api import cells, converging, reports
    from devcell.auth import policy, resources
    from devcell.store import actor, changes, clock, objects
    from devcell.store.db import Database

    db = Database(state_dir, create=False)
    try:
        if objects.get(db.conn, "Cell", cell) is None:
            raise NotFound(f'cell "{cell}" not found{objects.suggestion(db.conn, "Cell", cell)}')
        policy.require(principal, policy.Verb(request.verb),
                       resources.recorded(db.conn, "Cell", cell))
        _taken(db.conn, principal, cell, request)
        version, since = changes.latest(db.conn), clock.now()
    finally:
        db.close()
    options = converging.Options(wait=False)
    with actor.acting_as(principal.user):
        if request.verb == "sleep":
            report = cells.sleep(state_dir, cell, by="api sleep", options=options)
        elif request.verb == "start":
            report = cells.start(state_dir, cell, by="api start", options=options)
        elif request.verb == "restart":
            report = cells.restart(state_dir, cell, request.service, options=options)
        elif request.verb == "rerun-hooks":
            report = cells.rerun_hooks(state_dir, cell, options=options)
        elif request.verb == "snapshot":
            assert request.name is not None
            report = cells.snapshot(state_dir, cell, name=request.name, ttl=request.ttl,
                                    consistency=request.consistency, options=options)
        else:
            assert request.name is not None and request.snapshot is not None
            report = cells.fork(state_dir, cell, snapshot=request.snapshot, name=request.name,
                                host_ports=request.ports or None, publish=request.publish,
                                count=request.count, exclusive=request.exclusive,
                                options=options)
    doc = reports.document(report)
    doc["resourceVersion"] = str(version)
    return Recorded(doc, since)


def _taken(conn: Any, principal: Any, cell: str, request: Request) -> None:
    """A snapshot's or fork's name already recorded: a Conflict, unless the request is not
    exclusive and the object is one it may record again (a snapshot of this same cell; a
    cell the caller may change, which the policy judges)."""
    from devcell.auth import policy, resources
    from devcell.store import objects

    kind = {"snapshot": "Snapshot", "fork": "Cell"}.get(request.verb)
    if kind is None or request.name is None or request.count is not None:
        return  # counted forks: each name must be free, as `cell fork --count` checks
    found = objects.get(conn, kind, request.name)
    if found is None:
        return
    if not request.exclusive:
        if kind == "Cell":  # re-recorded with the source's spec: its sharedWith too, which
            # only the target's owner may change (owner-grants), as an apply is judged
            shared = resources.recorded(conn, "Cell", cell).shared_with
            policy.require_update(principal, resources.recorded(conn, "Cell", request.name),
                                  policy.ResourceRef("Cell", request.name, None, shared))
            return
        source = objects.get(conn, "Cell", cell)
        if source is not None and found.extra.get("cell_id") == source.id:
            return
    raise Conflict(f'{kind.lower()} "{request.name}" already exists; choose another '
                   "name or delete it first")


def keys(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The objects an action's answer says it recorded: what a wait waits for."""
    return [(c["kind"], c["id"]) for c in doc["changes"] if c.get("id")
            and c["outcome"] not in ("unchanged", "deleted", "pruned")]


class Waited(Record):
    """How a wait ended for each object: settled, failed (why) or still waiting (why)."""

    settled: tuple[tuple[str, str], ...] = ()
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    waiting: dict[tuple[str, str], str] = field(default_factory=dict)


def check(db: Any, wanted: list[tuple[str, str]]) -> Waited:
    """One look at `wanted`, as a verb waiting for the daemon looks (reconciler.waiting): an
    object is settled once its Ready condition speaks for its generation; the details of
    those still waiting say why, for when the time runs out."""
    from devcell.reconciler import waiting

    settled: list[tuple[str, str]] = []
    failed: dict[tuple[str, str], str] = {}
    pending: dict[tuple[str, str], str] = {}
    for key in wanted:
        outcome = waiting.check(db, *key)
        if outcome.done:
            settled.append(key)
        elif outcome.failed:
            failed[key] = outcome.failed
        else:
            pending[key] = outcome.detail
    return Waited(tuple(settled), failed, pending)


def finished(db: Any, recorded: Recorded, waited: Waited, timeout: float
             ) -> dict[str, Any]:
    """The answer after a wait: each object's result, `ok`, and the operations run for the
    objects since the action was recorded."""
    from devcell.store import objects, operations

    doc = recorded.doc
    names = {c["id"]: c["name"] for c in doc["changes"] if c.get("id")}

    def result(key: tuple[str, str], status: str, message: str = "") -> dict[str, Any]:
        gate = None
        if status != "settled":
            op = operations.suspended_for(db.conn, key[1])
            if op is not None and op["reason"] == "AwaitingApproval":
                gate = str(op["id"])
        name = names.get(key[1])
        if name is None:
            record = objects.get(db.conn, key[0], key[1], include_deleted=True)
            name = record.name if record is not None else key[1]
        return {"kind": key[0], "name": name, "id": key[1], "status": status,
                "message": printable(message), "awaitingApproval": gate}

    results = [result(k, "settled") for k in waited.settled]
    results += [result(k, "failed", why) for k, why in waited.failed.items()]
    results += [result(k, "waiting", f"timed out after {timeout:g}s: {why}")
                for k, why in waited.waiting.items()]
    ops = ran_since(db, recorded.since, list(names))
    from devcell.reconciler import lease

    holder = lease.current_holder(db.state_dir)
    return {**doc, "results": results, "ok": not waited.failed and not waited.waiting,
            "operations": ops,
            "reconciledBy": holder.describe() if holder is not None else None}


def ran_since(db: Any, since: str, object_ids: list[str]) -> list[str]:
    """The operations on `object_ids` created at `since` or after, oldest first."""
    if not object_ids:
        return []
    marks = ", ".join("?" * len(object_ids))
    rows = db.conn.execute(
        f"SELECT id FROM operations WHERE object_id IN ({marks}) AND created_at >= ? "
        "ORDER BY rowid LIMIT 100", (*object_ids, since))
    return [str(row[0]) for row in rows]
