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
    result: list[socket.socket | BaseException] = []

    def inside() -> None:
        try:
            if _libc().setns(namespace_fd, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
            result.append(socket.create_connection((host, port), timeout=timeout))
        except BaseException as exc:  # handed to the caller's thread
            result.append(exc)

    worker = threading.Thread(target=inside, name="netns-connect", daemon=True)
    worker.start()
    worker.join(timeout + 5)
    if not result:
        raise BackendError(f"connecting to port {port} in the cell took over {timeout:g} s")
    found = result[0]
    if isinstance(found, BaseException):
        if isinstance(found, PermissionError) or getattr(found, "errno", None) == errno.EPERM:
            raise BackendError("entering the cell's network needs root (CAP_SYS_ADMIN); run "
                               "port-forward as root") from None
        raise found
    found.settimeout(None)
    return found


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC
