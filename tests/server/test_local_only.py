"""The unix socket serves no web page (server/local_only.py): forwarded to a TCP port, it would
otherwise let any page the owner visits act as them, admin without a token: a simple POST, a
WebSocket exec (no same-origin rule), or a page that rebinds its name to 127.0.0.1 and reads
the answers. Real server (the session's), over its real unix socket."""

from __future__ import annotations

import json

import pytest

from devcell.server.local_only import refusal
from tests.server.conftest import Api


@pytest.mark.parametrize("host, origin, served", [
    ("devcell", None, True),                                  # DevCell's own clients
    ("devcell:8080", None, False),                            # not pinned here: rebindable
    ("devcell", "http://devcell", False),
    ("localhost:8080", None, True),
    ("127.0.0.1:8080", "http://127.0.0.1:8080", True),       # the dashboard, same origin
    ("[::1]:8080", "http://[::1]:8080", True),
    ("[::1]", None, True),
    ("evil.example:8080", None, False),                      # a rebound name
    ("localhost.evil.example", None, False),
    ("localhost:8080", "http://evil.example", False),         # another origin
    ("localhost:8080", "http://localhost:9090", False),
    ("localhost:8080", "null", False),                        # a sandboxed frame, a file
])
def test_only_local_names_and_their_own_origin_are_served(
        host: str, origin: str | None, served: bool) -> None:
    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
    assert (refusal(headers) is None) is served


def test_a_web_pages_requests_to_the_socket_are_refused(api: Api) -> None:
    """What a page could send through a forwarded socket: refused before any handler runs,
    as a problem document; DevCell's client and a same-origin page are served."""
    assert api.client.get("/api/v1/cells").status_code == 200
    foreign = api.client.post("/api/v1/cells/any/sleep",
                              headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert foreign.json()["type"].endswith("/foreign-origin")
    assert "another origin" in foreign.json()["detail"]
    rebound = api.client.get("/api/v1/cells", headers={"Host": "evil.example:8080"})
    assert rebound.status_code == 403 and "only local names" in rebound.json()["detail"]
    page = api.client.get("/ui/", headers={"Host": "evil.example:8080"})
    assert page.status_code == 403  # the dashboard too: its forms' token would be read
    same = api.client.get("/api/v1/cells", headers={"Host": "localhost:8080",
                                                    "Origin": "http://localhost:8080"})
    assert same.status_code == 200


def test_a_web_pages_websocket_exec_is_refused(api: Api) -> None:
    """A browser opens a WebSocket to any origin, sending its Origin: an exec through a
    forwarded socket would run as the owner. Refused at the handshake."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import unix_connect

    with pytest.raises(InvalidStatus) as refused:
        unix_connect(str(api.socket), "ws://localhost/api/v1/cells/any/exec?command=true",
                     origin="http://evil.example", open_timeout=10)  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    assert refused.value.response.headers["Content-Type"] == "application/problem+json"
    doc = json.loads(refused.value.response.body)  # the API's one problem shape
    assert doc["status"] == 403 and doc["type"].endswith("/foreign-origin")
    assert "another origin" in doc["detail"]


def test_a_request_with_two_origins_is_refused() -> None:
    """One judged, the other read by what serves it? No browser sends two (attack-final)."""
    host = (b"host", b"localhost:8080")
    same, evil = (b"origin", b"http://localhost:8080"), (b"origin", b"http://evil.example")
    assert refusal([host, same]) is None
    assert "more than one Origin" in str(refusal([host, evil, same]))
    assert "more than one Origin" in str(refusal([host, same, same]))
