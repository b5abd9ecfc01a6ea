"""The dashboard's routes (/ui of the API's server): pages made on the server, one static
script and one style sheet, sign-in over TCP, and the live updates.

Who is asking is decided as for the API: on the unix socket, the state directory's owner (an
admin); over TCP, the principal of the token the session was opened with, checked again on
every request (ui.sessions). Every page is authorized through auth.policy as the API's
routes are (list or get of its kind), every POST must carry its session's CSRF token, and
every answer carries a Content-Security-Policy that allows no inline script, no inline
style, nothing from another origin and no framing.

The live parts are the API's own watch (server-sent events): /ui/watch/PLURAL hands the
request to the API's route of the same resource with the session's token as its bearer
(EventSource cannot send a header), so a revoked token ends the stream as it ends any
watch, and nothing about watching is done twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from devcell.server import problems
from devcell.server.ui import html, pages, sessions
from devcell.store.db import Database

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-store"}
STATIC = {"ui.js": "text/javascript; charset=utf-8", "ui.css": "text/css; charset=utf-8"}
MAX_FORM_BYTES = 8192
MAX_FORM_FIELDS = 16
WATCHED = ("cells", "snapshots", "operations", "events")
WATCH_PARAMS = ("resourceVersion", "for", "labelSelector", "timeoutSeconds")

Api = Callable[[], Callable[..., Awaitable[None]]]
"""The API's whole ASGI application (the watch is handed to it)."""


class SignIn(Exception):
    """No valid session: the browser is sent to the sign-in form (`ended`: a session it had
    ended, its token revoked or expired)."""

    def __init__(self, ended: bool = False) -> None:
        super().__init__("sign in")
        self.ended = ended


class Who:
    """The principal of a request, and its CSRF token (None: a viewer of the page only)."""

    def __init__(self, principal: Any, csrf: str, session: sessions.Session | None,
                 sid: str | None) -> None:
        self.principal, self.csrf, self.session, self.sid = principal, csrf, session, sid


class Ui:
    def __init__(self, state_dir: Path, tokens: bool, api: Api,
                 body_seconds: float = 30.0) -> None:
        self.state_dir, self.tokens, self.api = state_dir, tokens, api
        self.body_seconds = body_seconds
        """How long a form's body may take to arrive (the API's DEVCELL_API_BODY_SECONDS)."""
        self.sessions = sessions.Sessions()
        self.throttle = sessions.Throttle()
        self.static: dict[str, bytes] = {}

    # -- who is asking ------------------------------------------------------------------------

    async def who(self, request: Request) -> Who:
        from devcell.auth import principals

        if not self.tokens:
            return Who(principals.local_admin(self.state_dir), self.sessions.anonymous_csrf,
                       None, None)
        sid = request.cookies.get(sessions.COOKIE)
        found = self.sessions.find(sid)
        if found is None:
            raise SignIn(ended=bool(sid))
        from devcell.auth import tokens
        from devcell.errors import Unauthenticated

        try:
            principal = await run_in_threadpool(tokens.authenticate_token, self.state_dir,
                                                found.token)
        except Unauthenticated:
            self.sessions.close(sid)
            raise SignIn(ended=True) from None
        return Who(principal, found.csrf, found, sid)

    def page(self, who: Who | None, title: str, body: html.Html, *, status: int = 200,
             active: str = "") -> Response:
        user = role = None
        if who is not None:
            user, role = who.principal.user, str(who.principal.role)
        shown = html.page(title, body, user=user, role=role,
                          csrf=who.csrf if who is not None and who.session else None,
                          active=active)
        return Response(shown, status_code=status, media_type="text/html; charset=utf-8",
                        headers=HEADERS)

    def failed(self, who: Who | None, exc: BaseException) -> Response:
        """An error as a page: its problem document's status, title and detail (a refusal's
        rule), never a traceback."""
        if isinstance(exc, SignIn):
            return RedirectResponse("/ui/login?ended=1" if exc.ended else "/ui/login",
                                    status_code=303, headers=HEADERS)
        doc = problems.of_error(exc)
        if doc["status"] >= 500 and doc["type"].endswith("/internal"):
            from devcell.log import logger
            from devcell.names import printable

            logger.error("dashboard request failed: {}: {}", type(exc).__name__,
                         printable(str(exc)))
        body = pages.problem(doc["status"], doc["title"], doc["detail"],
                             getattr(exc, "rule", None))
        return self.page(who, doc["title"], body, status=doc["status"])

    def authorize(self, who: Who, verb: str, kind: str, name: str | None = None) -> None:
        from devcell.auth import policy

        policy.require(who.principal, policy.Verb(verb), policy.ResourceRef(kind, name))

    def read(self, fn: Callable[[Database], Any]) -> Awaitable[Any]:
        """`fn` on a connection of its own, in the thread pool (the event loop never waits
        on the database)."""
        def run() -> Any:
            db = Database(self.state_dir, create=False)
            try:
                return fn(db)
            finally:
                db.close()
        return run_in_threadpool(run)


def build(state_dir: Path, tokens: bool, api: Api, body_seconds: float = 30.0) -> Starlette:
    ui = Ui(state_dir, tokens, api, body_seconds)

    def view(verb: str, kind: str, title: str, active: str,
             make: Callable[[Request, Database, Who], html.Html], named: str | None = None
             ) -> Callable[[Request], Awaitable[Response]]:
        async def handle(request: Request) -> Response:
            who = None
            try:
                who = await ui.who(request)
                name = request.path_params.get(named) if named else None
                ui.authorize(who, verb, kind, name)
                body = await ui.read(lambda db: make(request, db, who))
                return ui.page(who, f"{title} {name}" if name else title, body,
                               active=active)
            except Exception as exc:  # noqa: BLE001  (each answered as a page)
                return ui.failed(who, exc)
        return handle

    from devcell.server.ui import data

    async def home(request: Request) -> Response:
        return await _redirect("/ui/cells")

    async def login_form(request: Request) -> Response:
        return await _login_form(ui, request)

    async def login(request: Request) -> Response:
        return await _login(ui, request)

    async def logout(request: Request) -> Response:
        return await _logout(ui, request)

    async def static(request: Request) -> Response:
        return await _static(ui, request)

    async def watch(request: Request) -> Response:
        return await _watch(ui, request)

    async def act(request: Request) -> Response:
        return await _act(ui, request)

    async def not_found(request: Request, exc: Exception) -> Response:
        return await _not_found(ui, request, getattr(exc, "status_code", 404))

    routes = [
        Route("/", home),
        Route("/login", login_form),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/{name}", static),
        Route("/cells", view("list", "Cell", "Cells", "cells",
                             lambda r, db, who: pages.cells(data.cells(db)))),
        Route("/cells/{name}", view("get", "Cell", "Cell", "cells", lambda r, db, who: _cell(
            r, db, who), named="name")),
        Route("/cells/{name}/{verb}", act, methods=["POST"]),
        Route("/lineage", view("list", "Snapshot", "Lineage", "lineage", lambda r, db, who: (
            pages.lineage(data.lineage(db, r.query_params.get("cell")),
                          r.query_params.get("cell"))))),
        Route("/operations", view("list", "Operation", "Operations", "operations",
                                  lambda r, db, who: pages.operations(data.operations(db)))),
        Route("/operations/{id}", view("get", "Operation", "Operation", "operations",
                                       lambda r, db, who: pages.operation(
                                           data.operation(db, r.path_params["id"])),
                                       named="id")),
        Route("/events", view("list", "Event", "Events", "events",
                              lambda r, db, who: pages.events(data.event_rows(db)))),
        Route("/watch/{plural}", watch),
    ]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})


def _cell(request: Request, db: Database, who: Who) -> html.Html:
    """A cell's page, with the safe verbs as buttons and what the caller's role may do with
    each (the policy's decision, so a refusal can be expected before it is met)."""
    from devcell.auth import policy, resources
    from devcell.server.ui import data

    found = data.cell(db, request.path_params["name"])
    target = resources.recorded(db.conn, "Cell", found.row.id)
    decisions = {verb: policy.authorize(who.principal, policy.Verb(verb), target)
                 for verb in pages.ACTIONS}
    done = request.query_params.get("done")
    return pages.cell(found, who.csrf, decisions=decisions,
                      done=done if done in pages.ACTIONS else None)


async def _act(ui: Ui, request: Request) -> Response:
    """A button: sleep, start, snapshot or fork the cell, as the API's action route does it
    (server.actions: authorized by the policy's verb of the same name, recorded in the
    caller's name), once the form's CSRF token is its session's. Then back to the cell's page
    (303), or the refusal as a page naming its rule."""
    import json
    from urllib.parse import quote

    from devcell.server import actions

    who = None
    try:
        who = await ui.who(request)
        form = await _form(request, ui.body_seconds)
        if not sessions.same(form.get("csrf"), who.csrf):
            raise _csrf_refused()
        name, verb = request.path_params["name"], request.path_params["verb"]
        if verb not in pages.ACTIONS:
            return await _not_found(ui, request)
        body: dict[str, str] = {}
        if verb in ("snapshot", "fork"):
            body["name"] = form.get("name", "").strip()
        if verb == "fork":
            body["snapshot"] = form.get("snapshot", "").strip()
        asked = actions.parse(verb, json.dumps(body).encode() if body else b"")
        await run_in_threadpool(actions.record, ui.state_dir, who.principal, name, asked)
    except Exception as exc:  # noqa: BLE001  (each answered as a page)
        return ui.failed(who, exc)
    return RedirectResponse(f"/ui/cells/{quote(name, safe='')}?done={verb}", status_code=303,
                            headers=HEADERS)


async def _redirect(to: str) -> Response:
    return RedirectResponse(to, status_code=303, headers=HEADERS)


async def _not_found(ui: Ui, request: Request, status: int = 404) -> Response:
    title = "Not found" if status == 404 else "Method not allowed"
    return ui.page(None, title, pages.problem(status, title, "no dashboard page here"),
                   status=status)


async def _static(ui: Ui, request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return await _not_found(ui, request)
    if name not in ui.static:
        ui.static[name] = (Path(__file__).parent / "static" / name).read_bytes()
    return Response(ui.static[name], media_type=STATIC[name],
                    headers={**HEADERS, "Cache-Control": "no-cache"})


# -- signing in and out -------------------------------------------------------------------------


async def _login_form(ui: Ui, request: Request, message: str | None = None,
                      status: int = 200) -> Response:
    if not ui.tokens:  # the unix socket's caller is the admin: nothing to sign in to
        return await _redirect("/ui/cells")
    if message is None and request.query_params.get("ended"):
        message = "Your session ended (its token was revoked or expired, or you signed out)."
    return ui.page(None, "Sign in", pages.login(message, ui.sessions.anonymous_csrf),
                   status=status)


async def _form(request: Request, seconds: float) -> dict[str, str]:
    """A small urlencoded form (the sign-in's, a button's), each field's first value; one
    that is too large, has too many fields or arrives slower than `seconds` is refused (400,
    413, 408: an unauthenticated client trickling a sign-in held a connection for good)."""
    import anyio

    from devcell.server.problems import HttpProblem

    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise HttpProblem(415, "unsupported-media-type", "Unsupported media type",
                          "send the form as application/x-www-form-urlencoded")
    body = b""
    try:
        with anyio.fail_after(seconds):
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_FORM_BYTES:
                    raise HttpProblem(413, "body-too-large", "Content too large",
                                      f"a form is at most {MAX_FORM_BYTES} bytes")
    except TimeoutError:
        raise HttpProblem(408, "body-timeout", "Request timeout",
                          f"the form did not arrive within {seconds:g}s") from None
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True,
                          max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than that
        raise HttpProblem(400, "bad-request", "The request is not valid",
                          f"a form has at most {MAX_FORM_FIELDS} fields") from None
    return {k: v[0] for k, v in fields.items()}


async def _login(ui: Ui, request: Request) -> Response:
    """Check the token once; on success open a session (its id in the cookie, the token kept
    by the server). Every failure says the same, as the API's 401 does."""
    if not ui.tokens:
        return await _redirect("/ui/cells")
    from devcell.errors import Unauthenticated

    try:
        form = await _form(request, ui.body_seconds)
        if not sessions.same(form.get("csrf"), ui.sessions.anonymous_csrf):
            return await _login_form(ui, request, "The form expired; sign in again.", 403)
        if not ui.throttle.allowed():
            return await _login_form(ui, request, "Too many failed sign-ins; try again in a "
                                     "minute.", 429)
        token = form.get("token", "").strip()
        from devcell.auth import tokens

        await run_in_threadpool(tokens.authenticate_token, ui.state_dir, token)
    except Unauthenticated as exc:
        ui.throttle.failed()
        return await _login_form(ui, request, str(exc), 401)
    except Exception as exc:  # noqa: BLE001
        return ui.failed(None, exc)
    sid, _ = ui.sessions.open(token)
    done = RedirectResponse("/ui/cells", status_code=303, headers=HEADERS)
    done.set_cookie(sessions.COOKIE, sid, path="/", secure=True, httponly=True,
                    samesite="strict")
    return done


async def _logout(ui: Ui, request: Request) -> Response:
    sid = request.cookies.get(sessions.COOKIE)
    found = ui.sessions.find(sid)
    try:
        form = await _form(request, ui.body_seconds)
    except Exception as exc:  # noqa: BLE001
        return ui.failed(None, exc)
    if found is not None and not sessions.same(form.get("csrf"), found.csrf):
        return ui.failed(None, _csrf_refused())
    ui.sessions.close(sid)
    done = RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
    done.delete_cookie(sessions.COOKIE, path="/", secure=True, httponly=True,
                       samesite="strict")
    return done


def _csrf_refused() -> Exception:
    from devcell.server.problems import HttpProblem

    return HttpProblem(403, "csrf", "Forbidden", "the form's CSRF token is missing or not this "
                       "session's: reload the page and try again")


# -- live updates: the API's watch, with the session's token ------------------------------------


async def _watch(ui: Ui, request: Request) -> Response:
    plural = request.path_params["plural"]
    if plural not in WATCHED:
        return await _not_found(ui, request)
    try:
        who = await ui.who(request)
    except SignIn:
        return Response("sign in again\n", status_code=401, media_type="text/plain",
                        headers=HEADERS)
    query = {k: request.query_params[k] for k in WATCH_PARAMS if k in request.query_params}
    resuming = request.headers.get("last-event-id")
    if resuming is not None:  # a reconnect resumes where it was, not where the page began
        query.pop("resourceVersion", None)
    query["watch"] = "true"
    headers = [(b"accept", b"text/event-stream")]
    if resuming is not None:
        headers.append((b"last-event-id", resuming.encode("latin-1", "replace")[:32]))
    if who.session is not None:
        headers.append((b"authorization", f"Bearer {who.session.token}".encode()))
    scope = dict(request.scope, path=f"/api/v1/{plural}", raw_path=f"/api/v1/{plural}".encode(),
                 query_string=urlencode(query).encode(), headers=headers, root_path="")
    return _Handed(ui.api(), scope)


class _Handed(Response):
    """The answer of another route of the same server (the API's watch), streamed as it is."""

    def __init__(self, app: Callable[..., Awaitable[None]], scope: dict[str, Any]) -> None:
        self.app, self.inner = app, scope
        self.background = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(self.inner, receive, send)
