"""Serve the API beside the reconcile loop: uvicorn in a thread of the daemon's process.

`--listen unix:PATH` binds a socket that only the state directory's owner can open (made
0600 before anyone can connect; a stale socket left by a dead daemon is replaced, a live
one refused); its callers are that owner, the admin. `--listen tcp:HOST:PORT` serves TLS
only (server.tls: DevCell's own certificate, or --tls-cert/--tls-key), and every request
must present a bearer token (`devcell token create`), whose principal the policy judges.

The server has its own event loop in its own thread; handlers that touch the database run
in a small thread pool. The reconcile loop's threads share only the GIL with it, and the
daemon's latency is measured with and without a listener (bench/daemon_latency.py
--listen).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from devcell.errors import UsageError
from devcell.names import printable

STOP_SECONDS = 3.0
"""How long a stop waits for requests in flight (a watch is cut at once)."""
HEAD_SECONDS = 10.0
"""A request's line and headers must have arrived this long after its connection opened (TLS
done) or its previous answer ended; else the connection is closed. uvicorn has no such
bound: 256 connections each sending half a header held every slot (limit_concurrency) and
the listener answered everyone else 503 for as long as they stayed open."""


class Listen(NamedTuple):
    scheme: str
    """unix or tcp"""
    address: str
    """The socket's path, or HOST:PORT."""


def parse_listen(text: str) -> Listen:
    """`unix:PATH` or `tcp:HOST:PORT` (argparse's type for --listen)."""
    scheme, sep, address = text.partition(":")
    if not sep or scheme not in ("unix", "tcp") or not address:
        raise UsageError(f"--listen {printable(text)}: unix:PATH or tcp:HOST:PORT")
    if scheme == "tcp":
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 <= int(port[:6]) < 65536:
            raise UsageError(f"--listen {printable(text)}: tcp:HOST:PORT (e.g. "
                             "tcp:127.0.0.1:8443; port 0: any free port)")
    return Listen(scheme, address)


def host_port(listen: Listen) -> tuple[str, int]:
    host, _, port = listen.address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def tcp_socket(listen: Listen) -> socket.socket:
    host, port = host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise UsageError(f"--listen tcp:{printable(listen.address)}: "
                         f"{printable(exc.strerror or str(exc))}") from None


PATH_BYTES = 107
"""The longest unix socket path a client can connect to (sun_path's 108 bytes, NUL ended)."""


def unix_socket(path: str) -> socket.socket:
    """A listening socket at `path` that only this user can connect to."""
    if len(os.fsencode(path)) > PATH_BYTES:
        # The bind's detour through /proc would take any length, and the link into place
        # too: the server would listen where no client can connect.
        raise UsageError(f"--listen unix:{printable(path)}: {len(os.fsencode(path))} bytes, "
                         f"longer than a unix socket's path may be ({PATH_BYTES}); give a "
                         "shorter one")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    if found is not None:
        if not stat.S_ISSOCK(found.st_mode):
            raise UsageError(f"--listen unix:{printable(path)}: something that is not a "
                             "socket is there; give another path")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
                raise UsageError(f"--listen unix:{printable(path)}: {exc.strerror}") from None
            try:
                os.unlink(path)  # a dead server's socket
            except OSError as gone:
                if gone.errno != errno.ENOENT:
                    raise UsageError(f"--listen unix:{printable(path)}: a dead server's "
                                     f"socket is there and cannot be removed ({gone.strerror}); "
                                     "remove it or give another path") from None
        else:
            raise UsageError(f"--listen unix:{printable(path)}: another server listens "
                             "there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        _bind_owner_only(sock, path)
    except OSError as exc:
        sock.close()
        raise UsageError(f"--listen unix:{printable(path)}: "
                         f"{printable(exc.strerror or str(exc))}") from None
    sock.listen(128)
    return sock


def _bind_owner_only(sock: socket.socket, path: str) -> None:
    """Bind `sock` at `path`, owner-only from its first instant: bound in a private directory
    beside `path`, made 0600 there, then linked into place (never replacing what appeared at
    `path` meanwhile). Not by narrowing the umask: it is the whole process's, threads share it.
    The bind goes through /proc/self/fd so that the detour adds nothing to the path's length."""
    import tempfile

    private = tempfile.mkdtemp(prefix=".devcell-listen-", dir=os.path.dirname(path) or ".")
    directory = os.open(private, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(f"/proc/self/fd/{directory}/s")
        os.chmod("s", 0o600, dir_fd=directory)
        os.link("s", path, src_dir_fd=directory)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink("s", dir_fd=directory)
        os.close(directory)
        os.rmdir(private)


class Serving:
    """A running server; `stop()` ends it."""

    def __init__(self, server: object, thread: threading.Thread, path: str | None,
                 shown: str) -> None:
        self.server, self.thread, self.path = server, thread, path
        self.shown = shown
        """Where it listens, as a client would reach it (tcp's port as bound)."""

    def stop(self) -> None:
        self.server.should_exit = True  # type: ignore[attr-defined]
        self.thread.join(STOP_SECONDS + 2)
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def start(listen: Listen, state_dir: Path, tls: tuple[Path, Path] | None = None) -> Serving:
    """Bind `listen` and serve the API for `state_dir` in a thread; raise UsageError when the
    address cannot be used. TCP is served with TLS (`tls`: certificate and key; None:
    DevCell's own) and bearer tokens."""
    network = listen.scheme == "tcp"
    if network:
        if tls is None:
            from devcell.server import tls as tlsmod

            tls = tlsmod.own_certificate(state_dir, host_port(listen)[0])
        sock = tcp_socket(listen)
        host, port = sock.getsockname()[:2]
        shown = f"https://{f'[{host}]' if ':' in host else host}:{port}"
    else:
        sock = unix_socket(listen.address)
        shown = f"unix:{listen.address}"
    import uvicorn

    from devcell.server import app, framing

    config = uvicorn.Config(
        app.build(state_dir, tokens=network), lifespan="off", log_config=None,
        access_log=False, log_level="warning", limit_concurrency=256, timeout_keep_alive=5,
        timeout_graceful_shutdown=int(STOP_SECONDS), h11_max_incomplete_event_size=64 * 1024,
        server_header=False, http=_head_timed(), ws="auto", ws_max_size=framing.MAX_MESSAGE,
        ws_per_message_deflate=False, ssl_certfile=tls[0] if tls else None,
        ssl_keyfile=tls[1] if tls else None)
    if network:
        config.load()
        # No TLS 1.3 session tickets: sent after the handshake, they reach a client while it
        # writes its first request; the websockets sync client reads (its reader thread) and
        # writes (the caller's) the same SSL object at once, and about one exec upgrade in
        # 150 then hung waiting for an answer that never came. Nobody resumes sessions here.
        if config.ssl is not None:
            config.ssl.num_tickets = 0
    server = uvicorn.Server(config)
    thread = threading.Thread(target=_run(server, sock), name="devcell-api", daemon=True)
    thread.start()
    return Serving(server, thread, None if network else listen.address, shown)


def _head_timed() -> type:
    """uvicorn's h11 protocol with HEAD_SECONDS for each request's head (read when the
    server starts, so a test may shorten it)."""
    import asyncio

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    seconds = HEAD_SECONDS

    class HeadTimed(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._disarm()  # the connection is the WebSocket's from here
            super().handle_websocket_upgrade(event)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._head_timer = self.loop.call_later(seconds, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None  # a head still not whole: no request began since
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.abort()  # at once: a TLS close waits for the peer's reply

    return HeadTimed


def _run(server: object, sock: socket.socket) -> Callable[[], None]:
    def run() -> None:
        try:
            server.run(sockets=[sock])  # type: ignore[attr-defined]
        finally:
            sock.close()
    return run
