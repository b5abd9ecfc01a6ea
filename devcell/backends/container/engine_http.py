"""One HTTP/1.1 request to the Docker engine over its socket, with nothing but `socket`.

The snapshot path asks the engine three small things (list, pause, unpause), and
`http.client` would bring `email` (its header parser) and `ssl` along: ~20 modules, more
start-up than the calls themselves. The engine's answers are plain: a status line, headers,
and a body sized by Content-Length or sent chunked (Go's net/http), on a connection this
module asks to close. Anything else is `BadResponse`, which callers treat as an engine they
cannot reach, as they treated http.client's errors.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

HEAD_LIMIT = 64 << 10
"""The status line and headers of an engine's answer are a few hundred bytes."""


class BadResponse(Exception):
    """The peer's answer is not HTTP/1.x this module reads (or is larger than asked for)."""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes


def unix(path: str, timeout: float) -> socket.socket:
    """A stream socket connected to the engine's unix socket at `path`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def tcp(host: str, port: int, timeout: float) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout)


def request(sock: socket.socket, method: str, path: str, *, host: str = "localhost",
            limit: int = 64 << 20) -> Response:
    """Send `method path` (no body) on `sock`, read the answer (at most `limit` body bytes),
    and close the socket."""
    try:
        length = "Content-Length: 0\r\n" if method in ("POST", "PUT") else ""
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: devcell\r\n"
                     f"{length}Connection: close\r\n\r\n".encode("ascii"))
        return _Reader(sock, limit).response(method)
    finally:
        sock.close()


class _Reader:
    def __init__(self, sock: socket.socket, limit: int) -> None:
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
