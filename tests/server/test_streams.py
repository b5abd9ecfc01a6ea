"""exec as a WebSocket (server/streams.py, server/framing.py) against the session's real
server on the fake backend: everything refusable is refused before the upgrade as a problem
document with its status (who is asking, the policy's exec verb, the query, a backend that
cannot run commands), a plain request is a 426, and the framing's pieces. A command really
run (the container backend) is tests/server/test_streams_docker.py's.

Cost: ~0.1 s a test once the shared daemon runs; the tokens ~1 s each (the CLI).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from devcell import errors
from devcell.server import framing
from tests.server.conftest import Api
from tests.server.test_app import assert_problem, cell


def test_a_plain_request_is_told_to_upgrade(api: Api) -> None:
    doc = assert_problem(api.client.get("/api/v1/cells/seed/exec",
                                        params={"command": "ls"}), 426)
    assert doc["type"].endswith("/upgrade-required") and "WebSocket" in doc["detail"]


def test_refusals_come_before_the_upgrade_as_problems(api: Api) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import unix_connect

    with pytest.raises(InvalidStatus) as refused:
        unix_connect(str(api.socket), "ws://devcell/api/v1/cells/seed/exec?command=ls",
                     proxy=None)
    response = refused.value.response
    assert response.status_code == 502  # the fake backend runs no commands: said in words
    assert response.headers["content-type"] == "application/problem+json"
    doc = json.loads(response.body)
    assert "cannot run commands" in doc["detail"] and doc["status"] == 502

    from devcell import Client

    with Client(f"unix:{api.socket}") as dc:
        with pytest.raises(errors.NotFound, match="not found"):
            dc.exec("no-such-cell", ["ls"])
        with pytest.raises(errors.UsageError, match="give the command"):
            dc.exec("seed", [])
        for kwargs in ({"env": {"1BAD": "x"}}, {"workdir": "relative"}, {"user": "a b"}):
            with pytest.raises(errors.UsageError):
                dc.exec("seed", ["ls"], **kwargs)  # type: ignore[arg-type]
        with pytest.raises(errors.DevCellError, match="cannot run commands"):
            dc.exec("seed", ["ls"])


@pytest.mark.parametrize("path", ["/api/v1/cells/seed/nope", "/api/v1/cells", "/ui/cells"])
def test_a_websocket_to_a_path_with_none_is_a_404_problem(api: Api, path: str) -> None:
    """Starlette closes such a handshake, which the server answered a bare 403: the API's
    one problem shape instead, unix socket and TLS alike."""
    import ssl

    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect, unix_connect

    trusted = ssl.create_default_context(cafile=str(api.certificate))
    token = api.token("ws-viewer", "viewer")
    for opened in (lambda: unix_connect(str(api.socket), f"ws://devcell{path}", proxy=None),
                   lambda: connect(api.url.replace("https", "wss") + path, ssl=trusted,
                                   additional_headers={"Authorization": f"Bearer {token}"},
                                   proxy=None)):
        with pytest.raises(InvalidStatus) as refused:
            opened()
        response = refused.value.response
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"
        doc = json.loads(response.body)
        assert doc["type"].endswith("/no-route") and "no WebSocket route" in doc["detail"]


def test_who_may_exec(api: Api) -> None:
    """A developer never execs into another's cell; a viewer into none; the policy's rule
    named. The developer's own cell passes the policy (and meets the fake backend's
    refusal, which comes after it)."""
    from devcell import Client

    developer = api.token("exec-dev", "developer")
    viewer = api.token("exec-viewer", "viewer")
    mine = f"ex-{uuid.uuid4().hex[:6]}"
    with Client(api.url, token=developer, ca=str(api.certificate)) as dc:
        dc.apply(cell(mine))
        with pytest.raises(errors.Forbidden) as refused:
            dc.exec("seed", ["cat", "/etc/shadow"])
        assert refused.value.rule == "developer-not-own"
        assert "may not exec Cell \"seed\"" in str(refused.value)
        with pytest.raises(errors.DevCellError, match="cannot run commands"):
            dc.exec(mine, ["ls"])
    with Client(api.url, token=viewer, ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Forbidden) as refused:
            dc.exec(mine, ["ls"])
        assert refused.value.rule == "viewer-read-only"
    with Client(api.url, token="dct_000000000000_x", ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Unauthenticated):
            dc.exec(mine, ["ls"])


def test_the_framing() -> None:
    assert framing.split(framing.frame(framing.STDOUT, b"hi")) == (framing.STDOUT, b"hi")
    with pytest.raises(ValueError):
        framing.split(b"")
    assert framing.size(b'{"rows": 24, "columns": 80}') == (24, 80)
    for bad in (b"", b"[]", b'"x"', b'{"rows": 0, "columns": 80}', b'{"rows": 1e999}',
                b'{"rows": 24}', b'{"rows": 99999, "columns": 1}'):
        assert framing.size(bad) is None
    assert json.loads(framing.status({"exitCode": 3})[1:]) == {"exitCode": 3}


class _OneMessage:
    """A WebSocket whose client sent `message` first (then nothing), and a backend whose
    closing is counted: what streams.relay sees of a client."""

    def __init__(self, message: dict[str, object]) -> None:
        self.message, self.scope, self.sent = message, {"subprotocols": []}, []
        self.closed = 0

    async def accept(self, subprotocol: str | None = None) -> None:
        return None

    async def receive(self) -> dict[str, object]:
        return self.message

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000) -> None:
        return None

    def backend_close(self) -> None:  # as Attached.close
        self.closed += 1


def test_a_bad_first_env_message_is_a_status_and_the_backend_is_closed() -> None:
    """The first message of an exec that declared env=A, whatever it holds (a nesting bomb
    raised RecursionError out of the handler: a traceback in the daemon's log, no status, the
    cell's backend never closed): a bad-frame status naming A, never a value, and the
    backend closed."""
    from types import SimpleNamespace

    import anyio

    from devcell.server import streams

    request = streams.ExecRequest(("true",), env_sent=("A",))
    for payload in (b"[" * 100_000, b'{"A": ' + b"[" * 100_000 + b"}", b'{"A": 3}',
                    b'{"A": "hunter2\\u0000"}', b'{"B": "hunter2"}'):
        ws = _OneMessage({"type": "websocket.receive", "bytes": bytes((framing.ENV,)) + payload})
        attached = SimpleNamespace(close=ws.backend_close)
        anyio.run(streams.relay, Path("/nonexistent"), ws, attached, request,
                  anyio.CapacityLimiter(1))
        assert ws.closed == 1 and len(ws.sent) == 1, payload[:20]
        channel, doc = framing.split(ws.sent[0])
        assert channel == framing.STATUS and json.loads(doc)["type"].endswith("/bad-frame")
        assert "A" in json.loads(doc)["detail"] and b"hunter2" not in doc
    gone = _OneMessage({"type": "websocket.disconnect", "code": 1001})

    async def broken(data: bytes) -> None:
        raise RuntimeError("the client is gone")

    gone.send_bytes = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):  # a notice to a client gone: the backend still closed
        anyio.run(lambda: streams.relay(Path("/nonexistent"), gone,
                                        SimpleNamespace(close=gone.backend_close),
                                        streams.ExecRequest(("true",)),
                                        anyio.CapacityLimiter(1), notes=["woken\n"]))
    assert gone.closed == 1


def test_a_token_revoked_while_the_values_came_runs_nothing() -> None:
    """The first message may come up to ENV_MESSAGE_S after the upgrade (which checked the
    token): one revoked meanwhile gets the 401 status, its command never run (its token was
    asked once a second only while the command ran)."""
    from types import SimpleNamespace

    import anyio

    from devcell.server import streams

    ws = _OneMessage({"type": "websocket.receive",
                      "bytes": framing.frame(framing.ENV, b'{"A": "x"}')})

    async def revoked() -> bool:
        return False

    anyio.run(lambda: streams.relay(Path("/nonexistent"), ws,
                                    SimpleNamespace(close=ws.backend_close),
                                    streams.ExecRequest(("true",), env_sent=("A",)),
                                    anyio.CapacityLimiter(1), still_allowed=revoked))
    assert ws.closed == 1 and len(ws.sent) == 1
    channel, doc = framing.split(ws.sent[0])
    assert channel == framing.STATUS and json.loads(doc)["status"] == 401


def test_logs_are_refused_as_exec_is(api: Api) -> None:
    """logs is the policy's logs verb: a viewer never, a developer only their own; the fake
    backend keeps no logs (said before the answer begins)."""
    from devcell import Client

    assert_problem(api.client.get("/api/v1/cells/seed/logs", params={"tail": "x"}), 400)
    assert_problem(api.client.get("/api/v1/cells/seed/logs", params={"since": "later"}), 400)
    assert_problem(api.client.get("/api/v1/cells/no-such-cell/logs"), 404)
    doc = assert_problem(api.client.get("/api/v1/cells/seed/logs"), 502)
    assert "cannot run commands or keep service logs" in doc["detail"]
    developer = api.token("logs-dev", "developer")
    with Client(api.url, token=developer, ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Forbidden) as refused:
            list(dc.logs("seed"))
        assert refused.value.rule == "developer-not-own"
