"""engine_http against a peer on a unix socket the test made: each way an engine frames its
answer (Content-Length, chunked, until close), and answers it cannot read."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.container import engine_http


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """A one-connection-at-a-time server: answers the next queued bytes, records requests."""
    path = str(tmp_path / "engine.sock")
    answers: list[bytes] = []
    requests: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                requests.append(data)
                conn.sendall(answers.pop(0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, answers, requests
    server.close()
    thread.join(timeout=5)


def _ask(path: str, method: str = "GET", limit: int = 1 << 20) -> engine_http.Response:
    return engine_http.request(engine_http.unix(path, 5.0), method, "/containers/json?all=1",
                               limit=limit)


def test_a_body_sized_by_content_length(peer: tuple[str, list[bytes], list[bytes]]) -> None:
    path, answers, requests = peer
    answers.append(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 7\r\n\r\n[1,2,3]")
    assert _ask(path) == engine_http.Response(200, b"[1,2,3]")
    assert requests[0].startswith(b"GET /containers/json?all=1 HTTP/1.1\r\nHost: localhost")
    assert b"Connection: close" in requests[0] and b"Content-Length" not in requests[0]


def test_a_chunked_body_and_an_empty_one(peer: tuple[str, list[bytes], list[bytes]]) -> None:
    path, answers, requests = peer
    answers.append(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"4\r\n[1,2\r\n3;ext=1\r\n,3]\r\n0\r\nX-Trailer: y\r\n\r\n")
    answers.append(b"HTTP/1.1 204 No Content\r\nApi-Version: 1.45\r\n\r\n")
    answers.append(b"HTTP/1.0 409 Conflict\r\n\r\n{\"message\": \"already paused\"}")
    assert _ask(path) == engine_http.Response(200, b"[1,2,3]")
    assert _ask(path, "POST") == engine_http.Response(204, b"")
    assert b"Content-Length: 0\r\n" in requests[1]
    assert _ask(path, "POST") == engine_http.Response(409, b'{"message": "already paused"}')


@pytest.mark.parametrize("answer", [
    b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000,
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Le",
])
def test_answers_it_cannot_read_are_bad_responses(
        peer: tuple[str, list[bytes], list[bytes]], answer: bytes) -> None:
    path, answers, _ = peer
    answers.append(answer)
    with pytest.raises(engine_http.BadResponse):
        _ask(path, limit=1000)


def test_no_engine_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        engine_http.unix(str(tmp_path / "nothing.sock"), 1.0)
