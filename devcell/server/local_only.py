"""The unix socket's guard against web pages: its callers are the state directory's owner,
admin without a token, so a browser must never be made to speak for them.

The socket itself only its owner can open; but forwarded to a TCP port (`ssh -L`, socat), any
web page the owner visits can reach that port. A page may not read another origin's answers,
yet it may send a simple POST (`cell sleep`), open a WebSocket (an exec) to any origin, and,
by rebinding its own name to 127.0.0.1, read the answers as its own origin. So on the unix
socket a request is served only when its Host is a local name (a rebound page's Host is its
own name) and, when it carries an Origin (every browser's WebSocket and POST does), that
origin is the Host's own. DevCell's clients send Host "devcell" (bare) and no Origin.
"""

from __future__ import annotations

import json
from typing import Any

from devcell.server import problems

CLIENTS_NAME = "devcell"
"""The Host DevCell's HTTP and WebSocket clients send over the socket: accepted only bare (no
port, no Origin), since a browser does not pin it to this machine as it does localhost (the
network or a search domain may answer for it: a page rebound to devcell:8080 was served)."""
LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""Names a browser reaches only on this machine (with any port): a forwarded socket's."""


def refusal(headers: list[tuple[bytes, bytes]]) -> str | None:
    """Why a request with these headers is not served on the unix socket (None: it is)."""
    host: str | None = None
    origin: str | None = None
    for key, value in headers:
        if key == b"host":
            host = value.decode("latin-1").strip().lower()
        elif key == b"origin":
            if origin is not None:  # no browser sends two: judged by one, served by another?
                return "the API's unix socket serves no request with more than one Origin"
            origin = value.decode("latin-1").strip().lower()
    if host is None:
        return None  # HTTP/1.0 without Host: no browser sends that
    if host == CLIENTS_NAME:  # DevCell's own clients: bare, never with a port or an Origin
        return None if origin is None else (
            f"the API's unix socket serves no request from another origin ({origin}): a web "
            "page may not act as the state directory's owner")
    local = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if local not in LOCAL_NAMES:
        return (f"the API's unix socket serves only local names, not Host {host} (a web page "
                "whose name was rebound to a forwarded socket?)")
    if origin is not None and origin not in (f"http://{host}", f"https://{host}"):
        return (f"the API's unix socket serves no request from another origin ({origin}): "
                "a web page may not act as the state directory's owner")
    return None


class LocalOnly:
    """ASGI middleware: every HTTP request and WebSocket of the unix socket's app judged by
    `refusal` before the app sees it; a refused request, WebSocket handshakes too, is a 403
    problem document."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        why = refusal(scope.get("headers") or []) if scope["type"] in ("http", "websocket") \
            else None
        if why is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(problems.document(403, "foreign-origin", "Forbidden", why)).encode()
        headers = [(b"content-type", problems.MEDIA_TYPE.encode()),
                   (b"content-length", str(len(body)).encode())]
        prefix = "" if scope["type"] == "http" else "websocket."
        if prefix and "websocket.http.response" not in (scope.get("extensions") or {}):
            await send({"type": "websocket.close", "code": 1008})  # a server's bare 403
            return
        # A WebSocket refused before it is accepted: the same problem document, as the HTTP
        # answer to its handshake (the ASGI denial response uvicorn supports).
        await send({"type": f"{prefix}http.response.start", "status": 403, "headers": headers})
        await send({"type": f"{prefix}http.response.body", "body": body})
