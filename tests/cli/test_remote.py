"""`devcell --server URL` (cli/remote.py) without a server: the URL, the token (a file only
its owner reads, or $DEVCELL_TOKEN; never argv) and the refusals, each one line before any
connection. The commands through a real server are tests/server/test_cli_remote.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from devcell.cli import remote
from devcell.cli.main import main
from devcell.errors import UsageError


@pytest.mark.parametrize("url", ["http://h:1", "https://", "unix:", "h:8443", "https://h:x",
                                 "https://u:p@h:1", "https://h:1/api?x=1"])
def test_a_server_url_that_cannot_be_one_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match="unix:PATH .* or https://HOST:PORT"):
        remote.check_url(url)


def test_urls() -> None:
    assert remote.check_url("https://h:8443/") == "https://h:8443"
    assert remote.check_url("unix:/run/x.sock") == "unix:/run/x.sock"


def test_the_token_file_must_be_the_owners_alone(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("dct_abc_def\nignored\n")
    token.chmod(0o640)
    with pytest.raises(UsageError, match="readable by others than its owner"):
        remote.read_token(str(token))
    token.chmod(0o600)
    assert remote.read_token(str(token)) == "dct_abc_def"
    with pytest.raises(UsageError, match="not a regular file"):
        remote.read_token(str(tmp_path))
    with pytest.raises(UsageError, match="No such file"):
        remote.read_token(str(tmp_path / "missing"))
    empty = tmp_path / "e"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(UsageError, match="empty"):
        remote.read_token(str(empty))


def test_https_needs_a_token(monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("DEVCELL_TOKEN", raising=False)
    assert main(["--server", "https://127.0.0.1:9", "get", "cells"]) == 2
    err = capsys.readouterr().err
    assert "no token for https://127.0.0.1:9" in err and "--token-file" in err
    monkeypatch.setenv("DEVCELL_TOKEN", "dct_x_y")
    assert main(["--server", "https://127.0.0.1:9", "get", "cells"]) == 1  # port 9: nothing
    assert "cannot reach the DevCell API" in capsys.readouterr().err


def test_a_token_file_given_for_the_unix_socket_is_said_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The socket acts as the state directory's owner whatever token is given: the file was
    read and checked (exit 2 for one others may read), then silently not used, and a user
    giving a viewer's token to act with less acted as an admin (final43, F7). It is said
    once, and the file is not read."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    token = tmp_path / "viewer.token"
    token.write_text("dct_0123456789ab_" + "f" * 64 + "\n")
    token.chmod(0o644)  # refused over https; here never read
    assert main(["--server", f"unix:{tmp_path}/none.sock", "--token-file", str(token),
                 "get", "cells"]) == 1
    note, error = capsys.readouterr().err.splitlines()
    assert note == (f"note: unix:{tmp_path}/none.sock is the daemon's unix socket, which acts "
                    "as the state directory's owner (an admin): --token-file is not used (a "
                    "token's role applies over https)")
    assert "cannot reach the DevCell API" in error


def test_unserved_commands_and_kinds_are_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sock = f"unix:{tmp_path}/api.sock"
    for argv, said in ((["get", "volumes", "-w"], "`devcell get volumes -w` is not served"),
                       (["apply", "-f", "x.yaml", "--approve"], "--approve is not served")):
        assert main(["--server", sock, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err
    assert main(["--server", sock, "--state-dir", str(tmp_path), "get", "cells"]) == 2
    assert "give one of them" in capsys.readouterr().err


def _read_request(conn: Any) -> None:
    """The request's head and its Content-Length of body: a server that closes with part of
    it unread makes the client's send fail (EPIPE) before it reads the answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or 0)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        rest += chunk


def _serve(path: Path, status: str, headers: dict[str, str], body: bytes) -> Any:
    """A server on a unix socket answering every request with the same bytes, in a thread
    (what a hostile or wrong server could say); stop() closes it."""
    import socket
    import threading

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                _read_request(conn)
                conn.sendall(f"HTTP/1.1 {status}\r\n".encode() + head + b"Content-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
                             + body)

    threading.Thread(target=run, daemon=True).start()
    return listener


ESC = "\x1b]0;PWNED\x07\x1b[2J"
HOSTILE = [  # (status, headers, body, command, exit code, what is said)
    ("302 Found", {"Location": "https://evil.example/\x1b[31m"}, b"", ["get", "cells"], 1,
     "answered HTTP 302, to 'https://evil.example/\\x1b[31m'"),
    ("200 OK", {}, b"<html>a proxy's sign-in page</html>", ["get", "cells"], 1,
     "which is not JSON"),
    ("200 OK", {}, b'{"items": 5}', ["get", "cells"], 1, "not a list of {row: ...}"),
    ("200 OK", {}, b"[" * 100_000, ["get", "cells"], 1, "which is not JSON"),
    ("422 Unprocessable", {}, b'{"problems": 5, "detail": "d"}', ["apply", "-f", "{yaml}"], 1,
     "error: request: d"),
    ("422 Unprocessable", {}, b'{"problems": [{"file": "request.yaml", "line": "x", '
     b'"message": "m\\u001b[2J"}]}', ["apply", "-f", "{yaml}"], 1, "m\\x1b[2J"),
    ("500 Oops", {}, ESC.encode(), ["get", "cells"], 1, "\\x1b]0;PWNED\\x07"),
    ("200 OK", {"Content-Type": "text/plain"}, f"Name: {ESC}\n".encode(),
     ["describe", "cell", "x"], 0, "Name: \\x1b]0;PWNED\\x07\\x1b[2J"),
    ("200 OK", {"Content-Type": "text/html"}, b"<html>a proxy's sign-in page</html>",
     ["describe", "cell", "x"], 1, "answered a description as 'text/html', not text/plain"),
    ("200 OK", {"Content-Type": "text/html"}, b"<html>a proxy's sign-in page</html>",
     ["logs", "x"], 1, "answered a log as 'text/html', not text/plain"),
    ("200 OK", {"Content-Type": "text/plain",
                "DevCell-Notes": '["\\u001b]0;PWNED\\u0007note\\n"]'},
     f"a line {ESC}\tand a tab\n".encode(), ["logs", "x"], 0,
     "a line \\x1b]0;PWNED\\x07\\x1b[2J\tand a tab"),
    # a drain's JSON lines (server/drains.py): garbage, cut off, of the wrong shape, an
    # error; a line's text escaped; each said in one line
    ("200 OK", {"Content-Type": "application/x-ndjson"}, b"<html>garbage</html>\n",
     ["node", "drain", "n"], 1, "which is not JSON"),
    ("200 OK", {"Content-Type": "text/html"}, b"<html>garbage</html>\n",
     ["node", "drain", "n"], 1, "not JSON lines"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "line", "stream": "stdout", "text": "cell/a moved \\u001b[2J"}\n',
     ["node", "drain", "n"], 1, "the drain's answer ended before its result"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "line", "stream": "stdout", "text": "cell/a moved \\u001b[2J"}\n{"type": "res',
     ["node", "drain", "n"], 1, "cell/a moved \\x1b[2J"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "line", "stream": "stdin", "text": "x"}\n', ["node", "drain", "n"], 1,
     "a drain's line"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "result", "exitCode": "0"}\n', ["node", "drain", "n"], 1, "a drain's result"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "error", "problem": {"status": 502, "detail": "engine \\u001b[2Jgone"}}\n',
     ["node", "drain", "n"], 1, "error: engine \\x1b[2Jgone"),
    ("200 OK", {"Content-Type": "application/x-ndjson"},
     b'{"type": "keepalive"}\n{"type": "line", "stream": "stdout", "text": "node/n drained"}'
     b'\n{"type": "result", "exitCode": 0, "moved": [], "failed": [], "fromSnapshots": []}\n',
     ["node", "drain", "n"], 0, "node/n drained"),
]


@pytest.mark.parametrize("status, headers, body, argv, code, said", HOSTILE)
def test_a_hostile_servers_answer_is_said_escaped_never_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        status: str, headers: dict[str, str], body: bytes, argv: list[str], code: int,
        said: str) -> None:
    """A redirect, a page that is not JSON, rows of the wrong shape, a problem document with
    the wrong types, terminal escapes in an error, describe's text, a log's lines and notes:
    each said in words with every control character escaped (found by attack27c)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    manifest = tmp_path / "c.yaml"
    manifest.write_text("kind: Cell\n")
    listener = _serve(tmp_path / "s.sock", status, headers, body)
    try:
        args = [a.replace("{yaml}", str(manifest)) for a in argv]
        assert main(["--server", f"unix:{tmp_path}/s.sock", *args]) == code
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert said in out + err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "Traceback" not in err and len(err.splitlines()) <= 2, err


def test_an_answer_sent_before_the_request_was_read_is_what_is_said(tmp_path: Path) -> None:
    """A server that refuses a request from its head alone (401, 413) and closes with the
    body unread: the client's send fails (EPIPE), and the server's answer is still reported,
    not "cannot reach the DevCell API"."""
    import socket
    import threading

    from devcell import errors
    from devcell.client import Client

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    body = b'{"detail": "too large"}'

    def answer_early() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)  # the start of the head: enough to refuse
            conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    thread = threading.Thread(target=answer_early, daemon=True)
    thread.start()
    try:
        with pytest.raises(errors.Unauthenticated):
            Client(f"unix:{tmp_path}/s.sock").apply("kind: Cell\n#" + "x" * 8_000_000)
    finally:
        thread.join(10)
        listener.close()


def _serve_raw(path: Path, answer: bytes, *, hold: float = 0.0) -> Any:
    """A server on a unix socket that reads a request, sends `answer` as it is and
    holds the connection `hold` seconds before closing (in a thread); stop() closes it."""
    import contextlib
    import socket
    import threading
    import time

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):  # a client gone: its own test says
                _read_request(conn)  # its body too: closed unread, the client's send failed
                conn.sendall(answer)
                time.sleep(hold)

    threading.Thread(target=run, daemon=True).start()
    return listener


@pytest.mark.parametrize("answer, said", [
    (b"SSH-2.0-OpenSSH_9.2\r\n", "not an HTTP answer (SSH-2.0-OpenSSH_9.2\\r\\n)"),
    (b"HTTP/1.1 100 Continue\r\n\r\n" * 20, "over 4 interim answers (100 Continue)"),
])
def test_a_server_that_does_not_speak_http_is_said_so_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    """Another protocol on the socket was a traceback (BadStatusLine); interim answers sent
    without end held the client for as long as the server liked, each read under the
    timeout alone (found by attack-final)."""
    import time

    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", answer, hold=30.0)
    started = time.monotonic()
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "get", "cells"]) == 1
    finally:
        listener.close()
    assert time.monotonic() - started < 20  # not held until the server lets go
    out, err = capsys.readouterr()
    assert said in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_a_success_sent_before_the_request_was_read_is_not_taken_for_one(
        tmp_path: Path) -> None:
    """A server that answers 200 to a request's head and closes with the body unread cannot
    have judged it: the client reports the failed send, not a success (found by
    attack-final; a refusal sent early is still reported, the test above)."""
    import socket
    import threading

    from devcell import errors
    from devcell.client import Client

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)

    def answer_early() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")

    thread = threading.Thread(target=answer_early, daemon=True)
    thread.start()
    try:
        with pytest.raises(errors.TemporaryError):
            Client(f"unix:{tmp_path}/s.sock").apply("kind: Cell\n#" + "x" * 8_000_000)
    finally:
        thread.join(10)
        listener.close()


def test_a_server_that_closes_without_an_answer_is_not_reached_not_foreign(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A socket forwarded to a daemon that is down (socat, ssh -L: the forward accepts, reads
    and closes) was "the server answered what is not an HTTP answer (Remote end closed
    connection without response): is it DevCell's API?"; it answered nothing (found by
    attack41)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", b"")
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "get", "cells"]) == 1
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert "closed the connection without an answer: cannot reach the DevCell API: is the " \
        "daemon running" in err and "not an HTTP answer" not in err, err


@pytest.mark.parametrize("argv, sent", [
    (["token", "revoke", "0123456789ab"], "DELETE /api/v1/tokens/0123456789ab"),
    (["node", "cordon", "n1"], "POST /api/v1/nodes/n1/cordon"),
    (["token", "create", "--user", "ana", "--role", "viewer"], "POST /api/v1/tokens"),
    (["diff", "-f", "{yaml}"], None), (["get", "nodes"], None),
])
def test_a_change_whose_connection_ended_after_it_was_sent_may_have_been_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], sent: str | None) -> None:
    """A server that reads a request and closes: the request that changes something was
    said "cannot reach the DevCell API" though the server had it and may have done it
    (final43, F3); a read or a diff, which change nothing, still is."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    manifest = tmp_path / "c.yaml"
    manifest.write_text("kind: Cell\n")
    listener = _serve_raw(tmp_path / "s.sock", b"")
    try:
        code = main(["--server", f"unix:{tmp_path}/s.sock",
                     *[a.replace("{yaml}", str(manifest)) for a in argv]])
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert code == (2 if argv[0] == "diff" else 1) and len(err.splitlines()) == 1, err
    if sent is None:
        assert "cannot reach the DevCell API" in err, err
    else:
        assert f"{sent} was sent, but no answer came (" in err, err
        assert "whether the server did it is unknown" in err and "cannot reach" not in err


@pytest.mark.parametrize("argv, said", [
    (["token", "revoke", "0123456789ab"], "interrupted: DELETE /api/v1/tokens/0123456789ab was "
     "sent: whether the server did it is unknown; look before asking again\n"),
    (["get", "nodes"], "interrupted\n"),
])
def test_a_change_interrupted_after_it_was_sent_may_have_been_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], said: str) -> None:
    """Ctrl-C while waiting for the answer to a change said "interrupted" alone, though the
    server had it (final43, F5); a read's stays so."""
    import socket

    from devcell import client
    from devcell.cli import main as cli_main

    def interrupted(self: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    monkeypatch.setattr(client._UnixConnection, "getresponse", interrupted)
    monkeypatch.setattr(cli_main, "_ignore_further_signals", lambda: None)  # pytest's own
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # connected, never answers
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", *argv]) == 130
    finally:
        listener.close()
    assert capsys.readouterr().err == said


@pytest.mark.parametrize("answer, said", [
    (b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"items": [',
     "its answer (HTTP 200) was cut off: the connection closed after 11 of 1000 bytes"),
    (b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n{"items": [\r\n6',
     "its answer (HTTP 200) was cut off: the connection closed after 11 bytes"),
    (b'HTTP/1.1 404 Not Found\r\nContent-Length: 500\r\n\r\n{"detail": "no ',
     "its answer (HTTP 404) was cut off: the connection closed after 15 of 500 bytes"),
])
def test_an_answer_cut_off_is_said_so_not_taken_for_another_servers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    """A daemon that dies mid-answer (a body shorter than its Content-Length, a chunk cut)
    was "the server answered '{"items": [', which is not JSON: is it DevCell's API?"
    (final43, F4)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", answer)
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "get", "nodes"]) == 1
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert said in err and "DevCell's API" not in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("answer, said", [
    (b"SSH-2.0-OpenSSH_9.2\r\n", "what is not a WebSocket's upgrade (did not receive a valid "
                                 "HTTP response)"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", "HTTP 200 to a WebSocket's upgrade"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
     b"Sec-WebSocket-Accept: nope\r\n\r\n", "what is not a WebSocket's upgrade (invalid "
                                          "Sec-WebSocket-Accept header: nope)"),
    (b"", "closed the connection without an answer: cannot reach the DevCell API"),
])
def test_a_stream_from_a_server_that_does_not_speak_websocket_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    """exec and port-forward through a server that is not DevCell's API (another protocol, a
    plain answer, a bad upgrade, a forward to a daemon that is down) were tracebacks
    (websockets' InvalidMessage and InvalidHeaderValue; found by attack41)."""
    from devcell import errors
    from devcell.client import Client

    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", answer, hold=0.2)
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "exec", "box", "--", "true"]) == 1
        with pytest.raises(errors.DevCellError, match=re.escape(said.split(":")[0])):
            Client(f"unix:{tmp_path}/s.sock").port_socket("box", 80)
    finally:
        listener.close()
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_an_answer_trickled_a_byte_at_a_time_ends_at_the_clients_timeout(
        tmp_path: Path) -> None:
    """Each read of an answer's body waited under the socket's timeout alone, so a server
    sending a byte every half second held the client as long as its Content-Length said: the
    whole body now has the client's timeout, and then as long as it takes at 64 KiB/s
    (found by attack41's review)."""
    import socket
    import threading
    import time

    from devcell import errors
    from devcell.client import Client

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    sent = [0]
    stop = threading.Event()

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n")
            while sent[0] < 100 and not stop.is_set():
                try:
                    conn.sendall(b" ")
                except OSError:
                    return
                sent[0] += 1
                time.sleep(0.5)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        with pytest.raises(errors.TemporaryError, match="did not arrive within 2s and at 64 KiB"):
            Client(f"unix:{tmp_path}/s.sock", timeout=2.0).get("cells", "x")
        assert sent[0] < 50  # given up long before the last of its 100 bytes
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def _json_answer(doc: Any) -> bytes:
    import json

    body = json.dumps(doc).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)


_ROW = {"phase": "Running", "deleting_at": None, "deleted_at": None}


@pytest.mark.parametrize("lineage", [
    [],  # not an object
    {"cells": [{"id": "a", "name": "a", "forked_from": None, **_ROW}]},  # no snapshots
    {"cells": [{"id": "a", "name": 7, "forked_from": None, **_ROW}], "snapshots": []},
    # the same id twice: a root's child that is its own ancestor, drawn forever
    {"cells": [{"id": "a", "name": "a", "forked_from": None, **_ROW},
               {"id": "a", "name": "b", "forked_from": "s", **_ROW}],
     "snapshots": [{"id": "s", "name": "s", "cell_id": "a", **_ROW}]},
], ids=["not-an-object", "no-snapshots", "a-name-not-text", "an-id-twice"])
def test_a_lineage_a_server_makes_up_is_one_error_line(
        tmp_path: Path, lineage: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`get snapshots --tree` through a server that is not DevCell's (or is hostile): one
    line asking whether it is DevCell's API, never a traceback nor a tree drawn forever."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", _json_answer(lineage))
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "get", "snapshots",
                     "--tree"]) == 1
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert out == "" and "is it DevCell's API" in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("name", ["", "a/b"])
def test_a_node_no_route_can_name_is_not_found_before_asking(
        tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`node cordon ""` or `a/b` through a server said "no API route" (the path had no node
    in it, or two segments); no node is named so: not found, and nothing is sent (attack44)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    assert main(["--server", f"unix:{tmp_path}/none.sock", "node", "cordon", name]) == 1
    err = capsys.readouterr().err
    assert err == f'error: node "{name}" not found\n', err


@pytest.mark.parametrize("kind", ["cells", "snapshots", "volumes", "operations", "events",
                                  "controllers"])
def test_rows_of_another_shape_are_one_error_line(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A server answering rows without the fields `get` prints (another version, or not
    DevCell) is said in one line naming what was missing, never a traceback (found by
    attack44)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    rows = {"apiVersion": "v1", "kind": "RowList", "items": [{"row": {"name": "x"}}],
            "metadata": {"resourceVersion": "1"}}
    listener = _serve_raw(tmp_path / "s.sock", _json_answer(rows))
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "get", kind]) == 1
    finally:
        listener.close()
    out, err = capsys.readouterr()
    assert out == "" and "its answer could not be read (KeyError: " in err, err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize("output", ["yaml", "json"])
def test_rows_nested_past_the_printers_depth_are_one_error_line(
        tmp_path: Path, output: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A field nested ~900 deep (JSON the client reads, deeper than the YAML printer
    recurses) is one error line, never a RecursionError's traceback (attack45)."""
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    deep: Any = []
    for _ in range(900):
        deep = [deep]
    row = {"id": "vol_1", "name": "x-workspace", "mount_path": "/workspace", "phase": "Bound",
           "created_at": "2026-12-06T23:32:59.450Z", "backend_ref": deep, "cell": "x",
           "from_snapshot": None}
    rows = {"apiVersion": "v1", "kind": "RowList", "items": [{"row": row}], "warnings": [],
            "notes": [], "metadata": {"resourceVersion": "1"}}
    listener = _serve_raw(tmp_path / "s.sock", _json_answer(rows))
    try:
        code = main(["--server", f"unix:{tmp_path}/s.sock", "get", "volumes", "-o", output])
    finally:
        listener.close()
    out, err = capsys.readouterr()
    if output == "json":  # json prints it whole
        assert code == 0 and err == "", err
        return
    assert code == 1 and out == "" and "its answer could not be read (RecursionError" in err
    assert len(err.splitlines()) == 1, err


STREAMS_CUT = [
    (b'HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\nf\r\n{"detail": "no \r\n40',
     "its answer (HTTP 404) was cut off: the connection closed after 15 bytes"),
    (b'HTTP/1.1 404 Not Found\r\nContent-Length: 500\r\n\r\n{"detail": "no ',
     "its answer (HTTP 404) was cut off: the connection closed after 15 of 500 bytes"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3\r\n{}\n\r\n40\r\nab",
     "its answer (HTTP 200) was cut off: the connection closed after 5 bytes"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 500\r\n\r\n{}\n",
     "its answer (HTTP 200) was cut off: the connection closed after 3 of 500 bytes"),
]


@pytest.mark.parametrize("answer, said", STREAMS_CUT)
def test_a_watch_or_a_log_cut_off_is_one_error_never_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        answer: bytes, said: str) -> None:
    """A watch's or a log's answer (an error's or a success's) whose connection closed before
    its end: http.client's IncompleteRead was raised as it is, a traceback, or the log ended
    as if whole, exit 0 (fix44's left-over of final43's F4); a snapshot export's refusal
    too."""
    import io

    from devcell import errors
    from devcell.client import Client

    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    listener = _serve_raw(tmp_path / "s.sock", answer)
    client = Client(f"unix:{tmp_path}/s.sock")
    try:
        with pytest.raises(errors.TemporaryError, match=re.escape(said)):
            list(client.watch("cells"))
        with pytest.raises(errors.TemporaryError, match=re.escape(said)):
            list(client.logs("box", follow=True))
        if b" 404 " in answer:  # an export's refusal, read as the others' (not an archive's)
            with pytest.raises(errors.TemporaryError, match=re.escape(said)):
                client.export_snapshot("snap", io.BytesIO())
        for follow in ([], ["-f"]):
            assert main(["--server", f"unix:{tmp_path}/s.sock", "logs", *follow, "box"]) == 1
            out, err = capsys.readouterr()
            assert said in err and len(err.splitlines()) == 1, err
            assert out == ("{}\n" if answer.startswith(b"HTTP/1.1 200") else "")
    finally:
        listener.close()


@pytest.mark.parametrize("at, argv, said", [
    ("sending", ["token", "revoke", "0123456789ab"], "interrupted: DELETE /api/v1/tokens/"
     "0123456789ab was being sent: whether the server did it is unknown; look before asking "
     "again\n"),
    ("reading", ["token", "revoke", "0123456789ab"], "interrupted: DELETE /api/v1/tokens/"
     "0123456789ab was done (HTTP 200), its answer not read all; look before asking again\n"),
    ("reading", ["node", "cordon", "n1"], "interrupted: POST /api/v1/nodes/n1/cordon was "
     "answered (HTTP 409), its answer not read all: whether the server did it is unknown; "
     "look before asking again\n"),
    ("connecting", ["token", "revoke", "0123456789ab"], "interrupted\n"),
    ("sending", ["get", "nodes"], "interrupted\n"),
    ("reading", ["get", "nodes"], "interrupted\n"),
])
def test_a_change_interrupted_while_sent_or_answered_says_what_became_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        at: str, argv: list[str], said: str) -> None:
    """Ctrl-C while a change's request was still going out, or while its answer's body came,
    said "interrupted" alone (F5 covered the wait between them): the server may have it, or
    has done it; before it connected nothing was sent, and a read's interrupt stays plain."""
    import http.client

    from devcell import client
    from devcell.cli import main as cli_main

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    status = "409 Conflict" if "cordon" in argv else "200 OK"
    answer = f"HTTP/1.1 {status}\r\nContent-Length: 100\r\n\r\n{{".encode()
    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    target = {"connecting": (client._UnixConnection, "connect"),
              "sending": (http.client.HTTPConnection, "send"),
              "reading": (client._Answer, "read1")}[at]
    monkeypatch.setattr(*target, interrupted)
    monkeypatch.setattr(cli_main, "_ignore_further_signals", lambda: None)  # pytest's own
    listener = _serve_raw(tmp_path / "s.sock", answer, hold=0.5)
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", *argv]) == 130
    finally:
        listener.close()
    assert capsys.readouterr().err == said


@pytest.mark.parametrize("ask", ["get", "watch", "follow"])
@pytest.mark.parametrize("head", [b"HTTP/1.1 200 OK\r\n", b"X-Slow: y\r\n"])
def test_an_answers_head_trickled_ends_at_the_clients_timeout(tmp_path: Path, head: bytes,
                                                             ask: str) -> None:
    """A server sending its status line a byte at a time, or header after header, held the
    client for as long as it liked: each read waited under the socket's timeout alone (a
    status line may be 64 KiB long, and 100 headers as long each). The head as a whole now
    has the connection's timeout, said in one line; a watch's and `logs -f`'s (whose bodies
    have no bound) the client's, as DevCell sends a stream's head at once."""
    import socket
    import threading
    import time

    from devcell import errors
    from devcell.client import Client

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    sent = [0]
    stop = threading.Event()
    first = b"HTTP/1.1 200 OK\r\n" if head.startswith(b"X-") else b""

    def trickle() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(first)
            while sent[0] < 100 and not stop.is_set():
                try:
                    conn.sendall(head[sent[0] % len(head):][:1] if not first else head)
                except OSError:
                    return
                sent[0] += 1
                time.sleep(0.3)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        with pytest.raises(errors.TemporaryError, match=r"no answer within 2s \(timed out\): "
                           "the server is overloaded, or not DevCell's API"):
            client = Client(f"unix:{tmp_path}/s.sock", timeout=2.0)
            {"get": lambda: client.get("cells", "x"),
             "watch": lambda: list(client.watch("cells")),
             "follow": lambda: list(client.logs("box", follow=True))}[ask]()
        assert sent[0] < 50  # given up long before the server let go
    finally:
        stop.set()
        thread.join(10)
        listener.close()


def _serve_upgrade(path: Path, then: bytes) -> Any:
    """A server on a unix socket that accepts each WebSocket upgrade as DevCell's would (its
    subprotocol echoed), then sends `then` as it is and closes (in a thread)."""
    import base64
    import contextlib
    import hashlib
    import socket
    import threading

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(8)

    def run() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536) or b"\r\n\r\n"
                fields = {k.strip().lower(): v.strip() for k, _, v in (
                    line.partition(b":") for line in head.split(b"\r\n")[1:])}
                accept = base64.b64encode(hashlib.sha1(
                    fields[b"sec-websocket-key"] + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
                ).digest())
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept +
                             b"\r\nSec-WebSocket-Protocol: " +
                             fields[b"sec-websocket-protocol"].split(b",")[0] + b"\r\n\r\n"
                             + then)

    threading.Thread(target=run, daemon=True).start()
    return listener


@pytest.mark.parametrize("then", [b"", b"\xff" * 64], ids=["closed", "garbage"])
@pytest.mark.parametrize("argv, said", [
    (["exec", "-e", "A=1", "box", "--", "true"],
     "error: exec in cell box: the stream ended before the command was started\n"),
    (["exec", "box", "--", "true"],
     "error: exec in cell box: the stream ended without an exit status\n"),
    (["ssh-proxy", "box"], "error: the port-forward stream ended without a status\n"),
])
def test_a_stream_that_breaks_once_upgraded_is_one_line_and_a_failure(
        tmp_path: Path, then: bytes, argv: list[str], said: str) -> None:
    """A stream accepted, then closed or sent what is not WebSocket's framing: exec with -e
    (its environment sent first) was websockets' ConnectionClosedError, a traceback, and
    ssh-proxy said the error but exited 0."""
    import os
    import subprocess
    import sys

    listener = _serve_upgrade(tmp_path / "s.sock", then)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "devcell", "--server", f"unix:{tmp_path}/s.sock", *argv],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
            env={**os.environ, "DEVCELL_CONTEXTS": str(tmp_path / "none.json")})
    finally:
        listener.close()
    assert (done.returncode, done.stdout, done.stderr) == (1, "", said)


@pytest.mark.parametrize("answer, said", [
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "the server answered HTTP 101: is it"),
    (b"HTTP/1.1 302 Found\r\nLocation: https://x.example/\r\nContent-Length: 0\r\n\r\n",
     "the server answered HTTP 302, to 'https://x.example/': is it"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", "the server answered HTTP 204 where a stream was "
                                         "asked: is it"),
])
def test_a_stream_answered_neither_its_200_nor_an_error_is_not_devcells(
        tmp_path: Path, answer: bytes, said: str) -> None:
    """A watch, a log or a drain answered 101 (no upgrade asked), a redirect or another
    success was raised as an error of that status, "HTTP 101" alone; it is not DevCell's API,
    said as every other answer of the kind."""
    from devcell import errors
    from devcell.client import Client

    listener = _serve_raw(tmp_path / "s.sock", answer)
    client = Client(f"unix:{tmp_path}/s.sock")
    try:
        for ask in (lambda: list(client.watch("cells")), lambda: list(client.logs("box")),
                    lambda: client.drain_node("n1")):
            with pytest.raises(errors.DevCellError, match=re.escape(said)):
                ask()
    finally:
        listener.close()


def test_a_drain_interrupted_while_it_streams_goes_on_on_the_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C while a drain's lines come said "interrupted" alone, as if the drain stopped:
    it goes on on the server to its end (a client leaving never stops it)."""
    from devcell import client
    from devcell.cli import main as cli_main

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setenv("DEVCELL_CONTEXTS", str(tmp_path / "none.json"))
    monkeypatch.setattr(client._Answer, "read1", interrupted)
    monkeypatch.setattr(cli_main, "_ignore_further_signals", lambda: None)  # pytest's own
    listener = _serve_raw(tmp_path / "s.sock", b"HTTP/1.1 200 OK\r\nContent-Type: "
                          b"application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n", hold=0.5)
    try:
        assert main(["--server", f"unix:{tmp_path}/s.sock", "node", "drain", "n1"]) == 130
    finally:
        listener.close()
    assert capsys.readouterr().err == (
        "interrupted: POST /api/v1/nodes/n1/drain was answered (HTTP 200): the drain goes on "
        "on the server to its end (a client leaving never stops it); look (get nodes, get "
        "events) before asking again\n")
