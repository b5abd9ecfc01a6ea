"""One HTTP/1.1 request to the Docker engine over its socket, with nothing but `socket`.

The snapshot path asks the engine three small things (list, pause, unpause), and
`http.client` would bring `email` (its header parser) and `ssl` along: ~20 modules, more
start-up than the calls themselves. The engine's answers are plain: a status line, headers,
and a body sized by Content-Length or sent chunked (Go's net/http), on a connection this
module asks to close. Anything else is `BadResponse`, which callers treat as an engine they
cannot reach, as they treated http.client's errors. `devcell exec`'s fast path
(exec_socket.py) sends JSON bodies and takes over a connection the engine upgrades (`hijack`).
No dataclass or typing import, and the socket through `_socket`, the C module `socket` wraps
(whose import, building its enums, costs ~2.5 ms): this module is on that path, whose whole
budget is a few ms.
"""

from __future__ import annotations

import _socket

HEAD_LIMIT = 64 << 10
"""The status line and headers of an engine's answer are a few hundred bytes."""


class BadResponse(Exception):
    """The peer's answer is not HTTP/1.x this module reads (or is larger than asked for)."""


class Unanswered(BadResponse):
    """The request went out whole but no answer's head came back (closed, timed out, garbled):
    the peer may have acted on it, so it must not be sent again as if it had not."""


class Response:
    """The engine's answer: its status and body."""

    __slots__ = ("status", "body")

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.body = status, body

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Response)
                and (self.status, self.body) == (other.status, other.body))

    def __repr__(self) -> str:
        return f"Response({self.status!r}, {self.body[:200]!r})"


def unix(path: str, timeout: float) -> _socket.socket:
    """A stream socket connected to the engine's unix socket at `path`."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def tcp(host: str, port: int, timeout: float) -> _socket.socket:
    import socket

    return socket.create_connection((host, port), timeout=timeout)


def request(sock: _socket.socket, method: str, path: str, *, host: str = "localhost",
            limit: int = 64 << 20, body: bytes | None = None) -> Response:
    """Send `method path` (with a JSON `body`, or none) on `sock`, read the answer (at most
    `limit` body bytes), and close the socket."""
    try:
        sock.sendall(_head(method, path, host, body, "Connection: close\r\n") + (body or b""))
        return _Reader(sock, limit).response(method)
    finally:
        sock.close()


def hijack(sock: _socket.socket, method: str, path: str, *, body: bytes | None = None,
           host: str = "localhost") -> tuple[int, bytes]:
    """Send `method path` asking the engine to upgrade the connection to a raw stream (what
    `POST /exec/{id}/start` answers with 101). Returns the status and the bytes that came
    after the answer's head: with 101 (or 200, older engines), the stream's first bytes,
    which must not be lost (docker/docker-py#3332); otherwise the start of an error's body.
    The socket stays open either way: the caller reads the stream and closes it. Sent whole
    and then no readable head: `Unanswered` (the engine may have started what was asked)."""
    sock.sendall(_head(method, path, host, body, "Connection: Upgrade\r\nUpgrade: tcp\r\n")
                 + (body or b""))
    reader = _Reader(sock, HEAD_LIMIT)
    try:
        status, _ = reader.head()
    except (OSError, BadResponse) as exc:
        raise Unanswered(f"no answer to {method} {path.partition('?')[0]} ({exc})") from None
    return status, reader.buffer


def _head(method: str, path: str, host: str, body: bytes | None, connection: str) -> bytes:
    if body is not None:
        length = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    else:
        length = "Content-Length: 0\r\n" if method in ("POST", "PUT") else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: devcell\r\n"
            f"{length}{connection}\r\n").encode("ascii")


class _Reader:
    def __init__(self, sock: _socket.socket, limit: int) -> None:
        self.sock, self.limit = sock, limit
        self.buffer = b""
        self.eof = False

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            self.eof = True
        self.buffer += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if self.eof or len(self.buffer) > HEAD_LIMIT:
                raise BadResponse("the engine's answer ended inside its head")
            self._fill()
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def exactly(self, count: int) -> bytes:
        if count > self.limit:
            raise BadResponse(f"the engine's answer is larger than {self.limit} bytes")
        while len(self.buffer) < count:
            if self.eof:
                raise BadResponse("the engine's answer ended early")
            self._fill()
        taken, self.buffer = self.buffer[:count], self.buffer[count:]
        return taken

    def rest(self) -> bytes:
        while not self.eof:
            if len(self.buffer) > self.limit:
                raise BadResponse(f"the engine's answer is larger than {self.limit} bytes")
            self._fill()
        return self.buffer

    def response(self, method: str) -> Response:
        status, headers = self.head()
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return Response(status, b"")
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            return Response(status, self._chunked())
        length = headers.get(b"content-length")
        if length is not None:
            if not length.isdigit():
                raise BadResponse(f"not a Content-Length: {length[:40]!r}")
            return Response(status, self.exactly(int(length)))
        return Response(status, self.rest())

    def head(self) -> tuple[int, dict[bytes, bytes]]:
        """The status line and headers; what follows them stays in `buffer`."""
        version, _, rest = self.line().partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not code.isdigit():
            raise BadResponse(f"not an HTTP/1.x status line: {version[:40]!r}")
        status = int(code)
        headers: dict[bytes, bytes] = {}
        while line := self.line():
            name, colon, value = line.partition(b":")
            if not colon:
                raise BadResponse(f"not a header line: {line[:40]!r}")
            headers[name.strip().lower()] = value.strip()
            if len(headers) > 100:
                raise BadResponse("too many header lines")
        return status, headers

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size_text = self.line().partition(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BadResponse(f"not a chunk size: {size_text[:40]!r}") from None
            if size == 0:
                while self.line():  # trailers, up to the blank line
                    pass
                return b"".join(parts)
            total += size
            if total > self.limit:
                raise BadResponse(f"the engine's answer is larger than {self.limit} bytes")
            parts.append(self.exactly(size))
            if self.line():
                raise BadResponse("a chunk not followed by CRLF")
