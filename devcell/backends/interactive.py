"""What a backend with the `exec` capability offers beyond the Backend protocol.

`devcell exec` and `devcell logs` use it; backends without it (the fake) are refused with
CapabilityMissing instead of a surprise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, BinaryIO, Protocol, runtime_checkable

from devcell.backends.base import Backend, CellRef
from devcell.backends.log_source import ServiceLogs
from devcell.errors import CapabilityMissing
from devcell.records import Record, field

if TYPE_CHECKING:
    import socket  # annotations only: socket.py builds its enums at import (~2 ms)


class Terminal(Record):
    """A pseudo-terminal asked of the cell, kept the size of the caller's window.

    The caller owns its terminal (raw mode, SIGWINCH); the backend only reads `size`
    ((rows, columns), or None when unknown) at start and again whenever `resized` is set.
    An Event rather than a callback, so a signal handler can set it without calling the engine.
    """

    size: Callable[[], tuple[int, int] | None]
    resized: threading.Event = field(default_factory=threading.Event)


class ExecOptions(Record):
    """How a command runs beyond its argv: `exec -e/-w/-u`, and an SSH session's.

    `env` is added over the cell's environment; `workdir` is a directory in the cell; `user`
    a name or uid[:gid] the cell knows. `hang_up`, once set, ends the command and what it
    started (the SSH client went away): a command must not outlive everyone who could see it.
    """

    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    user: str | None = None
    hang_up: threading.Event | None = None


@runtime_checkable
class Interactive(Protocol):
    def exec(self, cell: CellRef, argv: list[str], *, stdout: BinaryIO, stderr: BinaryIO,
             stdin: BinaryIO | None = None, terminal: Terminal | None = None,
             options: ExecOptions | None = None) -> int:
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
class SidecarLogs(Protocol):
    def sidecar_logs(self, cell: CellRef, sidecar: str, *, tail: int | None,
                     since: int | None, timestamps: bool, follow: bool) -> Iterator[bytes]:
        """A sidecar's output as the engine keeps it (both streams, in order), in pieces:
        the last `tail` lines, those written from `since` (seconds since the epoch), with
        the engine's time before each line; with `follow`, going on as it writes.
        NotFound when the cell has no such sidecar container."""
        ...


def sidecar_logs(backend: Backend, backend_name: str) -> SidecarLogs:
    if not isinstance(backend, SidecarLogs):
        raise CapabilityMissing(f"backend {backend_name} runs no sidecars")
    return backend


@runtime_checkable
class Forwarding(Protocol):
    def open_port(self, cell: CellRef, port: int) -> socket.socket:
        """A TCP connection to `port` on the running cell's own loopback (inside its network,
        published or not): what `devcell port-forward` relays a local connection to."""
        ...

    def listen_port(self, cell: CellRef, address: str, port: int) -> socket.socket:
        """A socket listening on `address:port` inside the running cell's network (port 0:
        any free one): what `ssh -R` asks for, so the cell reaches the developer's machine."""
        ...


@runtime_checkable
class Subsystems(Protocol):
    def subsystem(self, cell: CellRef, name: str, home: str) -> list[str] | None:
        """The argv of a program inside the cell that serves SSH subsystem `name` on its
        standard input and output (a vm cell's sftp: OpenSSH's sftp-server in its guest,
        starting in `home`), run as `exec`; None when the backend serves it otherwise or not
        at all."""
        ...


class CellRoot(Record):
    """A running cell's `/` as its processes see it (an O_PATH directory descriptor, owned by
    the caller), and who a file made there for the developer should belong to."""

    fd: int
    owner: tuple[int, int] | None
    """(uid, gid) the cell runs as, for files created on its behalf; None: root."""
    home: str
    """Where a session starts: the workspace's mount path."""


@runtime_checkable
class FileAccess(Protocol):
    def open_root(self, cell: CellRef) -> CellRoot:
        """The running cell's root, for sftp (host/rooted.py resolves every path inside it)."""
        ...


def file_access(backend: Backend, backend_name: str) -> FileAccess:
    if not isinstance(backend, FileAccess):
        raise CapabilityMissing(f"backend {backend_name} does not serve a cell's files "
                                "(sftp, scp); use a cell on the container backend")
    return backend


def forwarding(backend: Backend, backend_name: str) -> Forwarding:
    if not isinstance(backend, Forwarding):
        raise CapabilityMissing(f"backend {backend_name} cannot forward ports into a cell; "
                                "use a cell on the container or vm backend")
    return backend


def interactive(backend: Backend, backend_name: str) -> Interactive:
    if not backend.capabilities.exec or not isinstance(backend, Interactive):
        raise no_exec(backend_name)
    return backend


def no_exec(backend_name: str) -> CapabilityMissing:
    """The refusal of a command that needs a cell's runtime, on a backend without one."""
    return CapabilityMissing(f"backend {backend_name} cannot run commands or keep service "
                             "logs (capability exec); use a cell on the container or vm "
                             "backend")
