"""TCP forwards over SSH into and out of a cell's network (`ssh -L`, `-D`, `-R`).

`-L` and `-D` open direct-tcpip channels: each is connected to a port on the cell's own
loopback (the backend's `open_port`, made inside the cell's network namespace), never to the
host's network. `-R` asks for a port listening inside the cell (the backend's
`listen_port`); it always binds the cell's loopback, as sshd does without GatewayPorts.
Names are not looked up (a lookup would run in the host's resolver, not the cell's): only
`localhost` and loopback addresses are forwarded to.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
from typing import TYPE_CHECKING, Any

import asyncssh

from devcell.backends.interactive import Forwarding
from devcell.errors import BackendError
from devcell.log import logger

if TYPE_CHECKING:
    from devcell.backends.base import CellRef

MAX_BUFFER = 256 * 1024


def loopback(host: str) -> str | None:
    """The address `host` names on the cell's loopback, or None when it is anything else."""
    if host in ("localhost", "", "localhost.localdomain"):
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    return str(address) if address.is_loopback else None


class Relay(asyncssh.SSHTCPSession[bytes]):
    """Bytes between an SSH channel and a socket in the cell, each side pausing the other
    when its buffer is full (the channel's window, the socket's send buffer)."""

    def __init__(self) -> None:
        self.chan: Any = None
        self.transport: asyncio.Transport | None = None
        self._early: list[bytes] = []
        self._eof = False

    # -- the channel's side (asyncssh.SSHTCPSession) ---------------------------------------

    def connection_made(self, chan: Any) -> None:
        self.chan = chan

    def session_started(self) -> None:
        pass

    def data_received(self, data: bytes, datatype: Any) -> None:
        if self.transport is None:
            self._early.append(data)
            return
        self.transport.write(data)
        if self.transport.get_write_buffer_size() > MAX_BUFFER:
            self.chan.pause_reading()

    def eof_received(self) -> bool:
        if self.transport is None:
            self._eof = True
        elif self.transport.can_write_eof():
            self.transport.write_eof()
        return True  # keep the channel open for the other direction

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    # -- the socket's side -----------------------------------------------------------------

    def attach(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        for data in self._early:
            transport.write(data)
        self._early.clear()
        if self._eof and transport.can_write_eof():
            transport.write_eof()


class _SocketSide(asyncio.Protocol):
    def __init__(self, relay: Relay) -> None:
        self.relay = relay

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.relay.attach(transport)
        transport.set_write_buffer_limits(high=MAX_BUFFER)

    def data_received(self, data: bytes) -> None:
        if self.relay.chan is not None:
            self.relay.chan.write(data)

    def eof_received(self) -> bool:
        if self.relay.chan is not None:
            self.relay.chan.write_eof()
        return True

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.relay.chan is not None:
            self.relay.chan.close()

    def pause_writing(self) -> None:
        if self.relay.chan is not None:
            self.relay.chan.pause_reading()

    def resume_writing(self) -> None:
        if self.relay.chan is not None:
            self.relay.chan.resume_reading()


async def _join(relay: Relay, sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    await loop.connect_accepted_socket(lambda: _SocketSide(relay), sock=sock)


def direct(backend: Forwarding, cell: CellRef, dest_host: str, dest_port: int) -> Any:
    """What asyncssh's `connection_requested` returns for `ssh -L`/`-D`: a coroutine that
    connects inside the cell and gives the relay, or ChannelOpenError saying why not."""
    address = loopback(dest_host)
    if address is None:
        raise asyncssh.ChannelOpenError(
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
            f"only the cell's loopback is forwarded to (localhost, 127.0.0.1, ::1), not "
            f"{dest_host[:64]!r}")
    if not 1 <= dest_port <= 65535:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "port out of range")

    async def connect() -> Relay:
        loop = asyncio.get_running_loop()
        try:
            sock = await loop.run_in_executor(None, _open, backend, cell, address, dest_port)
        except (BackendError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            logger.bind(cell=cell.name, op="ssh").debug("forward to port {}: {}", dest_port,
                                                         why)
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED,
                                            f"port {dest_port} in the cell: {why}") from None
        relay = Relay()
        await _join(relay, sock)
        return relay

    return connect()


def _open(backend: Forwarding, cell: CellRef, address: str, port: int) -> socket.socket:
    if address != "127.0.0.1":
        raise BackendError("only 127.0.0.1 is reachable in the cell through a forward")
    return backend.open_port(cell, port)


class CellListener:
    """A port listening inside the cell for `ssh -R`: each connection accepted there opens a
    forwarded-tcpip channel back to the client."""

    def __init__(self, conn: asyncssh.SSHServerConnection, sock: socket.socket,
                 listen_host: str) -> None:
        self.conn = conn
        self.sock = sock
        self.listen_host = listen_host
        self.port = sock.getsockname()[1]
        sock.setblocking(False)
        self._task = asyncio.ensure_future(self._accept())

    def get_port(self) -> int:
        return int(self.port)

    def close(self) -> None:
        self._task.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        try:
            await self._task
        except (asyncio.CancelledError, OSError):
            pass

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, peer = await loop.sock_accept(self.sock)
            relay = Relay()
            try:
                await self.conn.create_connection(functools.partial(_same, relay),
                                                  self.listen_host, self.port, str(peer[0]),
                                                  int(peer[1]))
            except (asyncssh.Error, OSError):
                client.close()
                continue
            await _join(relay, client)


def _same(relay: Relay) -> Relay:
    return relay


def remote(backend: Forwarding, conn: asyncssh.SSHServerConnection, cell: CellRef,
           listen_host: str, listen_port: int) -> Any:
    """What `server_requested` returns for `ssh -R`: a coroutine giving the listener."""
    address = "::1" if loopback(listen_host) == "::1" else "127.0.0.1"

    async def start() -> Any:
        loop = asyncio.get_running_loop()
        try:
            sock = await loop.run_in_executor(None, backend.listen_port, cell, address,
                                              listen_port)
        except (BackendError, OSError, ValueError) as exc:
            logger.bind(cell=cell.name, op="ssh").info("remote forward refused: {}", exc)
            return False
        return CellListener(conn, sock, listen_host or "localhost")

    return start()
