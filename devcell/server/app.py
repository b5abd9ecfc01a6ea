"""The ASGI application (Starlette): the route table served, each handler one library call.

Handlers that read the database run in Starlette's thread pool (one short-lived connection
each), so a slow query never holds the event loop and the reconcile loop, in its own
threads, is never waited on. Everything that can go wrong answers one problem document
(server.problems): a DevCell error by its class, a malformed or hostile request by what was
wrong with it, anything else as a 500 that says no more (the daemon's log says why).

A hostile client is bounded: a body larger than MAX_BODY_BYTES is refused from its
Content-Length or as soon as it grows past it (413), one that trickles in slower than
BODY_SECONDS is cut (408), a watch beyond MAX_WATCHES is refused (503), and each manifest
document is bounded as `apply -f` bounds it (1 MiB).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, WebSocketRoute
from starlette.routing import Route as StarletteRoute
from starlette.websockets import WebSocket

from devcell.errors import NotFound, UsageError
from devcell.log import logger
from devcell.names import printable
from devcell.server import openapi, problems, routes
from devcell.server.problems import HttpProblem
from devcell.server.routes import Resource

MAX_BODY_BYTES = 16 * 1024 * 1024
"""A whole apply request; each document in it is bounded at 1 MiB (manifests.loader)."""
BODY_SECONDS = 30.0
"""A body must have arrived this long after the request's headers."""
MAX_WATCHES = 128
"""Watches open at once; each holds a database connection (100 clients each watching:
bench/api_list_watch.py). uvicorn's limit_concurrency (server.serve) leaves as many
connections again for everything else."""
MAX_MANIFEST_REQUESTS = 16
"""apply and diff requests served at once: each validates (and diff compares) a stream of up
to thousands of objects on a thread of the pool list and get use too."""
MAX_MANIFEST_REQUESTS_PER_USER = 4
"""Of those, what one user who is not an admin may have at once: a viewer's diffs of 10,000
cells in a loop cost ~13 s of CPU each and left everyone else's requests waiting (attack42)."""
MAX_MEASURING = 2
"""`df` requests of users who are not admins served at once (one each): each walks every
workspace and checkpoint (15 s for a million files), on a thread the lists share. An admin's
is never refused for them (two developers looping on df held both slots: attack45)."""
MAX_ENGINE_READS = 8
"""Node lists and gets read at once (two a user who is not an admin): each asks the engine
(a swarm manager: its nodes, services and tasks); 150 viewers looping on them slowed every
other request 7-10 times (attack44)."""
MAX_WATCHES_PER_USER = 32
"""Watches and waits one user who is not an admin may hold at once (of MAX_WATCHES): one
developer's 128 watches left everyone, admins too, 503."""
POLL_SECONDS = 0.1
"""How often a watch looks for a commit (one PRAGMA read when nothing changed)."""
BOOKMARK_SECONDS = 15.0
"""A watch with nothing to say says where it is this often (and so finds a client gone)."""
AUTH_SECONDS = 1.0
"""How often a watch over TCP checks its token again: a revoked or expired one ends it."""
JSON_MEDIA = "application/json"
YAML_MEDIAS = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

Handler = Callable[[Request], Awaitable[Response]]


class _Slots:
    """Slots of one kind (watches and waits; exec and logs streams): `total` at once, and at
    most `per_user` of them held by one user who is not an admin (one developer's could
    otherwise take them all and leave everyone, admins too, 503). Taken before the first
    await, so a burst cannot all pass the check; given back once, however the use ends."""

    def __init__(self, total: int, per_user: int, slug: str, title: str, held: str) -> None:
        self.total, self.per_user = total, per_user
        self.slug, self.title, self.held = slug, title, held
        """The refusal's problem type and title, and what a user is said to hold."""
        self.open = 0
        self.of: dict[str, int] = {}
        """Open slots by user."""

    def take(self, principal: Any, full: str) -> None:
        """One slot for `principal`; 503 saying `full` when none is left."""
        from devcell.auth import principals

        if self.open >= self.total:
            raise HttpProblem(503, self.slug, self.title, full)
        user = principal.user
        held = self.of.get(user, 0)
        if principal.role is not principals.Role.admin and held >= self.per_user:
            raise HttpProblem(503, self.slug, self.title,
                              f"{printable(user)} has {held} {self.held} open, the most one "
                              "user may; end one first")
        self.open += 1
        self.of[user] = held + 1

    def give(self, principal: Any) -> None:
        self.open -= 1
        left = self.of.get(principal.user, 1) - 1
        if left > 0:
            self.of[principal.user] = left
        else:
            self.of.pop(principal.user, None)


class Context:
    """What every handler needs: the state directory, whether callers present tokens (TCP)
    or are the state directory's owner (the unix socket), the open watches and streams, and
    how long a body may take (DEVCELL_API_BODY_SECONDS, for a slow network or a test)."""

    def __init__(self, state_dir: Path, *, tokens: bool) -> None:
        from devcell.server import drains, forward, streams, transfer_routes

        self.state_dir = state_dir
        self.tokens = tokens
        self.watches = _Slots(MAX_WATCHES, MAX_WATCHES_PER_USER, "too-many-watches",
                              "Too many watches", "watches and waits")
        self.streams = _Slots(streams.MAX_STREAMS, streams.MAX_STREAMS_PER_USER,
                              "too-many-streams", "Too many streams", "exec and logs streams")
        self.forwards = _Slots(forward.MAX_FORWARDS, forward.MAX_FORWARDS_PER_USER,
                               "too-many-forwards", "Too many port-forward connections",
                               "port-forward connections")
        self.manifests = _Slots(MAX_MANIFEST_REQUESTS, MAX_MANIFEST_REQUESTS_PER_USER,
                                "too-many-requests", "Too many manifest requests",
                                "apply and diff requests")
        self.measuring = _Slots(MAX_MEASURING, 1, "too-many-measurements",
                                "Too many measurements", "df requests")
        self.drains = drains.Drains()
        self.engine_reads = _Slots(MAX_ENGINE_READS, 2, "too-many-node-reads",
                                   "Too many node lists", "node lists")
        self.transfers = _Slots(transfer_routes.MAX_TRANSFERS,
                                transfer_routes.MAX_TRANSFERS_PER_USER, "too-many-transfers",
                                "Too many snapshot exports and imports",
                                "snapshot exports and imports")
        self.machine = {
            "gc": _Slots(1, 1, "gc-running", "A gc is running", "gc runs"),
            "images": _Slots(1, 1, "image-job-running", "An image prune or build is running",
                             "image prunes and builds")}
        """One gc, and one image prune or base image build, at once (server.machine_routes)."""
        self.readings: Any = None
        """The readings watches of the same objects share (server.watch.Readings)."""
        self.lists: Any = None
        """The lists' encodings, shared by the requests of the same list (server.lists)."""
        self._limiter: Any = None
        self._connecting: Any = None
        self._connecting_of: dict[str, Any] = {}
        """Each user's turns at making a port-forward's connection (`connecting`)."""
        given = os.environ.get("DEVCELL_API_BODY_SECONDS", "")
        try:
            seconds = float(given) if given else BODY_SECONDS
        except ValueError:
            seconds = BODY_SECONDS
        self.body_seconds = min(max(seconds, 0.1), 3600.0) if seconds == seconds else BODY_SECONDS
        self.archive_bytes = transfer_routes.archive_bound(
            os.environ.get("DEVCELL_API_ARCHIVE_BYTES", ""))
        """The largest archive an import takes (transfer_routes.MAX_ARCHIVE_BYTES unless
        DEVCELL_API_ARCHIVE_BYTES says less)."""

    def take_stream(self, principal: Any) -> None:
        """A slot for an exec or logs stream (`logs -f` holds one for up to an hour)."""
        self.streams.take(principal, f"{self.streams.total} exec and logs streams are open; "
                                     "try again later")

    def give_stream(self, principal: Any) -> None:
        self.streams.give(principal)

    def take_watch(self, principal: Any, what: str) -> None:
        """A slot for a watch or an action's wait (`what`, for the refusal)."""
        self.watches.take(principal, f"{MAX_WATCHES} {what} are open; try again later")

    def give_watch(self, principal: Any) -> None:
        self.watches.give(principal)

    @contextlib.asynccontextmanager
    async def connecting(self, principal: Any) -> AsyncIterator[Any]:
        """Held while a port-forward's connection is made: its turn among `principal`'s
        (forward.MAX_CONNECTING_PER_USER), then the limiter of the threads that make them
        (forward.MAX_CONNECTING), never the threads every request shares: a cell whose
        listener is full (nothing accepts) holds each connect for its whole timeout, and one
        developer's burst of those took all 40 and stalled every request for everyone."""
        from devcell.server import forward

        if self._connecting is None:  # made in the event loop
            self._connecting = anyio.CapacityLimiter(forward.MAX_CONNECTING)
        mine = self._connecting_of.get(principal.user)
        if mine is None:
            mine = self._connecting_of[principal.user] = anyio.CapacityLimiter(
                forward.MAX_CONNECTING_PER_USER)
        async with mine:
            yield self._connecting

    def limiter(self) -> Any:
        """The threads exec streams run their commands on (made in the event loop)."""
        if self._limiter is None:
            from devcell.server import streams

            self._limiter = anyio.CapacityLimiter(streams.MAX_STREAMS)
        return self._limiter


def build(state_dir: Path, *, tokens: bool = False) -> Starlette:
    """The application for one state directory (the daemon's). tokens: every request must
    present a bearer token (TCP); else its caller is the state directory's owner, an admin
    (the unix socket, which only that owner can open)."""
    ctx = Context(state_dir, tokens=tokens)
    by_path: dict[str, dict[str, Handler]] = {}
    for route in routes.table():
        by_path.setdefault(route.path, {})[route.method] = _answering(
            ctx, route, _handler(ctx, route))
    table: list[BaseRoute] = [StarletteRoute(path, _by_method(methods), methods=list(methods))
                              for path, methods in by_path.items()]
    for route in routes.table():
        if route.upgrade:
            table.append(WebSocketRoute(route.path, _socket(ctx, route)))
    table.append(WebSocketRoute("/{path:path}", _no_socket_route))  # before /ui: it has none
    table.append(Mount("/ui", app=_Dashboard(state_dir, tokens, lambda: whole,
                                             ctx.body_seconds)))
    from starlette.middleware import Middleware

    from devcell.server.local_only import LocalOnly

    whole = Starlette(routes=table, exception_handlers={
        HTTPException: _http_exception, Exception: _unexpected},
        middleware=[] if tokens else [Middleware(LocalOnly)])
    return whole


class _Dashboard:
    """The dashboard (/ui, server.ui), built on its first request: a daemon nobody browses
    never imports it."""

    def __init__(self, state_dir: Path, tokens: bool, api: Callable[[], Any],
                 body_seconds: float) -> None:
        self.args = (state_dir, tokens, api, body_seconds)
        self.app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is None:
            from devcell.server.ui import app as ui

            self.app = ui.build(*self.args)
        await self.app(scope, receive, send)


def _by_method(methods: dict[str, Handler]) -> Handler:
    """One route per path, so that a 405 names every method the path has (Allow)."""
    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await methods[method](request)
    return dispatch


def _handler(ctx: Context, route: routes.Route) -> Handler:
    if route.name == "openapi":
        return _openapi
    if route.name == "apply":
        return lambda request: _apply(ctx, request)
    if route.name == "diff":
        return lambda request: _diff(ctx, request)
    if route.name == "ssh_host_key":
        return lambda request: _ssh_host_key(ctx)
    if route.verb in ("resume", "cancel"):
        return lambda request: _op_action(ctx, route.verb, request)
    if route.resource is routes.NODES:
        return _node_handler(ctx, route)
    if route.verb == "token_admin":
        return _token_handler(ctx, route)
    if route.name == "lineage":
        return lambda request: _lineage(ctx)
    if route.name == "df":
        return lambda request: _df(ctx, request)
    if route.name in ("export_snapshot", "import_snapshot", "push_snapshot",
                      "pull_snapshot"):
        return _transfer_handler(ctx, route)
    if route.name in MACHINE_ROUTES:
        return _machine_handler(ctx, route)
    resource = route.resource
    assert resource is not None
    if route.upgrade:
        return lambda request: _upgrade_required(route, request)
    if route.verb in routes.ACTIONS:
        return lambda request: _action(ctx, route.verb, request)
    if route.verb == "restore":
        return lambda request: _restore(ctx, request)
    if route.verb == "logs":
        return lambda request: _logs(ctx, request)
    if route.name.startswith("describe_"):
        return lambda request: _describe(ctx, resource, request)
    if route.name.startswith("rows_"):
        return lambda request: _rows(ctx, resource, request)
    if route.verb == "list":
        return lambda request: _list(ctx, resource, request)
    if route.verb == "get":
        return lambda request: _get(ctx, resource, request)
    return lambda request: _delete(ctx, resource, request)


def _answering(ctx: Context, route: routes.Route, handler: Handler) -> Handler:
    """The handler, once its caller is known and allowed the route's verb (a list, get or
    watch; a change is judged object by object where it is made), with every error it
    raises answered as its problem document."""
    async def answer(request: Request) -> Response:
        try:
            principal = await _principal(ctx, request)
            request.state.principal = principal
            if route.verb in ("list", "get") and route.resource is not None:
                from devcell.auth import policy

                verb = policy.Verb.watch if _watching(request) else policy.Verb(route.verb)
                policy.require(principal, verb, policy.ResourceRef(
                    route.resource.kind, request.path_params.get("name")))
            return await handler(request)
        except Exception as exc:  # noqa: BLE001  (each answered; the unexpected logged)
            return _problem(exc)
    return answer


def _watching(request: Request) -> bool:
    return request.query_params.get("watch", "").lower() in ("true", "1")


async def _principal(ctx: Context, request: Request | WebSocket) -> Any:
    """Who is asking: the bearer token's principal over TCP, the owner on the unix socket."""
    from devcell.auth import principals

    if not ctx.tokens:
        return principals.local_admin(ctx.state_dir)
    from devcell.errors import Unauthenticated

    token = _bearer(request)
    if token is None:
        raise Unauthenticated()
    from devcell.auth import tokens

    return await run_in_threadpool(tokens.authenticate_token, ctx.state_dir, token)


def _bearer(request: Request | WebSocket) -> str | None:
    """The request's bearer token (None: it has none)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _problem(exc: BaseException, headers: dict[str, str] | None = None) -> Response:
    doc = problems.of_error(exc)
    if doc["status"] == 401:
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="devcell"'}
    if doc["status"] >= 500 and doc["type"].endswith("/internal"):
        if isinstance(exc, ClientDisconnect):  # nobody reads this answer: not the daemon's
            # error (an upload its client gave up, a client killed), which any client could
            # repeat into the log at the ERROR level, with no reason
            logger.info("API client went away before its request's body was read")
        else:
            logger.error("API request failed: {}: {}", type(exc).__name__,
                         printable(str(exc)))
    return JSONResponse(doc, status_code=doc["status"], media_type=problems.MEDIA_TYPE,
                        headers=headers)


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a method the route does not have)."""
    status = getattr(exc, "status_code", 500)
    slug, title, detail = {
        404: ("no-route", "Not found", f"no API route {printable(request.url.path)}"),
        405: ("method-not-allowed", "Method not allowed",
              f"{printable(request.method)} is not allowed on {printable(request.url.path)}"),
    }.get(status, ("http-error", "HTTP error", str(getattr(exc, "detail", ""))))
    allow = (getattr(exc, "headers", None) or {}).get("Allow")  # a 405 says what is allowed
    return _problem(HttpProblem(status, slug, title, detail),
                    {"Allow": allow} if allow else None)


async def _unexpected(request: Request, exc: Exception) -> Response:
    return _problem(exc)


async def _no_socket_route(websocket: WebSocket) -> None:
    """A WebSocket to a path that has none: the 404 problem document as the answer to its
    handshake (Starlette's own refusal closes it, which the server answers a bare 403)."""
    from devcell.server import streams

    await websocket.send_denial_response(streams.denial(problems.document(
        404, "no-route", "Not found",
        f"no WebSocket route {printable(websocket.url.path)} (they are: "
        f"{', '.join(r.path for r in routes.table() if r.upgrade)})")))


# -- queries ------------------------------------------------------------------------------------


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name)
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True  # and an empty value is neither: the document says boolean
    raise UsageError(f"query parameter {name}: true or false, not {printable(value)!r}")


def _version(request: Request) -> int | None:
    given = request.query_params.get("resourceVersion")
    if given is None:
        given = request.headers.get("last-event-id")
    if given is None:
        return None
    if not given.isascii() or not given.isdigit() or len(given) > 18:
        raise UsageError(f"resourceVersion: a number (a list's metadata.resourceVersion), "
                         f"not {given!r}")
    return int(given)


def _timeout(request: Request, default: float = openapi.MAX_TIMEOUT_S) -> float:
    given = request.query_params.get("timeoutSeconds")
    if given is None:
        return float(default)
    if not given.isascii() or not given.isdigit() or not 1 <= int(given[:6]) <= \
            openapi.MAX_TIMEOUT_S or len(given) > 6:
        raise UsageError(f"timeoutSeconds: 1 to {openapi.MAX_TIMEOUT_S}, not {given!r}")
    return float(given)


def _selector(resource: Resource, request: Request) -> Any:
    given = request.query_params.get("labelSelector")
    if not given:
        return None
    if not resource.labeled:
        raise UsageError(f"{resource.plural} have no labels: labelSelector applies to cells, "
                         "snapshots and nodes")
    from devcell.manifests import selectors

    return selectors.parse(given)


def _open(ctx: Context) -> Any:
    from devcell.store.db import Database

    return Database(ctx.state_dir, create=False)


# -- list, get, watch ---------------------------------------------------------------------------


async def _openapi(request: Request) -> Response:
    return Response(openapi.document_text(), media_type=JSON_MEDIA)


async def _list(ctx: Context, resource: Resource, request: Request) -> Response:
    selector = _selector(resource, request)
    for_object = request.query_params.get("for") if resource.plural == "events" else None
    watch = _flag(request, "watch")
    after, timeout = _version(request), _timeout(request)  # checked even when not watching
    page = _page(resource, request, watch)
    if watch:
        return await _watch(ctx, resource, request, selector, for_object, after, timeout)
    # read and encoded in the pool, once per state of the database for every client asking
    # the same (server.lists): 10,000 cells are 14 MiB of JSON, ~1 s the event loop would
    # otherwise wait for, and 100 clients each encoding them grew the daemon to 4.7 GB
    from devcell.auth import policy
    from devcell.server import lists

    if ctx.lists is None:
        ctx.lists = lists.Lists(lambda: _open(ctx))
    selector_text = request.query_params.get("labelSelector") or ""
    key = ("list", resource.plural, selector_text, for_object or "", page,
           policy.list_view(request.state.principal))
    pieces = ctx.lists.fragments(key) if resource.plural in lists.FRAGMENTED and \
        not for_object else None
    body = await ctx.lists.body(key, lambda: _list_sync(
        ctx, resource, selector, for_object, page, selector_text, pieces))
    return StreamingResponse(lists.pieces(body), media_type=JSON_MEDIA,
                             headers={"Content-Length": str(len(body))})


def _page(resource: Resource, request: Request, watch: bool) -> tuple[int, str] | None:
    """(limit, the name the previous page ended at) of a paged list (server.paging); None:
    the whole list."""
    from devcell.server import paging

    most = paging.limit(request.query_params.get("limit"))
    given = request.query_params.get("continue")
    if most is None and given is None:
        return None
    if watch or resource.plural not in paging.PAGED:
        raise UsageError("limit and continue page a list of cells or snapshots (not a watch, "
                         "nor operations or events: those lists are the latest 500)")
    start = "" if given is None else paging.after(
        given, resource.plural, request.query_params.get("labelSelector") or "")
    return most or 0, start


def _list_sync(ctx: Context, resource: Resource, selector: Any, for_object: str | None,
               page: tuple[int, str] | None = None, selector_text: str = "",
               pieces: Any = None) -> bytes:
    """The list as one read transaction sees it, encoded: its items and its version agree (a
    commit between reading the version and the items no longer gives items newer than the
    version a watch then resumes from). `pieces` (server.lists.Fragments): the list's objects
    as last encoded, re-encoded only where changed."""
    from devcell.api import listing
    from devcell.server import lists, paging
    from devcell.store import changes

    db = _open(ctx)
    try:
        db.conn.execute("BEGIN")
        try:
            version = changes.latest(db.conn)
            if for_object:
                rows = listing.events_for(db, for_object)
            else:
                asked = None if page is None else (  # one more: whether more remain
                    page[1] or None, page[0] + 1 if page[0] else None)
                rows = listing.rows(db, resource.plural, [], selector, page=asked)
            ended = None
            if page is not None:
                rows, ended = paging.page(rows, page[1] or None, page[0] or None)
            if pieces is not None:
                items = pieces.items(db, resource.plural, rows)
            else:
                items = [lists.encoded(doc)
                         for _, doc in listing.documents(db, resource.plural, rows)]
        finally:
            db.conn.execute("COMMIT")
    finally:
        db.close()
    meta = {"resourceVersion": str(version)}
    if ended is not None:
        meta["continue"] = paging.token(resource.plural, selector_text, ended)
    return lists.list_body(items, meta)


async def _rows(ctx: Context, resource: Resource, request: Request) -> Response:
    """What `devcell get` prints its tables from (api.listing's rows: OBSERVED, AGE and
    CrashLoopBackOff as the server's clock and observations say), each with its document
    when asked (`objects=true`: -o json|yaml, jsonpath, --sort-by), so that `devcell
    --server URL get` prints exactly what `get` prints on the server's machine."""
    selector = _selector(resource, request)
    for_object = request.query_params.get("for") if resource.plural == "events" else None
    of_cell = request.query_params.get("cell") if resource.plural == "snapshots" else None
    if of_cell is not None and not 0 < len(of_cell) <= 63:
        raise UsageError("cell: a cell's name or id, 1 to 63 characters")
    names = request.query_params.getlist("name")
    if len(names) > openapi.MAX_NAMES or any(not n or len(n) > 63 for n in names):
        raise UsageError(f"name: at most {openapi.MAX_NAMES} names, each 1 to 63 "
                         "characters (a name or an id)")
    wide, labels, objects = (_flag(request, "wide"), _flag(request, "labels"),
                             _flag(request, "objects"))
    body = await run_in_threadpool(lambda: json.dumps(_rows_sync(
        ctx, resource, selector, for_object, names, wide, labels, objects, of_cell),
        default=str))
    return Response(body, media_type=JSON_MEDIA)


def _rows_sync(ctx: Context, resource: Resource, selector: Any, for_object: str | None,
               names: list[str], wide: bool, labels: bool, objects: bool,
               of_cell: str | None = None) -> dict[str, Any]:
    from devcell.api import listing
    from devcell.store import changes

    db = _open(ctx)
    warnings: list[str] = []
    try:
        version = changes.latest(db.conn)
        if for_object:
            rows = listing.events_for(db, for_object)
        else:
            rows = listing.rows(db, resource.plural, names, selector, wide=wide,
                                labels=labels, cell=of_cell)
        if wide:
            import dataclasses

            warnings = listing.measured(db, resource.plural, rows)
            for r in rows:
                if r.get("usage") is not None:
                    r["usage"] = dataclasses.asdict(r["usage"])
        if objects:
            items = [{"row": r, "object": d}
                     for r, d in listing.documents(db, resource.plural, rows)]
        else:
            items = [{"row": r} for r in rows]
        notes = listing.controller_warnings(db) if resource.plural in \
            listing.KIND_OF_TABLE else []
    finally:
        db.close()
    return {"apiVersion": "v1", "kind": "RowList", "items": items, "warnings": warnings,
            "notes": notes, "metadata": {"resourceVersion": str(version)}}


async def _get(ctx: Context, resource: Resource, request: Request) -> Response:
    name = request.path_params["name"]
    doc = await run_in_threadpool(_get_sync, ctx, resource, name)
    return JSONResponse(doc)


def _get_sync(ctx: Context, resource: Resource, name: str) -> dict[str, Any]:
    from devcell.api import listing

    db = _open(ctx)
    try:
        rows = listing.rows(db, resource.plural, [name], None)
        key = "id" if resource.plural == "operations" else None
        rows = [r for r in rows if name in ((r["id"],) if key else (r["name"], r["id"]))]
        docs = listing.documents(db, resource.plural, rows[:1])
        if docs:
            return docs[0][1]
        close = ""
        if resource.plural in listing.KIND_OF_TABLE:
            from devcell.store import objects

            close = objects.suggestion(db.conn, resource.kind, name)
    finally:
        db.close()
    raise NotFound(f'{resource.kind.lower()} "{name}" not found{close}')


async def _describe(ctx: Context, resource: Resource, request: Request) -> Response:
    """The text `devcell describe` prints of one object (api.describe, the same code)."""
    name = request.path_params["name"]
    said = await run_in_threadpool(_describe_sync, ctx, resource, name)
    return Response(said, media_type="text/plain; charset=utf-8")


def _describe_sync(ctx: Context, resource: Resource, name: str) -> str:
    from devcell.api import describe

    db = _open(ctx)
    try:
        return describe.text(db.conn, resource.kind, name, db.state_dir)
    finally:
        db.close()


async def _watch(ctx: Context, resource: Resource, request: Request, selector: Any,
                 for_object: str | None, after: int | None, timeout: float) -> Response:
    from devcell.errors import VersionGone
    from devcell.server.watch import Readings, Watcher

    sse = "text/event-stream" in request.headers.get("accept", "")
    principal = request.state.principal
    ctx.take_watch(principal, "watches")  # before the first await
    holding = True
    db: Any = None
    shared: Any = None
    if ctx.readings is None:
        ctx.readings = Readings(lambda: _open(ctx))
    readings = ctx.readings

    def release() -> None:
        """Give the slot, the connection and the shared reading back, once, however the
        watch ends."""
        nonlocal db, shared, holding
        if db is not None:
            db.close()
            db = None
        if shared is not None:
            readings.give_back(shared)
            shared = None
        if holding:
            holding = False
            ctx.give_watch(principal)

    try:
        if for_object:  # checked as a list checks it
            from devcell.api import listing

            listing.for_target(for_object)
        db = opened = await run_in_threadpool(_open, ctx)
        if resource.plural != "events":
            shared = await run_in_threadpool(readings.take, resource, selector, [])
        watcher = await run_in_threadpool(lambda: Watcher(
            opened, resource, selector=selector, for_object=for_object, after=after,
            shared=shared))
    except BaseException:
        release()
        raise

    token = _bearer(request) if ctx.tokens else None

    def still_valid() -> bool:
        """Whether the watch's token still authenticates (revoked or expired: end it)."""
        from devcell.auth import tokens
        from devcell.errors import Unauthenticated

        try:
            tokens.authenticate(watcher.db, token or "")
        except Unauthenticated:
            return False
        return True

    async def stream() -> AsyncIterator[bytes]:
        deadline = time.monotonic() + timeout
        quiet_since = checked = time.monotonic()
        while time.monotonic() < deadline:
            if ctx.tokens and time.monotonic() - checked >= AUTH_SECONDS:
                if not await run_in_threadpool(still_valid):
                    return
                checked = time.monotonic()
            try:
                changes = await run_in_threadpool(watcher.poll) if watcher.moved() else []
            except VersionGone as exc:  # fell behind what the change log keeps: relist
                yield _frame({"type": "ERROR", "resourceVersion": str(watcher.version),
                              "object": problems.of_error(exc)}, sse)
                return
            for change in changes:
                yield _frame(change, sse)
            if changes:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= BOOKMARK_SECONDS:
                yield _frame(watcher.bookmark(), sse)
                quiet_since = time.monotonic()
            await anyio.sleep(POLL_SECONDS)

    media = "text/event-stream" if sse else openapi.WATCH_MEDIA
    return _Released(stream(), release, media_type=media,
                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _Released(StreamingResponse):
    """A streaming response that calls `release` when it is done, even when the client left
    before its body began (a generator never started never runs its `finally`)."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _frame(change: dict[str, Any], sse: bool) -> bytes:
    data = json.dumps(change, separators=(",", ":"), default=str)
    if not sse:
        return (data + "\n").encode()
    return f"id: {change['resourceVersion']}\nevent: {change['type']}\ndata: {data}\n\n".encode()


# -- apply, delete ------------------------------------------------------------------------------


async def _body(ctx: Context, request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, refused early when it is larger than `limit` or arrives too slowly."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isascii() or not declared.isdigit():
            raise HttpProblem(400, "bad-request", "The request is not valid",
                              "Content-Length is not a number")
        if int(declared[:12]) > limit or len(declared) > 12:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(ctx.body_seconds):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise HttpProblem(408, "body-timeout", "Request timeout",
                          f"the body did not arrive within {ctx.body_seconds:g}s") from None
    return b"".join(chunks)


def _too_large(limit: int = MAX_BODY_BYTES) -> HttpProblem:
    if limit != MAX_BODY_BYTES:
        return HttpProblem(413, "body-too-large", "Content too large",
                           f"this request's body is at most {limit} bytes")
    return HttpProblem(413, "body-too-large", "Content too large",
                       f"a request body is at most {MAX_BODY_BYTES} bytes (each manifest "
                       "document at most 1 MiB); split it into several requests")


def _media(request: Request) -> str:
    given = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if given == JSON_MEDIA or given.endswith("+json"):
        return "json"
    if given in YAML_MEDIAS:
        return "yaml"
    raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                      f"send manifests as application/yaml (a stream of documents) or "
                      f"application/json (one document), not {given or 'no Content-Type'!r}")


async def _apply(ctx: Context, request: Request) -> Response:
    from devcell.server import applying

    media = _media(request)
    dry_run = _flag(request, "dryRun")
    principal = request.state.principal
    # the query is judged before the body is read (server.applying: from, prune, ...)
    client_set = applying.client_set(request.query_params, principal,
                                      prune=_flag(request, "prune"))
    keep = applying.keep_seconds(request.query_params.get("keepPrunedSeconds"))
    ctx.manifests.take(principal, f"{MAX_MANIFEST_REQUESTS} apply and diff requests are "
                                  "being served; try again later")
    try:  # the slot before the first await: a burst cannot all pass the check
        data = await _body(ctx, request)
        doc = await run_in_threadpool(_apply_sync, ctx, principal, data, media, dry_run,
                                      client_set, keep)
    finally:
        ctx.manifests.give(principal)
    return JSONResponse(doc)


def _apply_sync(ctx: Context, principal: Any, data: bytes, media: str, dry_run: bool,
                client_set: Any, keep_pruned: int) -> dict[str, Any]:
    from devcell.api import apply, converging, reports
    from devcell.manifests import loader
    from devcell.store import actor

    source = loader.from_bytes(f"request.{media}", data)
    _authorize_apply(ctx, principal, source)
    with actor.acting_as(principal.user):
        report = apply.apply_sources(ctx.state_dir, [source], dry_run=dry_run,
                                     options=converging.Options(wait=False),
                                     client_set=client_set, keep_pruned=keep_pruned)
    return reports.document(report)


async def _op_action(ctx: Context, which: str, request: Request) -> Response:
    """Resume (with the gate's answers) or cancel a suspended operation (server.op_actions);
    the operation's document as it stands after."""
    from devcell.server import op_actions

    given: dict[str, Any] = {}
    if which == "resume":
        if "content-type" in request.headers and _media(request) != "json":
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              "send the resume's input as application/json")
        given = op_actions.parse_input(await _body(ctx, request, op_actions.MAX_BODY_BYTES))
    op_ref = request.path_params["name"]
    await run_in_threadpool(op_actions.record, ctx.state_dir, request.state.principal, which,
                            op_ref, given)
    doc = await run_in_threadpool(_get_sync, ctx, routes.RESOURCES["operations"], op_ref)
    return JSONResponse(doc)


async def _df(ctx: Context, request: Request) -> Response:
    """`devcell df` (api.df, measured now): what the state directory takes by type, each
    item with verbose=true; any role (rule read), two at once."""
    from devcell.api import df
    from devcell.auth import principals

    verbose = _flag(request, "verbose")
    principal = request.state.principal
    if principal.role is principals.Role.admin:  # two users' loops cannot lock them out
        report = await run_in_threadpool(df.df, ctx.state_dir)
        return JSONResponse(report.document(verbose=verbose))
    ctx.measuring.take(principal, f"{MAX_MEASURING} df requests are being measured; try "
                                  "again later")
    try:
        report = await run_in_threadpool(df.df, ctx.state_dir)
    finally:
        ctx.measuring.give(principal)
    return JSONResponse(report.document(verbose=verbose))


async def _lineage(ctx: Context) -> Response:
    """The lineage rows (store.views.lineage: names, phases and links, no spec): every
    role reads them (rule read), as it lists snapshots."""
    def read() -> dict[str, Any]:
        from devcell.store import views

        db = _open(ctx)
        try:
            cells, snapshots = views.lineage(db.conn)
        finally:
            db.close()
        return {"cells": cells, "snapshots": snapshots}

    return JSONResponse(await run_in_threadpool(read))


def _token_handler(ctx: Context, route: routes.Route) -> Handler:
    """The tokens' routes (server.token_routes), an admin's: a made token is answered once,
    never cached."""
    from devcell.server import token_routes

    async def list_tokens(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(token_routes.listed, ctx.state_dir,
                                                    request.state.principal))

    async def create_token(request: Request) -> Response:
        from devcell.auth import policy

        # refused before the body is read: a viewer's body is never parsed
        policy.require(request.state.principal, policy.Verb.token_admin,
                       token_routes.TOKENS)
        if _media(request) != "json":
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              "send the token's user and role as application/json")
        data = await _body(ctx, request, token_routes.MAX_BODY_BYTES)
        made = await run_in_threadpool(token_routes.create, ctx.state_dir,
                                       request.state.principal, data)
        return JSONResponse(made, status_code=201, headers={"Cache-Control": "no-store"})

    async def revoke_token(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(
            token_routes.revoke, ctx.state_dir, request.state.principal,
            request.path_params["name"]))

    return {"list_tokens": list_tokens, "create_token": create_token,
            "revoke_token": revoke_token}[route.name]


def _transfer_handler(ctx: Context, route: routes.Route) -> Handler:
    """A snapshot's archive out (streamed from a writer thread) or in (spooled, then
    imported): server.transfer_routes; one of MAX_TRANSFERS each, one a user's who is not an
    admin."""
    from devcell.server import transfer_routes as tr

    def take(principal: Any) -> None:
        ctx.transfers.take(principal, f"{tr.MAX_TRANSFERS} snapshot exports and imports are "
                                      "being served; try again later")

    async def export(request: Request) -> Response:
        principal = request.state.principal
        name = await run_in_threadpool(tr.exportable, ctx.state_dir, principal,
                                       request.path_params["name"])
        if request.method == "HEAD":  # what a GET would answer, exporting nothing
            return Response(media_type=tr.ARCHIVE_MEDIA, headers={"Cache-Control": "no-store"})
        take(principal)
        stream = tr.Export(ctx.state_dir, principal, name)
        stream.start()
        released = False

        def release() -> None:
            nonlocal released
            stream.stop()
            if not released:
                released = True
                ctx.transfers.give(principal)

        check = _token_check(ctx, request)

        async def still_allowed() -> bool:
            return True if check is None else bool(await check())

        return _Released(stream.pieces(still_allowed), release, media_type=tr.ARCHIVE_MEDIA,
                         headers={tr.OPERATION_HEADER: stream.op_id,
                                  "Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def import_(request: Request) -> Response:
        from devcell.auth import policy

        principal = request.state.principal
        name, origin = tr.import_query(request.query_params)
        # refused before the body is read: a viewer's archive is never spooled
        policy.require(principal, policy.Verb.create,
                       policy.ResourceRef("Snapshot", name, principal.user))
        given = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if given not in (tr.ARCHIVE_MEDIA, "application/octet-stream"):
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              f"send the archive as {tr.ARCHIVE_MEDIA}")
        await run_in_threadpool(tr.name_free, ctx.state_dir, name)
        take(principal)
        try:
            spool = await _spool(ctx, request)
            try:
                doc = await run_in_threadpool(tr.import_spooled, ctx.state_dir, principal,
                                              spool, name, origin)
            finally:
                spool.unlink(missing_ok=True)
        finally:
            ctx.transfers.give(principal)
        return JSONResponse(doc, status_code=201)

    async def registry(request: Request) -> Response:
        from devcell.auth import policy

        principal = request.state.principal
        # refused before the body is read: only an admin uses the server's registry logins
        policy.require(principal, policy.Verb.registry,
                       policy.ResourceRef("Snapshot", request.path_params.get("name")))
        if _media(request) != "json":
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              "send the push's or pull's fields as application/json")
        data = await _body(ctx, request, tr.MAX_REGISTRY_BODY)
        take(principal)
        try:
            if route.name == "push_snapshot":
                doc = await run_in_threadpool(tr.push, ctx.state_dir, principal,
                                              request.path_params["name"], data)
            else:
                doc = await run_in_threadpool(tr.pull, ctx.state_dir, principal, data)
        finally:
            ctx.transfers.give(principal)
        return JSONResponse(doc, status_code=201 if route.name == "pull_snapshot" else 200)

    return {"export_snapshot": export, "import_snapshot": import_, "push_snapshot": registry,
            "pull_snapshot": registry}[route.name]


async def _spool(ctx: Context, request: Request) -> Path:
    """The request's body in an owner-only file of the state directory (transfer_routes):
    refused (413, the file removed) past its bound, from Content-Length or as it grows; each
    piece must arrive within the body's time (408), the whole may take as long as it
    needs."""
    from devcell.server import transfer_routes as tr

    fd, path, bound = await run_in_threadpool(tr.spool_file, ctx.state_dir,
                                              ctx.archive_bytes)
    try:
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isascii() or not declared.isdigit()):
            raise HttpProblem(400, "bad-request", "The request is not valid",
                              "Content-Length is not a number")
        if declared is not None and (len(declared) > 15 or int(declared) > bound):
            raise tr.too_large(bound, ctx.archive_bytes)
        size = 0
        pending: list[bytes] = []
        pieces = request.stream().__aiter__()
        while True:
            try:
                with anyio.fail_after(ctx.body_seconds):
                    chunk = await pieces.__anext__()
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise HttpProblem(408, "body-timeout", "Request timeout",
                                  f"the archive stopped arriving for {ctx.body_seconds:g}s; "
                                  "nothing was imported") from None
            size += len(chunk)
            if size > bound:
                raise tr.too_large(bound, ctx.archive_bytes)
            pending.append(chunk)
            if sum(map(len, pending)) >= tr.PIECE * 4:
                data, pending = b"".join(pending), []
                await run_in_threadpool(tr.write_spooled, fd, data, path.parent, size,
                                        ctx.archive_bytes)
        if pending:
            await run_in_threadpool(tr.write_spooled, fd, b"".join(pending), path.parent,
                                    size, ctx.archive_bytes)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return path


def _node_handler(ctx: Context, route: routes.Route) -> Handler:
    """The nodes' routes (server.node_routes), each asking the engine on a worker thread."""
    from devcell.server import node_routes

    async def engine(request: Request, read: Callable[..., Any], *args: Any) -> Response:
        """`read` on a worker thread, one of MAX_ENGINE_READS (one a user who is not an
        admin): each asks the swarm manager's engine three times."""
        principal = request.state.principal
        ctx.engine_reads.take(principal, f"{MAX_ENGINE_READS} node lists are being read; "
                                         "try again later")
        try:
            return JSONResponse(await run_in_threadpool(read, ctx.state_dir, *args))
        finally:
            ctx.engine_reads.give(principal)

    async def list_nodes(request: Request) -> Response:
        if _flag(request, "watch"):
            raise UsageError("nodes are read from the engine by each request: they cannot be "
                             "watched (list them again)")
        return await engine(request, node_routes.listed, _selector(routes.NODES, request))

    async def get_node(request: Request) -> Response:
        return await engine(request, node_routes.one, request.path_params["name"])

    async def act(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(
            node_routes.act, ctx.state_dir, request.state.principal,
            request.path_params["name"], route.verb))

    if route.verb == "drain":
        return lambda request: _drain(ctx, request)
    if route.verb == "list":
        return list_nodes
    return get_node if route.verb == "get" else act


async def _drain(ctx: Context, request: Request) -> Response:
    """`devcell node drain` (server.drains): refused before the stream begins (not an admin,
    no cluster, no such node, ..., one running there: 409), then its lines as they come from
    a thread of its own, which a client leaving never stops."""
    from devcell.api import drain, nodes
    from devcell.auth import policy
    from devcell.server import drains

    principal = request.state.principal
    name = request.path_params["name"]
    policy.require(principal, policy.Verb.update, policy.ResourceRef("Node", name))
    from_last_snapshot = _flag(request, "fromLastSnapshot")
    timeout = _timeout(request, openapi.ACTION_TIMEOUT_S)
    ctx.drains.take()  # before the first await, as a watch's slot
    try:
        target = await run_in_threadpool(lambda: drain.target(
            ctx.state_dir, name, from_last_snapshot=from_last_snapshot,
            where=nodes.SERVER_SETTING))
        running = ctx.drains.claim(target.id, principal.user)
    except BaseException:
        ctx.drains.give()
        raise
    drains.start(ctx.drains, running, ctx.state_dir, principal, target, timeout)
    return StreamingResponse(drains.stream(running), media_type=drains.MEDIA,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
MACHINE_ROUTES = ("gc", "list_images", "prune_images", "build_base_image")


def _machine_handler(ctx: Context, route: routes.Route) -> Handler:
    """gc and the images' routes (server.machine_routes): the policy first, then the query,
    then the work on a worker thread; a collection and a build one at a time, an image list
    or a prune's dry run one of the engine reads."""
    from devcell.server import machine_routes as machine

    async def alone(what: str, principal: Any, work: Callable[[], Any]) -> Response:
        slots = ctx.machine[what]
        slots.take(principal, f"{slots.title.lower()} on this server; try again once it is "
                              "done")
        try:
            return JSONResponse(await run_in_threadpool(work))
        finally:
            slots.give(principal)

    async def engine(principal: Any, work: Callable[[], Any]) -> Response:
        ctx.engine_reads.take(principal, f"{MAX_ENGINE_READS} engine reads are being served; "
                                         "try again later")
        try:
            return JSONResponse(await run_in_threadpool(work))
        finally:
            ctx.engine_reads.give(principal)

    async def gc(request: Request) -> Response:
        principal = request.state.principal
        machine.may_collect(principal)
        approve, dry_run = _flag(request, "approve"), _flag(request, "dryRun")
        return await alone("gc", principal, lambda: machine.collect(
            ctx.state_dir, principal, approve=approve, dry_run=dry_run))

    async def list_images(request: Request) -> Response:
        return await engine(request.state.principal, lambda: machine.listed(ctx.state_dir))

    async def prune_images(request: Request) -> Response:
        principal = request.state.principal
        dry_run = _flag(request, "dryRun")
        if not dry_run:
            machine.may_change_images(principal)
            return await alone("images", principal, lambda: machine.pruned(
                ctx.state_dir, principal, dry_run=False))
        return await engine(principal, lambda: machine.pruned(ctx.state_dir, principal,
                                                              dry_run=True))

    async def build_base_image(request: Request) -> Response:
        principal = request.state.principal
        machine.may_change_images(principal)
        force = _flag(request, "force")
        return await alone("images", principal, lambda: machine.built(
            ctx.state_dir, principal, force=force))

    return {"gc": gc, "list_images": list_images, "prune_images": prune_images,
            "build_base_image": build_base_image}[route.name]


async def _ssh_host_key(ctx: Context) -> Response:
    """The state directory's SSH host key, public half (made on first use, as `ssh-config`
    makes it): a client pins it for *.devcell."""
    def public() -> str:
        from devcell.api.ssh import keys

        return keys.public_key(keys.host_key(ctx.state_dir))

    return JSONResponse({"publicKey": await run_in_threadpool(public)})


async def _diff(ctx: Context, request: Request) -> Response:
    """`devcell diff -f` of the stream (api.diff, the same code): read-only, so any caller
    may ask it (every role reads every object; secrets are never in a diff), within what
    _diff_judge allows."""
    media = _media(request)
    principal = request.state.principal
    ctx.manifests.take(principal, f"{MAX_MANIFEST_REQUESTS} apply and diff requests are "
                                  "being served; try again later")
    try:
        data = await _body(ctx, request)
        doc = await run_in_threadpool(_diff_sync, ctx, principal, data, media)
    finally:
        ctx.manifests.give(principal)
    return JSONResponse(doc)


def _diff_sync(ctx: Context, principal: Any, data: bytes, media: str) -> dict[str, Any]:
    from devcell.api import diff
    from devcell.manifests import loader

    source = loader.from_bytes(f"request.{media}", data)
    return diff.diff_sources(ctx.state_dir, [source],
                             judge=lambda conn, m, recorded: _diff_judge(principal, conn, m,
                                                                         recorded)).document()


def _diff_judge(principal: Any, conn: Any, m: Any, recorded: Any) -> bool:
    """A diff asked by `principal` (api.diff.Judge): a cell that names the server's files
    only from an admin, as apply refuses it (rule host-admin: judging a build hashes its
    context, a path on the server's disk, and shows the digest); whether its secrets equal
    the recorded ones only to whoever may update the object (a viewer or another developer
    could confirm guesses of a secret otherwise)."""
    from devcell.auth import policy, principals, resources

    if principal.role is principals.Role.admin:
        return True
    if m.kind == "Cell":
        verb = policy.Verb.update if recorded is not None else policy.Verb.create
        ref = resources.recorded(conn, m.kind, m.name) if recorded is not None \
            else resources.to_create(principal.user, m)
        policy.require_host(principal, verb, ref, resources.host_reach(m.spec))
    return recorded is None or policy.authorize(
        principal, policy.Verb.update, resources.recorded(conn, m.kind, m.name)).allowed


def _authorize_apply(ctx: Context, principal: Any, source: Any) -> None:
    """Each object the stream creates or changes, judged before anything is recorded: a new
    cell as its creator's (or its metadata.owner's), one that names the server's own files,
    devices or network only from an admin (rule host-admin), and a new cell forked from a snapshot
    (spec.workspace.from) as the `fork` verb on that snapshot's cell, as the fork action asks
    (its workspace is that cell's files); a recorded cell by its owner and sharedWith, a new
    snapshot as the `snapshot` verb on its cell, a recorded one as itself (auth.resources:
    its live cell's, else its own owner's). A stream that does not parse is left to
    apply, which refuses it with its located problems."""
    from devcell.auth import policy, principals, resources
    from devcell.manifests import validate
    from devcell.store import objects

    if principal.role is principals.Role.admin:
        return
    found, problems_found = validate.parse_source(source)
    if problems_found:
        return
    db = _open(ctx)
    try:
        for m in found:
            if m.kind == "Snapshot" and objects.get(db.conn, "Snapshot", m.name) is not None:
                # a recorded snapshot is changed (labels, a ttl: its deletion) as its own
                # resource (its spec.cell is immutable): the cell that name names may be
                # another's (a deleted cell's name made again, an imported archive's cell)
                policy.require(principal, policy.Verb.update,
                               resources.recorded(db.conn, "Snapshot", m.name))
            elif m.kind == "Snapshot":
                cell = str(m.spec.get("cell", ""))
                policy.require(principal, policy.Verb.snapshot,
                               resources.recorded(db.conn, "Cell", cell))
            elif objects.get(db.conn, m.kind, m.name) is not None:
                recorded = resources.recorded(db.conn, m.kind, m.name)
                policy.require_update(principal, recorded, resources.to_update(m),
                                      server_owner=principals.local_user(ctx.state_dir))
                policy.require_host(principal, policy.Verb.update, recorded,
                                    resources.host_reach(m.spec))
            else:
                made = resources.to_create(principal.user, m)
                policy.require(principal, policy.Verb.create, made)
                policy.require_host(principal, policy.Verb.create, made,
                                    resources.host_reach(m.spec) if m.kind == "Cell" else None)
                _authorize_fork_source(db.conn, principal, m)
    finally:
        db.close()


def _authorize_fork_source(conn: Any, principal: Any, m: Any) -> None:
    """A new cell whose workspace is restored from a recorded snapshot: the `fork` verb on
    it (its cell's owner and sharedWith). A snapshot not recorded is the same stream's own
    (judged as the `snapshot` verb on its cell) or one admission refuses as not found.
    spec.workspace.from is immutable, so only a new cell is judged."""
    from devcell.auth import policy, resources
    from devcell.store import objects

    workspace = m.spec.get("workspace") if m.kind == "Cell" else None
    source = workspace.get("from") if isinstance(workspace, dict) else None
    snapshot = source.get("snapshot") if isinstance(source, dict) else None
    if isinstance(snapshot, str) and objects.get(conn, "Snapshot", snapshot) is not None:
        policy.require(principal, policy.Verb.fork,
                       resources.recorded(conn, "Snapshot", snapshot))


async def _delete(ctx: Context, resource: Resource, request: Request) -> Response:
    name = request.path_params["name"]
    doc = await run_in_threadpool(_delete_sync, ctx, request.state.principal, resource, name)
    return JSONResponse(doc)


def _delete_sync(ctx: Context, principal: Any, resource: Resource, name: str
                 ) -> dict[str, Any]:
    from devcell.api import apply, converging, reports
    from devcell.auth import policy, resources
    from devcell.store import actor, objects

    db = _open(ctx)
    try:
        if objects.get(db.conn, resource.kind, name) is None:
            raise NotFound(f'{resource.kind.lower()} "{name}" not found'
                           f"{objects.suggestion(db.conn, resource.kind, name)}")
        policy.require(principal, policy.Verb.delete,
                       resources.recorded(db.conn, resource.kind, name))
    finally:
        db.close()
    with actor.acting_as(principal.user):
        report = apply.delete(ctx.state_dir, resource.kind, name,
                              options=converging.Options(wait=False))
    return reports.document(report)


# -- actions on a cell: sleep, start, snapshot, fork, restart, rerun-hooks ----------------------


async def _action(ctx: Context, verb: str, request: Request) -> Response:
    """Record the action (server.actions), then answer 202 or, with wait=true, wait for its
    objects and answer 200 with how each ended."""
    from devcell.server import actions

    wait = _flag(request, "wait")
    timeout = _timeout(request, openapi.ACTION_TIMEOUT_S)
    data = b""
    if verb in routes.BODY_ACTIONS:
        # restart's body may be left out: then it has no Content-Type, and must be empty
        bare = verb in routes.OPTIONAL_BODY_ACTIONS and "content-type" not in request.headers
        if not bare and _media(request) != "json":
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              f"send the {verb}'s fields as application/json")
        data = await _body(ctx, request, actions.MAX_BODY_BYTES)
        if bare and data:
            raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                              f"send the {verb}'s fields as application/json")
    asked = actions.parse(verb, data)
    cell = request.path_params["name"]
    principal = request.state.principal
    if wait:  # the wait's slot before anything is recorded: a 503 then means nothing was done
        ctx.take_watch(principal, "watches and waits")  # (a retry made a second snapshot)
    try:
        recorded = await run_in_threadpool(actions.record, ctx.state_dir, principal, cell,
                                           asked)
    except BaseException:
        if wait:
            ctx.give_watch(principal)
        raise
    from urllib.parse import quote

    headers = {"Location": f"{routes.PREFIX}/cells/{quote(cell, safe='')}"}
    if not wait:
        return JSONResponse(recorded.doc, status_code=202, headers=headers)
    return JSONResponse(await _settle(ctx, principal, recorded, timeout), headers=headers)


async def _settle(ctx: Context, principal: Any, recorded: Any, timeout: float
                  ) -> dict[str, Any]:
    """Wait until the objects an action recorded settle or fail, or `timeout` runs out,
    polled from the event loop on a connection of its own; gives back the watch slot the
    action took for it before recording."""
    from devcell.server import actions

    wanted = actions.keys(recorded.doc)
    db: Any = None
    try:
        db = await run_in_threadpool(_open, ctx)
        end = time.monotonic() + timeout
        seen: int | None = None
        while True:
            current = db.data_version()
            moved, seen = current != seen, current
            if moved or time.monotonic() >= end:
                waited = await run_in_threadpool(actions.check, db, wanted)
                if not waited.waiting or time.monotonic() >= end:
                    break
            await anyio.sleep(actions.POLL_SECONDS)
        return await run_in_threadpool(actions.finished, db, recorded, waited, timeout)
    finally:
        if db is not None:
            db.close()
        ctx.give_watch(principal)


async def _restore(ctx: Context, request: Request) -> Response:
    """Restore a snapshot into its cell (server.restoring): its plan (dryRun), recorded (202),
    or, with wait=true, once the daemon carried it out or it waits at its gate (200)."""
    from devcell.server import restoring

    wait = _flag(request, "wait")
    timeout = _timeout(request, openapi.ACTION_TIMEOUT_S)
    bare = "content-type" not in request.headers  # its body may be left out
    if not bare and _media(request) != "json":
        raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                          "send the restore's fields as application/json")
    from devcell.server import actions

    data = await _body(ctx, request, actions.MAX_BODY_BYTES)
    if bare and data:
        raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                          "send the restore's fields as application/json")
    asked = restoring.parse(data)
    principal = request.state.principal
    waits = wait and not asked.dry_run
    if waits:  # the wait's slot before anything is recorded, as an action takes it
        ctx.take_watch(principal, "watches and waits")
    try:
        recorded = await run_in_threadpool(restoring.record, ctx.state_dir, principal,
                                           request.path_params["name"], asked)
    except BaseException:
        if waits:
            ctx.give_watch(principal)
        raise
    if not waits:
        return JSONResponse(recorded.doc, status_code=200 if asked.dry_run else 202)
    db: Any = None
    try:
        db = await run_in_threadpool(_open, ctx)
        end = time.monotonic() + timeout
        seen: int | None = None
        done = False
        while True:
            current = db.data_version()
            moved, seen = current != seen, current
            if moved:
                done = await run_in_threadpool(restoring.carried_out, db, recorded,
                                               asked.approve)
            if done or time.monotonic() >= end:
                break
            await anyio.sleep(actions.POLL_SECONDS)
        doc = await run_in_threadpool(restoring.finished, db, recorded, timeout, done)
    finally:
        if db is not None:
            db.close()
        ctx.give_watch(principal)
    return JSONResponse(doc)


# -- streams: exec ------------------------------------------------------------------------------


async def _upgrade_required(route: routes.Route, request: Request) -> Response:
    """A plain request to a stream: its query judged as an upgrade's would be (400), then
    426."""
    from devcell.server import forward, streams

    if route.verb == "port_forward":
        forward.parse(request.query_params)
    elif route.verb == "exec":
        streams.parse(request.query_params)
    raise HttpProblem(426, "upgrade-required", "Upgrade required",
                      f"{printable(request.url.path)} is a WebSocket: connect with "
                      "Upgrade: websocket (docs/api.md says its framing)")


def _socket(ctx: Context, route: routes.Route) -> Callable[[WebSocket], Awaitable[None]]:
    if route.verb in ("port_forward", "ssh"):
        return lambda websocket: _forward(ctx, websocket, ssh=route.verb == "ssh")

    async def serve(websocket: WebSocket) -> None:
        """Everything refusable refused before the upgrade (a problem document with its
        status), then the stream (server.streams)."""
        from devcell.server import streams

        try:
            principal = await _principal(ctx, websocket)
            asked = streams.parse(websocket.query_params)
            ctx.take_stream(principal)
        except Exception as exc:  # noqa: BLE001  (each answered as its problem)
            await websocket.send_denial_response(streams.denial(_logged(exc)))
            return
        try:
            notes: list[str] = []
            try:
                attached = await run_in_threadpool(streams.prepare, ctx.state_dir,
                                                   principal, websocket.path_params["name"],
                                                   notes=notes)
            except Exception as exc:  # noqa: BLE001
                await websocket.send_denial_response(streams.denial(_logged(exc)))
                return
            await streams.relay(ctx.state_dir, websocket, attached, asked, ctx.limiter(),
                                _token_check(ctx, websocket), notes=notes)
        finally:
            ctx.give_stream(principal)
    return serve


async def _forward(ctx: Context, websocket: WebSocket, *, ssh: bool) -> None:
    """A port-forward connection, or an SSH one (server.forward): everything refusable
    refused before the upgrade, the connection to the cell's port included."""
    from devcell.server import forward, streams

    try:
        principal = await _principal(ctx, websocket)
        port = None if ssh else forward.parse(websocket.query_params)
        ctx.forwards.take(principal, f"{ctx.forwards.total} port-forward connections are "
                                     "open; try again later")
    except Exception as exc:  # noqa: BLE001  (each answered as its problem)
        await websocket.send_denial_response(streams.denial(_logged(exc)))
        return
    try:
        notes: list[str] = []
        name = websocket.path_params["name"]
        try:
            async with ctx.connecting(principal) as limiter:
                if port is None:
                    upstream, ref = await anyio.to_thread.run_sync(
                        forward.ssh, ctx.state_dir, principal, name, notes, limiter=limiter)
                else:
                    upstream, ref = await anyio.to_thread.run_sync(
                        forward.connect, ctx.state_dir, principal, name, port, notes,
                        limiter=limiter)
        except Exception as exc:  # noqa: BLE001
            await websocket.send_denial_response(streams.denial(_logged(exc)))
            return
        await forward.relay(ctx.state_dir, websocket, upstream, ref, port,
                            _token_check(ctx, websocket), notes=notes)
    finally:
        ctx.forwards.give(principal)


def _logged(exc: BaseException) -> dict[str, Any]:
    """The problem document of `exc`; an unexpected one logged, as _problem does."""
    doc = problems.of_error(exc)
    if doc["status"] >= 500 and doc["type"].endswith("/internal"):
        logger.error("API stream failed: {}: {}", type(exc).__name__, printable(str(exc)))
    return doc


# -- logs ---------------------------------------------------------------------------------------


def _token_check(ctx: Context, connection: Request | WebSocket) -> Any:
    """For a long stream over TCP: whether its token still authenticates (None: no token
    to check, the unix socket)."""
    token = _bearer(connection) if ctx.tokens else None
    if token is None:
        return None

    async def still_allowed() -> bool:
        from devcell.auth import tokens
        from devcell.errors import Unauthenticated

        try:
            await run_in_threadpool(tokens.authenticate_token, ctx.state_dir, token)
        except Unauthenticated:
            return False
        return True
    return still_allowed


async def _logs(ctx: Context, request: Request) -> Response:
    """The cell's service logs as chunked text (server.streams.LogReader): refused or not
    found before the answer begins; following, until the client leaves, timeoutSeconds, or
    (over TCP) its token is revoked or expires."""
    from devcell.server import streams

    options = streams.log_options(request.query_params)
    timeout = _timeout(request)
    principal = request.state.principal
    ctx.take_stream(principal)  # before the first await, as a watch's
    try:
        notes: list[str] = []
        attached = await run_in_threadpool(streams.prepare, ctx.state_dir,
                                           request.state.principal,
                                           request.path_params["name"], verb="logs",
                                           wake_it=False, notes=notes)
        try:
            notes += await run_in_threadpool(streams.sidecar_note, attached.ref)
            service_logs = await run_in_threadpool(attached.interactive().log_sources,
                                                   attached.ref)
            if options.service is not None and options.service not in service_logs.sources:
                service_logs.close()
                known = ", ".join(printable(n) for n in service_logs.sources) or "none"
                raise NotFound(f"cell {attached.ref.name} has no service {options.service!r} "
                               f"(services: {known})")
        except BaseException:
            attached.close()
            raise
    except BaseException:
        ctx.give_stream(principal)
        raise
    reader = streams.LogReader(attached, options, service_logs)
    reader.start()
    check = _token_check(ctx, request)

    async def still_allowed() -> bool:
        return True if check is None else bool(await check())

    released = False

    def release() -> None:
        nonlocal released
        reader.stop()
        if not released:
            released = True
            ctx.give_stream(principal)

    return _Released(reader.pieces(time.monotonic() + timeout, still_allowed), release,
                     media_type="text/plain; charset=utf-8",
                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                              streams.NOTES_HEADER: json.dumps(notes)})
