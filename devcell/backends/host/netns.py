"""A TCP connection opened inside another process's network namespace (a cell's), from the
host: how `devcell port-forward` reaches a port a cell listens on without publishing it.

`setns(2)` moves only the calling thread, and a socket belongs to the namespace it was made
in, so a short-lived thread enters the namespace, makes and connects the socket, and ends;
the caller keeps the socket in its own namespace. The thread never returns to the host's
namespace, so it is never reused. Entering a namespace needs CAP_SYS_ADMIN (root).
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import socket
import threading
from collections.abc import Callable

from devcell.errors import BackendError

CLONE_NEWNET = 0x40000000
CONNECT_SECONDS = 10.0


def connect(namespace_fd: int, port: int, *, host: str = "127.0.0.1",
            timeout: float = CONNECT_SECONDS) -> socket.socket:
    """A connected socket to `host:port` as seen inside the namespace `namespace_fd` (an open
    /proc/PID/ns/net); OSError as connect(2) gives it (ECONNREFUSED: nothing listens). `host`
    is an address, never a name (a lookup would run in the cell's network, past the deadline)."""
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is not 1-65535")
    ipaddress.ip_address(host)  # ValueError for a name
    found = _inside(namespace_fd, lambda: socket.create_connection((host, port),
                                                                    timeout=timeout),
                    timeout, f"connecting to port {port} in the cell")
    found.settimeout(None)
    return found


def listen(namespace_fd: int, host: str, port: int, *, backlog: int = 64) -> socket.socket:
    """A socket bound to `host:port` and listening inside the namespace (port 0: any free);
    it stays in that namespace after the thread that made it ends."""
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not 0-65535")
    family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET

    def make() -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock

    return _inside(namespace_fd, make, CONNECT_SECONDS, f"listening on port {port} in the cell")


def _inside(namespace_fd: int, make: Callable[[], socket.socket], timeout: float,
            doing: str) -> socket.socket:
    """`make()` run on a new thread that entered the namespace first."""
    result: list[socket.socket | BaseException] = []

    def inside() -> None:
        try:
            if _libc().setns(namespace_fd, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
            result.append(make())
        except BaseException as exc:  # handed to the caller's thread
            result.append(exc)

    worker = threading.Thread(target=inside, name="netns-connect", daemon=True)
    worker.start()
    worker.join(timeout + 5)
    if not result:
        raise BackendError(f"{doing} took over {timeout:g} s")
    found = result[0]
    if isinstance(found, BaseException):
        if isinstance(found, PermissionError) or getattr(found, "errno", None) == errno.EPERM:
            raise BackendError("entering the cell's network needs root (CAP_SYS_ADMIN); run "
                               "devcell as root") from None
        raise found
    return found


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC
