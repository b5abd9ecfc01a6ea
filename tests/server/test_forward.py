"""port-forward as a WebSocket (server/forward.py) against the session's real server on the
fake backend: everything refusable refused before the upgrade as a problem document (the
port asked for, who is asking, the policy's port_forward verb, a backend that cannot
forward), a plain request is a 426; the CLI through a server refuses a bad port as the direct
one does. A connection really relayed (the container backend) is test_forward_docker.py's.

Cost: ~0.1 s a test once the shared daemon runs; the tokens ~1 s each (the CLI).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from devcell import errors
from tests.conftest import REPO
from tests.server.conftest import Api
from tests.server.test_app import assert_problem, cell


def test_a_plain_request_is_told_to_upgrade_after_its_port_is_judged(api: Api) -> None:
    doc = assert_problem(api.client.get("/api/v1/cells/seed/portforward",
                                        params={"port": "80"}), 426)
    assert doc["type"].endswith("/upgrade-required") and "WebSocket" in doc["detail"]
    for query in ({}, {"port": "0"}, {"port": "65536"}, {"port": "x"}, {"port": "٨٠"}):
        doc = assert_problem(api.client.get("/api/v1/cells/seed/portforward", params=query),
                             400)
        assert "port" in doc["detail"]


def test_refusals_come_before_the_upgrade_as_problems(api: Api) -> None:
    from devcell import Client

    with Client(f"unix:{api.socket}") as dc:
        with pytest.raises(errors.NotFound, match="not found"):
            dc.port_socket("no-such-cell", 80)
        with pytest.raises(errors.UsageError, match="1-65535"):
            dc.port_socket("seed", 70000)
        with pytest.raises(errors.DevCellError, match="capability exec"):
            dc.port_socket("seed", 80)


def test_who_may_forward(api: Api) -> None:
    """A developer never forwards to another's cell; a viewer to none; the rule named."""
    from devcell import Client

    developer = api.token("fwd-dev", "developer")
    viewer = api.token("fwd-viewer", "viewer")
    mine = f"pf-{uuid.uuid4().hex[:6]}"
    with Client(api.url, token=developer, ca=str(api.certificate)) as dc:
        dc.apply(cell(mine))
        with pytest.raises(errors.Forbidden) as refused:
            dc.port_socket("seed", 22)
        assert refused.value.rule == "developer-not-own"
        with pytest.raises(errors.DevCellError, match="capability exec"):
            dc.port_socket(mine, 22)
    with Client(api.url, token=viewer, ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Forbidden) as refused:
            dc.port_socket(mine, 22)
        assert refused.value.rule == "viewer-read-only"
    with Client(api.url, token="dct_000000000000_x", ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Unauthenticated):
            dc.port_socket(mine, 22)


def test_the_cli_through_a_server_refuses_as_the_direct_one(api: Api) -> None:
    def forward(*words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devcell", "--server",
                               f"unix:{api.socket}", "port-forward", *words],
                              capture_output=True, text=True, cwd=REPO, timeout=60)

    bad = forward("seed", "70000")
    assert bad.returncode == 2 and "invalid port" in bad.stderr
    wide = forward("--address", "0.0.0.0", "seed", "80")
    assert wide.returncode == 2 and "loopback only" in wide.stderr
    missing = forward("no-such-cell", "80")
    assert missing.returncode == 1 and "not found" in missing.stderr
    for done in (bad, wide, missing):
        assert "Traceback" not in done.stderr


def test_connections_a_cell_never_accepts_leave_other_requests_their_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell whose listener is full (nothing accepts) holds each connect for netns' whole
    timeout; made on the threads every request shares (40), one developer's burst of 50
    (under their 64) stalled every request of everyone until they timed out. Now each
    user's are made 4 at a time, on threads of their own (found by attack41)."""
    import threading

    import uvicorn

    from devcell import Client
    from devcell.server import app, forward
    from devcell.store.db import open_database

    state = tmp_path / "state"
    open_database(state).close()
    release = threading.Event()
    lock = threading.Lock()
    inside: list[int] = []
    peak = [0]

    def never_accepted(*args: object) -> None:
        with lock:
            inside.append(1)
            peak[0] = max(peak[0], len(inside))
        release.wait(60)
        with lock:
            inside.pop()
        raise errors.BackendError("connecting to port 80 in cell box: timed out")

    monkeypatch.setattr(forward, "connect", never_accepted)
    asked: list[int] = []
    parse = forward.parse
    monkeypatch.setattr(forward, "parse", lambda query: asked.append(1) or parse(query))
    sock = tmp_path / "api.sock"
    server = uvicorn.Server(uvicorn.Config(app.build(state), uds=str(sock), log_level="error"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    refused: list[str] = []
    try:
        for _ in range(600):
            if server.started:
                break
            release.wait(0.05)

        def forward_once() -> None:
            with Client(f"unix:{sock}") as dc:
                try:
                    dc.port_socket("box", 80)
                except errors.DevCellError as exc:
                    refused.append(str(exc))

        burst = [threading.Thread(target=forward_once, daemon=True) for _ in range(50)]
        for thread in burst:
            thread.start()
        for _ in range(600):  # every one of them at its connect
            if len(asked) == len(burst):
                break
            release.wait(0.05)
        answered: list[object] = []

        def read() -> None:
            with Client(f"unix:{sock}") as dc:
                try:
                    dc.get("cells", "box")
                except errors.NotFound as exc:
                    answered.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(30)
        assert answered, "a read waited behind the connects"
        assert peak[0] <= forward.MAX_CONNECTING_PER_USER
    finally:
        release.set()
        for thread in burst:
            thread.join(30)
        server.should_exit = True
        serving.join(30)
    assert len(refused) == 50 and all("timed out" in r for r in refused)


def test_ssh_is_refused_as_the_port_forward_is(api: Api) -> None:
    """The SSH stream (ssh-proxy through a server): a plain request is a 426; a viewer is
    refused by the ssh verb's rule; the fake backend runs no SSH server (said, exit 1)."""
    from devcell import Client

    doc = assert_problem(api.client.get("/api/v1/cells/seed/ssh"), 426)
    assert "WebSocket" in doc["detail"]
    viewer = api.token("ssh-viewer", "viewer")
    with Client(api.url, token=viewer, ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Forbidden) as refused:
            dc.ssh_socket("seed")
        assert refused.value.rule == "viewer-read-only"
    done = subprocess.run([sys.executable, "-m", "devcell", "--server", f"unix:{api.socket}",
                           "ssh-proxy", "seed"], capture_output=True, text=True, cwd=REPO,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "capability exec" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
