"""A command that floods output past its time limit (issue 31, item 12): the timer and the
thread reading the output must not race. The timer once closed the connection's reader while
the output was still being read, and the read ended in `ValueError: I/O operation on closed
file`, reported as an unexpected error instead of the hook's time limit.

Driven without an engine: a stub engine API hands `_exec` one end of a socket pair shaped as
docker-py's hijacked connection (its buffered reader under `_response.raw._fp.fp`), and a
thread floods frames into the other end for ever; the consumer is slow, so the timer fires
while the reader is between reads, as it does with a real flooding hook."""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.errors import BackendError


class _Response:
    def __init__(self, sock: socket.socket) -> None:
        self._fp = sock.makefile("rb")
        self.raw = SimpleNamespace(_fp=SimpleNamespace(fp=self._fp))

    def close(self) -> None:
        self._fp.close()


class _Conn:
    """docker-py's hijacked exec connection: the socket and the HTTP response over it."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._response = _Response(sock)

    def close(self) -> None:
        self._sock.close()


class _Api:
    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.stop = threading.Event()

    def exec_create(self, container: str, argv: list[str], **kw: Any) -> dict[str, str]:
        return {"Id": "exec1"}

    def exec_start(self, exec_id: str, **kw: Any) -> _Conn:
        threading.Thread(target=self._flood, daemon=True).start()
        return _Conn(self.ours)

    def _flood(self) -> None:
        frame = b"\x01\0\0\0" + (4096).to_bytes(4, "big") + b"y" * 4096
        try:
            while not self.stop.is_set():
                self.theirs.sendall(frame)
        except OSError:
            pass

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        return {"Pid": 0, "Running": False, "ExitCode": 137}


@pytest.mark.parametrize("attempt", range(3))
def test_a_flooding_command_past_its_limit_is_said_as_its_time_limit(attempt: int) -> None:
    backend = object.__new__(ContainerBackend)
    api = _Api()
    backend.__dict__["client"] = SimpleNamespace(api=api)  # self.api is client.api

    def slow(data: bytes) -> None:
        time.sleep(0.002)  # a sink slower than the flood: the timer fires between reads

    try:
        with pytest.raises(BackendError, match=r"did not finish within 0.3 s"):
            backend._exec("c1", ["sh", "-c", "yes"], slow, slow, action="preCheckpoint hook",
                          time_limit=0.3)
    finally:
        api.stop.set()
        api.theirs.close()
