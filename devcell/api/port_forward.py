"""`devcell port-forward CELL [LOCAL:]REMOTE...`: local TCP ports relayed to ports a running
cell listens on, published or not (kubectl's verb and syntax).

Each local port listens on loopback only (a forward is for the developer at this machine: an
address beyond it would expose the cell to the network, which publishing with the security
policy's allowance is for). Every accepted connection gets its own connection into the cell
(the backend's `open_port`: for a container, made inside its network namespace) and two
threads copying bytes until both directions end; a connection the cell refuses is closed and
said on stderr, and the forward goes on, as kubectl's does.
"""

from __future__ import annotations

import ipaddress
import re
import selectors
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from devcell.api.attach import Attached
from devcell.backends.base import CellRef
from devcell.backends.interactive import Forwarding, forwarding
from devcell.errors import BackendError, UsageError
from devcell.store import activity as activity_store

MAX_CONNECTIONS = 256
CHUNK = 64 * 1024
_SPEC = re.compile(r"(?:([0-9]{0,5}):)?([0-9]{1,5})")


@dataclass(frozen=True)
class Mapping:
    local: int
    """0: any free port (kubectl's `:REMOTE`)."""
    remote: int


def parse(specs: Sequence[str]) -> list[Mapping]:
    """`[LOCAL:]REMOTE` each, as kubectl writes them (`8080`, `9000:80`, `:80`)."""
    if not specs:
        raise UsageError("give at least one port: devcell port-forward CELL [LOCAL:]REMOTE...")
    out = []
    for spec in specs:
        found = _SPEC.fullmatch(spec)
        if found is None:
            raise UsageError(f"invalid port {spec!r}: write REMOTE, LOCAL:REMOTE or :REMOTE "
                             "(digits only)")
        local_text, remote_text = found.groups()
        remote = int(remote_text)
        local = remote if local_text is None else int(local_text or 0)
        if not 1 <= remote <= 65535 or not 0 <= local <= 65535:
            raise UsageError(f"invalid port {spec!r}: ports are 1-65535 (LOCAL 0: any free)")
        out.append(Mapping(local, remote))
    return out


def loopback(address: str) -> str:
    """`address` if it is this machine's loopback (`localhost` is 127.0.0.1)."""
    if address == "localhost":
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(address).is_loopback:
            return address
    except ValueError:
        pass
    raise UsageError(f"--address {address!r}: a forward listens on loopback only (127.0.0.1, "
                     "::1 or localhost); to reach a cell from other machines, publish its port "
                     "(spec.network.ports) as the security policy allows")


@dataclass
class Listening:
    address: str
    local: int
    remote: int
    sock: socket.socket


class Listener:
    """The listening sockets of one forward, each accepted connection handed to
    `forward(client, remote)` on a thread of its own (at most MAX_CONNECTIONS at once): the
    direct forward's (Forwarder) and the API client's (devcell.client: each to a WebSocket)."""

    def __init__(self, mappings: Sequence[Mapping], address: str,
                 on_error: Callable[[str], object],
                 forward: Callable[[socket.socket, int], None]) -> None:
        self.address = address
        self.on_error = on_error
        self.forward = forward
        self.listening: list[Listening] = []
        self._active = threading.BoundedSemaphore(MAX_CONNECTIONS)
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            for mapping in mappings:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((address, mapping.local))
                except OSError as exc:
                    sock.close()
                    raise BackendError(f"cannot listen on {address}:{mapping.local}: "
                                       f"{exc.strerror}") from None
                sock.listen(64)
                sock.setblocking(False)
                self.listening.append(Listening(address, sock.getsockname()[1], mapping.remote,
                                                sock))
        except BaseException:
            self.close()
            raise

    def serve(self, stop: threading.Event) -> None:
        """Accept and relay until `stop` is set."""
        with selectors.DefaultSelector() as selector:
            for item in self.listening:
                selector.register(item.sock, selectors.EVENT_READ, item)
            while not stop.is_set():
                for key, _ in selector.select(timeout=0.2):
                    ready: Listening = key.data
                    try:
                        client, _ = ready.sock.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    if not self._active.acquire(blocking=False):
                        client.close()
                        self.on_error(f"more than {MAX_CONNECTIONS} connections at once; "
                                      f"one to port {ready.local} was closed")
                        continue
                    client.setblocking(True)
                    threading.Thread(target=self._relay, args=(client, ready.remote),
                                     name=f"forward-{ready.remote}", daemon=True).start()

    def _relay(self, client: socket.socket, remote: int) -> None:
        try:
            self.forward(client, remote)
        finally:
            client.close()
            self._active.release()

    def close(self) -> None:
        for item in self.listening:
            item.sock.close()


class Forwarder(Listener):
    """`devcell port-forward` on the state directory: each connection relayed to one the
    backend opens into the cell (open_port)."""

    def __init__(self, attached: Attached, mappings: Sequence[Mapping], address: str,
                 on_error: Callable[[str], object],
                 activity: activity_store.Connections | None = None) -> None:
        self.attached = attached
        self.activity = activity
        """Told of each connection's open and close: a cell with one open is not idle."""
        self.backend: Forwarding = forwarding(attached.backend, attached.backend_name)
        super().__init__(mappings, address, on_error, self._direct)

    def _direct(self, client: socket.socket, remote: int) -> None:
        try:
            upstream = open_connection(self.backend, self.attached.ref, remote)
        except BackendError as exc:
            self.on_error(str(exc))
            return
        if self.activity is not None:
            self.activity.opened()
        try:
            with upstream:
                back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
                back.start()
                _pump(client, upstream)
                back.join()
        finally:
            if self.activity is not None:
                self.activity.closed()


def open_connection(backend: Forwarding, ref: CellRef, remote: int) -> socket.socket:
    """A connection to port `remote` on the cell's own loopback (the backend's open_port),
    as both `devcell port-forward` and the API's port-forward stream make it; BackendError
    saying what refused it (a port nothing listens on: Connection refused)."""
    try:
        return backend.open_port(ref, remote)
    except (BackendError, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BackendError(f"connecting to port {remote} in cell {ref.name}: {why}") from None


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing half (the other way may go on)."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
