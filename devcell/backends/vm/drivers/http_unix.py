"""HTTP/1.1 over a unix socket, with the standard library: how DevCell speaks to Firecracker.

Firecracker's API is JSON over HTTP on a unix socket (its `--api-sock`). http.client does
the HTTP; only the connection is ours: a stream socket reached through the cell's directory
(vm_qmp.connect, so a deep state directory never overflows a sockaddr_un). Every exchange has
a timeout, and a reply is read up to MAX_BODY bytes only: the hypervisor is trusted more than
the guest, but a wedged or confused one must cost DevCell an error, never a hang or its memory.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcell.backends.vm.drivers import qmp as vm_qmp
from devcell.errors import BackendError, BackendUnavailable

MAX_BODY = 1 << 20
"""Firecracker's replies are a few hundred bytes; anything past 1 MiB is refused."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> dict[str, Any] | None:
        """The body as a JSON object; None when empty or not an object."""
        if not self.body.strip():
            return None
        try:
            value = json.loads(self.body)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


class _UnixConnection(http.client.HTTPConnection):
    """An HTTPConnection whose socket is `directory/name` rather than a TCP address."""

    def __init__(self, directory: Path, name: str, *, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._directory = directory
        self._name = name

    def connect(self) -> None:
        self.sock = vm_qmp.connect(self._directory, self._name, timeout=float(self.timeout or 5))


class UnixHttp:
    """One keep-alive HTTP connection to a server on a unix socket, `what` naming it in errors."""

    def __init__(self, directory: Path, name: str, *, what: str, timeout: float = 10.0) -> None:
        self.what = what
        self.where = directory / name
        self._connection = _UnixConnection(directory, name, timeout=timeout)

    def __enter__(self) -> UnixHttp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._connection.close()

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                timeout: float | None = None) -> Reply:
        """Send one request and read its whole (bounded) reply."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if timeout is not None:
            self._connection.timeout = timeout
            if self._connection.sock is not None:
                self._connection.sock.settimeout(timeout)
        try:
            self._connection.request(method, path, body=payload, headers=headers)
            response = self._connection.getresponse()
            return Reply(response.status, _read_bounded(response, self.what))
        except TimeoutError:
            self.close()
            raise BackendUnavailable(f"{self.what} did not answer {method} {path} in time"
                                     ) from None
        except (ConnectionError, FileNotFoundError) as exc:
            self.close()
            raise BackendUnavailable(f"cannot reach {self.what} at {self.where}: "
                                     f"{exc.strerror or exc}") from None
        except (http.client.HTTPException, OSError) as exc:
            self.close()
            raise BackendError(f"{self.what} broke the HTTP exchange for {method} {path}: "
                               f"{type(exc).__name__}") from None


def _read_bounded(response: http.client.HTTPResponse, what: str) -> bytes:
    """The reply's body, refused past MAX_BODY; read by its declared length when it has one
    (Firecracker's always do), else in chunks (never a MAX_BODY buffer per reply)."""
    if response.length is not None:
        if response.length > MAX_BODY:
            response.close()
            raise BackendError(f"{what} sent a reply of {response.length} bytes (more than "
                               f"{MAX_BODY})")
        return response.read()
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(1 << 16):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY:
            response.close()
            raise BackendError(f"{what} sent a reply longer than {MAX_BODY} bytes")
    return b"".join(chunks)
