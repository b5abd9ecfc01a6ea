"""port-forward as a WebSocket: GET /api/v1/cells/NAME/portforward?port=N, upgraded, one TCP
connection to the cell's port per WebSocket, framed as server/framing.py says. GET
/api/v1/cells/NAME/ssh is the same stream to the cell's SSH server as `devcell ssh-proxy`
serves it (the policy's `ssh` verb): what `ssh-proxy` through a server relays.

The connection is made as `devcell port-forward` makes it (api.port_forward.open_connection:
the backend's open_port, inside the cell's network), after the same checks as exec's stream
(server/streams.prepare: the policy's `port_forward` verb on the cell, a sleeping cell woken,
a runtime that drifted said): all of them, the connection included, before the upgrade, so
a port nothing listens on is the refusal's problem document (502), never an open stream
that says nothing. Once open, the bytes go both ways until both have ended (each end of
writing passed on as a half-close), the client leaves, the port breaks the connection (the
STATUS message's problem) or the token stops being valid (TCP).

Bounded: one message in flight each way (the next is read once the last was written), at
most framing.MAX_OUTPUT bytes a message; an open connection counts as the cell's activity, as
the direct forward's does.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.websockets import WebSocket, WebSocketDisconnect

from devcell.errors import UsageError
from devcell.names import printable
from devcell.server import framing, problems

MAX_FORWARDS = 256
"""Port-forward connections open at once (as many as one direct forward's)."""
MAX_FORWARDS_PER_USER = 64
"""Of those, what one user who is not an admin may hold (a browser opens several)."""
MAX_CONNECTING = 8
"""Connections being made at once, each on a thread of its own limiter (app.Context.connecting):
one a cell never accepts holds its thread for netns' whole connect timeout."""
MAX_CONNECTING_PER_USER = 4
"""Of those, what one user's take; the others wait their turn (a refusal would fail a
browser's burst of connections)."""


def parse(query: QueryParams) -> int:
    """The port of a query (`port`, 1-65535); UsageError naming it."""
    given = query.get("port")
    if given is None:
        raise UsageError("give the cell's port to connect to: port=N (1-65535)")
    if not (given.isascii() and given.isdigit() and len(given) <= 5 and 1 <= int(given) <= 65535):
        raise UsageError(f"port {printable(given)!r}: a port number, 1-65535")
    return int(given)


def connect(state_dir: Path, principal: Any, cell: str, port: int,
            notes: list[str]) -> tuple[socket.socket, Any]:
    """The connection to `port` in `cell` and the cell's reference, once `principal` may
    forward its ports (as `devcell port-forward` makes it); what that command says on
    stderr meanwhile added to `notes`."""
    from devcell.api import port_forward
    from devcell.backends.interactive import forwarding
    from devcell.server import streams

    attached = streams.prepare(state_dir, principal, cell, verb="port_forward",
                               by="port-forward", notes=notes)
    try:
        backend = forwarding(attached.backend, attached.backend_name)
        return port_forward.open_connection(backend, attached.ref, port), attached.ref
    finally:
        attached.close()


def ssh(state_dir: Path, principal: Any, cell: str, notes: list[str]) -> tuple[socket.socket, Any]:
    """One SSH connection to `cell`, served as `devcell ssh-proxy` serves it (api.ssh.server,
    the cell's own SSH server, on a thread of its own) at the other end of the returned
    socket, once `principal` may ssh to it; its reference."""
    import threading

    from devcell.api.ssh import server
    from devcell.backends.interactive import interactive
    from devcell.server import streams
    from devcell.store import activity

    attached = streams.prepare(state_dir, principal, cell, verb="ssh", by="ssh", notes=notes)
    try:
        interactive(attached.backend, attached.backend_name)  # refused before the upgrade
        ours, theirs = socket.socketpair()
    except BaseException:
        attached.close()
        raise

    def serve() -> None:
        session = activity.open_session(state_dir, attached.ref.id, "ssh")
        try:
            server.serve(attached, state_dir, ours.fileno(), ours.fileno())
        finally:
            if session is not None:
                session.close()
            attached.close()
            ours.close()

    threading.Thread(target=serve, daemon=True, name="devcell-api-ssh").start()
    return theirs, attached.ref


async def relay(state_dir: Path, websocket: WebSocket, upstream: socket.socket, ref: Any,
                port: int | None, still_allowed: Any = None,
                notes: list[str] | None = None) -> None:
    """Accept the upgrade, send `notes` (NOTICE), relay the connection's bytes both ways,
    send STATUS and close (module docstring). `upstream` is owned from here on; `port`
    None: it is the cell's SSH server (ssh())."""
    from devcell.store import activity

    offered = websocket.scope.get("subprotocols") or []
    try:
        stream = await anyio.abc.SocketStream.from_socket(upstream)
    except BaseException:
        upstream.close()
        raise
    await websocket.accept(framing.PORT_SUBPROTOCOL if framing.PORT_SUBPROTOCOL in offered
                           else None)
    # the SSH server counts its own session (ssh())
    sessions = activity.Connections(state_dir, ref.id, "port-forward") if port else None
    if sessions is not None:
        await run_in_threadpool(sessions.opened)
    ended: set[str] = set()  # "in" (the client's writing), "out" (the port's)
    broken: list[dict[str, Any]] = []
    gone: list[bool] = []
    where = (f"port {port} in cell {printable(ref.name)}" if port is not None else
             f"the SSH server of cell {printable(ref.name)}")

    def failed(exc: BaseException) -> None:
        cause = exc.__cause__ if isinstance(exc, anyio.BrokenResourceError) else exc
        why = cause.strerror if isinstance(cause, OSError) and cause.strerror else "broken"
        broken.append(problems.document(502, "port-failed", "The connection failed",
                                        f"the connection to {where}: {why}"))

    async def down(scope: anyio.CancelScope) -> None:
        """The port's bytes to the client."""
        try:
            while True:
                try:
                    data = await stream.receive(framing.MAX_OUTPUT)
                except anyio.EndOfStream:
                    break
                await _send(websocket, framing.frame(framing.STDOUT, data), gone)
            await _send(websocket, framing.frame(framing.STDOUT, b""), gone)
            ended.add("out")
            if "in" not in ended:
                return
        except _Gone:
            pass
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            failed(exc)
        scope.cancel()

    async def up(scope: anyio.CancelScope) -> None:
        """The client's bytes to the port."""
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    gone.append(True)
                    break
                data = message.get("bytes")
                try:
                    channel, payload = framing.split(data) if data is not None else (-1, b"")
                except ValueError:
                    channel, payload = -1, b""
                if channel != framing.STDIN or "in" in ended:
                    broken.append(problems.document(
                        400, "bad-frame", "The stream is not valid",
                        "a binary message on channel 0 (the bytes to the port; empty: their "
                        "end, once) was expected" if data is not None else "text messages "
                        "are not part of a port-forward stream"))
                    break
                if payload:
                    await stream.send(payload)
                    continue
                await stream.send_eof()
                ended.add("in")
                if "out" in ended:
                    break
                # read on: the client leaving (or breaking the framing) still ends it
        except WebSocketDisconnect:
            gone.append(True)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            failed(exc)
        scope.cancel()

    async def check(scope: anyio.CancelScope) -> None:
        while still_allowed is not None:
            await anyio.sleep(1.0)
            if not await still_allowed():
                broken.append(problems.document(
                    401, "unauthenticated", "Not authenticated",
                    "the token is not valid (unknown, expired or revoked)"))
                scope.cancel()
                return

    try:
        async with stream:
            for note in notes or []:
                await websocket.send_bytes(framing.frame(framing.NOTICE, note.encode()))
            async with anyio.create_task_group() as group:
                group.start_soon(down, group.cancel_scope)
                group.start_soon(up, group.cancel_scope)
                group.start_soon(check, group.cancel_scope)
    except Exception as exc:  # noqa: BLE001  (the stream ends; the client told if it is there)
        from devcell.log import logger

        logger.warning("API port-forward to {} ended: {}: {}", where, type(exc).__name__,
                       printable(str(exc)))
        broken.append(problems.document(500, "internal", "Internal error",
                                        "the stream failed; the server's log says why"))
    finally:
        if sessions is not None:
            await run_in_threadpool(sessions.closed)
    if gone:
        return
    doc = broken[0] if broken else {"closed": True}
    try:
        await websocket.send_bytes(framing.status(doc))
        await websocket.close(1003 if doc.get("status") == 400 else 1000)
    except Exception:  # noqa: BLE001,S110  (the client is gone: nobody to tell)
        pass


class _Gone(Exception):
    """The client cannot be written to any more."""


async def _send(websocket: WebSocket, message: bytes, gone: list[bool]) -> None:
    try:
        await websocket.send_bytes(message)
    except Exception:  # noqa: BLE001  (closed, disconnected: the reader is gone)
        gone.append(True)
        raise _Gone from None
