"""exec through the API for real: a container cell made through the session's server, a
command run in it over the exec WebSocket by the Python client (unix socket and TLS): its
input, both streams, its exit status, -e/-w, a terminal, output in many messages, a command
hung up when the client stops reading it (max_output, timeout), and a developer who never
execs into another's cell.

Cost: ~6-10 s (one busybox container, ~2 s to start; each exec ~0.2 s), Docker needed.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from devcell import errors
from tests.backends.engine import IMAGE, require_engine
from tests.server.conftest import Api, running_container_cell
from tests.server.test_app import wait_for


@pytest.fixture(scope="module")
def box(api: Api) -> Iterator[str]:
    """A running container cell the admin (the unix socket) owns."""
    with running_container_cell(
            api, "box", "'i=0; while true; do i=$((i+1)); echo tick $i; "
            "printf \"\\\\033[31mred\\\\n\"; sleep 0.2; done'") as name:
        yield name


def test_a_command_runs_with_its_input_and_both_streams(api: Api, box: str) -> None:
    from devcell import Client

    data = b"".join(b"line %d\n" % k for k in range(20000))  # ~190 KB: many messages
    with Client(f"unix:{api.socket}") as dc:
        done = dc.exec(box, ["sh", "-c", "cat; echo oops >&2; exit 3"], stdin=data)
        assert (done.exit_code, done.stdout, done.stderr) == (3, data, b"oops\n")
        done = dc.exec(box, ["sh", "-c", 'echo "$GREETING"; pwd'], env={"GREETING": "hi"},
                       workdir="/tmp")
        assert done == (0, b"hi\n/tmp\n", b"")
        big = dc.exec(box, ["head", "-c", "300000", "/dev/zero"])
        assert big.stdout == bytes(300000)
        on_tty = dc.exec(box, ["sh", "-c", "test -t 1 && echo tty"], tty=True)
        assert on_tty.exit_code == 0 and b"tty" in on_tty.stdout


def test_a_command_is_hung_up_when_its_client_stops(api: Api, box: str) -> None:
    from devcell import Client

    with Client(f"unix:{api.socket}") as dc:
        with pytest.raises(errors.DevCellError, match="passed 100000 bytes"):
            dc.exec(box, ["yes", "devcell-flood"], max_output=100_000)
        with pytest.raises(TimeoutError):
            dc.exec(box, ["sleep", "300"], timeout=1)
        deadline = time.monotonic() + 15
        while True:  # both commands ended in the cell, not only in the client
            ps = dc.exec(box, ["ps"]).stdout
            # The supervisor's exec wrapper (`supervisor.sh --exec ...`) of the flood was
            # seen to outlive its command once in three loaded runs: the commands themselves
            # are what must be gone (reported in /work/reports/verbs.md).
            running = [line for line in ps.splitlines() if b"--exec" not in line]
            if not any(b"devcell-flood" in line or b"sleep 300" in line for line in running):
                break
            assert time.monotonic() < deadline, ps
            time.sleep(0.3)


def test_a_developer_never_execs_into_anothers_cell(api: Api, box: str) -> None:
    from devcell import Client

    token = api.token("exec-intruder", "developer")
    with Client(api.url, token=token, ca=str(api.certificate)) as dc:
        with pytest.raises(errors.Forbidden) as refused:
            dc.exec(box, ["cat", "/etc/passwd"])
        assert refused.value.rule == "developer-not-own"
    admin = api.token("exec-admin", "admin")
    with Client(api.url, token=admin, ca=str(api.certificate)) as dc:
        assert dc.exec(box, ["echo", "over tls"]).stdout == b"over tls\n"


def test_logs_as_devcell_logs_prints_them_and_followed(api: Api, box: str) -> None:
    from devcell import Client

    with Client(f"unix:{api.socket}") as dc:
        deadline = time.monotonic() + 20
        while not any("tick 3" in line for line in dc.logs(box, "ticker")):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        lines = list(dc.logs(box, "ticker", tail=2))
        assert len(lines) == 2 and all(line.endswith("\n") for line in lines)
        assert not any("\x1b" in line for line in dc.logs(box))  # escaped: a cell wrote it
        started = time.monotonic()
        followed = []
        for line in dc.logs(box, "ticker", tail=0, follow=True, timeout=2):
            followed.append(line)
        assert followed and any(line.startswith("tick") for line in followed)
        assert time.monotonic() - started < 10
        with pytest.raises(errors.NotFound, match="no service"):
            list(dc.logs(box, "nope"))


def test_an_exec_ends_when_its_token_is_revoked(api: Api, box: str) -> None:
    import threading

    from devcell import Client

    token = api.token("exec-revoked", "admin")
    ended: list[BaseException] = []

    def run() -> None:
        with Client(api.url, token=token, ca=str(api.certificate)) as dc:
            try:
                dc.exec(box, ["sleep", "120"])
            except errors.DevCellError as exc:
                ended.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(1.5)
    assert api.cli("token", "revoke", token.split("_")[1]).returncode == 0
    revoked = time.monotonic()
    thread.join(20)
    assert ended and isinstance(ended[0], errors.Unauthenticated)
    assert time.monotonic() - revoked < 10


def test_one_developer_holds_at_most_their_share_of_the_streams(api: Api) -> None:
    """A developer's ninth exec (or logs) stream at once is a 503 naming them, while an
    admin's still runs (one developer's 32 `logs -f` on their own cell left everyone, admins
    too, 503 for up to an hour: found by attack27c)."""
    from devcell import Client
    from devcell.server import streams

    require_engine()
    token = api.token("stream-hog", "developer")
    name = f"hog-{uuid.uuid4().hex[:6]}"
    with Client(api.url, token=token, ca=str(api.certificate)) as dc:
        dc.apply(f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\n"
                 f"spec:\n  backend: container\n  image: {IMAGE}\n")
        try:
            wait_for(api, f"/api/v1/cells/{name}",
                     lambda r: r.json()["status"].get("phase") == "Running", timeout=120)
            with contextlib.ExitStack() as held:  # each closed (its command hung up) at exit
                for _ in range(streams.MAX_STREAMS_PER_USER):
                    held.enter_context(dc.exec_socket(name, ["sleep", "60"]))
                with pytest.raises(errors.TemporaryError,
                                   match="stream-hog has 8 exec and logs"):
                    dc.exec_socket(name, ["sleep", "60"])
                admin = api.token("stream-admin", "admin")
                with Client(api.url, token=admin, ca=str(api.certificate)) as root:
                    assert root.exec(name, ["echo", "still"]).stdout == b"still\n"
        finally:
            dc.delete("cells", name)
    deadline = time.monotonic() + 20
    while True:  # the slots are given back once the commands are hung up
        with Client(api.url, token=token, ca=str(api.certificate)) as dc:
            try:
                list(dc.logs("no-such-cell"))
            except errors.NotFound:
                break
            except errors.TemporaryError:
                assert time.monotonic() < deadline
                time.sleep(0.5)


def test_env_values_travel_in_the_first_message_never_in_the_url(api: Api, box: str) -> None:
    """A value in the exec URL is kept by whatever logs request lines (a proxy): the client
    declares the names in the query and sends the values as the first message (channel 6).
    A raw stream that declares a name and sends anything else first is refused with a
    bad-frame status naming the name, never a value."""
    import json

    from websockets.sync.client import unix_connect

    from devcell import Client
    from devcell.server import framing

    secret = f"s3cret-{uuid.uuid4().hex}"
    paths: list[str] = []
    with Client(f"unix:{api.socket}") as dc:
        opened = dc._websocket

        def spy(path: str, subprotocol: str) -> object:
            paths.append(path)
            return opened(path, subprotocol)

        dc._websocket = spy  # type: ignore[method-assign]
        done = dc.exec(box, ["sh", "-c", 'echo "$TOKEN|$PLAIN"'],
                       env={"TOKEN": secret, "PLAIN": "a b=c"})
    assert done == (0, f"{secret}|a b=c\n".encode(), b"")
    assert paths and all(secret not in p and "a+b" not in p for p in paths), paths
    assert "env=TOKEN" in paths[0] and "env=PLAIN" in paths[0]

    def raw(query: str, first: bytes) -> dict[str, object]:
        with unix_connect(str(api.socket), f"ws://devcell/api/v1/cells/{box}/exec?{query}",
                          proxy=None) as ws:
            ws.send(first)
            channel, payload = framing.split(bytes(ws.recv(timeout=30)))
            while channel != framing.STATUS:
                channel, payload = framing.split(bytes(ws.recv(timeout=30)))
            return dict(json.loads(payload))

    assert raw("command=true&env=A", framing.frame(framing.ENV, b'{"A": "x"}')) == {
        "exitCode": 0}
    for first in (framing.frame(framing.STDIN, b"hunter2"),
                  framing.frame(framing.ENV, b'{"A": "hunter2", "B": "x"}'),
                  framing.frame(framing.ENV, b'["A=hunter2"]'),
                  framing.frame(framing.ENV, b"[" * 100_000 + b"]" * 100_000)):
        doc = raw("command=true&env=A", first)
        assert doc["status"] == 400 and "A" in str(doc["detail"]), doc
        assert "hunter2" not in json.dumps(doc)
