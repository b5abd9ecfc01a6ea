"""What a backend with the `exec` capability offers beyond the Backend protocol.

`devcell exec` and `devcell logs` use it; backends without it (the fake) are refused with
CapabilityMissing instead of a surprise.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol, runtime_checkable

from devcell.backends.base import Backend, CellRef
from devcell.backends.log_source import ServiceLogs
from devcell.errors import CapabilityMissing


@dataclass(frozen=True)
class Terminal:
    """A pseudo-terminal asked of the cell, kept the size of the caller's window.

    The caller owns its terminal (raw mode, SIGWINCH); the backend only reads `size`
    ((rows, columns), or None when unknown) at start and again whenever `resized` is set.
    An Event rather than a callback, so a signal handler can set it without calling the engine.
    """

    size: Callable[[], tuple[int, int] | None]
    resized: threading.Event = field(default_factory=threading.Event)


@runtime_checkable
class Interactive(Protocol):
    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Terminal | None = None) -> int:
        """Run `argv` inside the running cell with its environment; its exit status.

        With `stdin`, its bytes are the command's input and its end closes that input. With
        `terminal`, the command runs on a pseudo-terminal whose output (both streams) goes
        to `stdout`.
        """
        ...

    def log_sources(self, cell: CellRef) -> ServiceLogs:
        """Each service's log, read in bounded pieces (log_source.py): host files for a
        container cell, files in the machine for a vm cell."""
        ...


@runtime_checkable
class Forwarding(Protocol):
    def open_port(self, cell: CellRef, port: int) -> socket.socket:
        """A TCP connection to `port` on the running cell's own loopback (inside its network,
        published or not): what `devcell port-forward` relays a local connection to."""
        ...


def forwarding(backend: Backend, backend_name: str) -> Forwarding:
    if not isinstance(backend, Forwarding):
        raise CapabilityMissing(f"backend {backend_name} cannot forward ports into a cell; "
                                "use a cell on the container backend")
    return backend


def interactive(backend: Backend, backend_name: str) -> Interactive:
    if not backend.capabilities.exec or not isinstance(backend, Interactive):
        raise CapabilityMissing(f"backend {backend_name} cannot run commands or keep service "
                                "logs (capability exec); use a cell on the container backend")
    return backend
