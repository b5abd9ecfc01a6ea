"""exec as a WebSocket: GET /api/v1/cells/NAME/exec?command=...&stdin=...&tty=..., upgraded,
framed as server/framing.py says.

The command runs as `devcell exec` runs it, through the same library calls (api.attach: the
cell observed first; api.wake: a sleeping cell woken for exec; store.activity: the session
counted as the cell's activity; api.post_attach with a terminal; the backend's exec), in the
caller's name. Everything that can be refused is refused before the upgrade, as a problem
document with its status (the WebSocket denial response): who is asking, the policy's `exec`
verb on the cell (a developer only on their own cells and those shared with them), the
query, whether the cell can run commands. Once open, an error is the STATUS message's problem
document.

The backend's exec is blocking: it runs on a thread of its own limiter (MAX_STREAMS at once,
never the pool that list and get use), its output relayed from that thread through the event
loop, its input fed through a bounded queue. A client gone (or breaking the framing) hangs
the command up: it must not outlive everyone who could see it.
"""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO, cast

import anyio
import anyio.from_thread
import anyio.to_thread
from starlette.datastructures import QueryParams
from starlette.websockets import WebSocket, WebSocketDisconnect

from devcell.errors import NotFound, UsageError
from devcell.names import printable
from devcell.records import Record
from devcell.server import framing, problems

MAX_STREAMS = 32
"""exec streams open at once (each holds a thread while its command runs)."""
MAX_STREAMS_PER_USER = 8
"""exec and logs streams one user who is not an admin may hold at once (of MAX_STREAMS)."""
MAX_WORDS = 4096
HANG_UP_GRACE_S = 0.6
"""How long a command whose client went away is given to be hung up (see _Output)."""
STDIN_QUEUE = 16
"""STDIN messages held for the command before the client is made to wait."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")


NOTES_HEADER = "DevCell-Notes"
"""The logs answer's header of what `devcell logs` says on stderr before the lines (a runtime
that drifted, the cell's sidecars): a JSON list of lines, ASCII."""


def sidecar_note(ref: Any) -> list[str]:
    """Which sidecars the cell has, as `devcell logs` says it (their output is the
    engine's, not in these logs)."""
    from devcell.api import logs

    found = logs.sidecar_names(ref)
    if not found:
        return []
    shown = ", ".join(printable(n) for n in found)
    return [f"devcell: cell {printable(ref.name)} has sidecars ({shown}): devcell logs "
            f"{printable(ref.name)} --sidecar NAME shows one's output\n"]



def put_until_stopped(pieces: queue.Queue[Any], item: Any, stopped: threading.Event) -> None:
    """Put `item` on the bounded queue an answer's body is read from, waiting while it is
    full (the client reads slowly); BrokenPipeError once `stopped` is set (the client went
    away, or the answer ended), so the writing thread stops instead of waiting for ever."""
    while not stopped.is_set():
        try:
            pieces.put(item, timeout=0.2)
            return
        except queue.Full:
            continue
    raise BrokenPipeError("the client went away")

class ExecRequest(Record):
    """What the query asks: the command and how it runs (as `devcell exec -i -t -e -w -u`)."""

    argv: tuple[str, ...]
    stdin: bool = False
    tty: bool = False
    env: tuple[tuple[str, str], ...] = ()
    """Variables whose values the query gave (`env=NAME=VALUE`)."""
    env_sent: tuple[str, ...] = ()
    """Variables the query declared by name (`env=NAME`): their values arrive in the stream's
    first message (framing.ENV), never in the URL."""
    workdir: str | None = None
    user: str | None = None


def parse(query: QueryParams) -> ExecRequest:
    """The exec request of a query (`command` once per word); UsageError naming the
    parameter that cannot be used, with the words `devcell exec` would use."""
    argv = tuple(query.getlist("command"))
    if not argv:
        raise UsageError("give the command to run: command=WORD, once per word (e.g. "
                         "?command=ls&command=-la)")
    if len(argv) > MAX_WORDS or any("\0" in word for word in argv):
        raise UsageError(f"command: at most {MAX_WORDS} words, without NUL bytes")
    env, env_sent = [], []
    for item in query.getlist("env"):
        name, sep, value = item.partition("=")
        if not _ENV_NAME.fullmatch(name) or "\0" in value:
            shown = printable(name) + ("=…" if sep else "")  # never the value: a secret?
            raise UsageError(f"env {shown}: write NAME=VALUE, or NAME alone to send its "
                             "value in the stream's first message (a name of letters, "
                             "digits and _, not starting with a digit; no NUL byte)")
        if sep:
            env.append((name, value))
        else:
            env_sent.append(name)
    if len(set(env_sent)) != len(env_sent):
        raise UsageError("env: each name declared once")
    workdir = query.get("workdir")
    if workdir is not None and (not workdir.startswith("/") or "\0" in workdir):
        raise UsageError(f"workdir {printable(workdir)}: give an absolute path in the cell")
    user = query.get("user")
    if user is not None and not _USER.fullmatch(user):
        raise UsageError(f"user {printable(user)}: give a user name or uid, optionally :GROUP")
    return ExecRequest(argv, stdin=_flag(query, "stdin"), tty=_flag(query, "tty"),
                       env=tuple(env), env_sent=tuple(env_sent), workdir=workdir, user=user)


def _flag(query: QueryParams, name: str) -> bool:
    value = query.get(name)
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise UsageError(f"query parameter {name}: true or false, not {printable(value)!r}")


def prepare(state_dir: Path, principal: Any, cell: str, *, verb: str = "exec",
            wake_it: bool = True, notes: list[str] | None = None, by: str = "exec") -> Any:
    """The cell attached (api.attach), once `principal` may `verb` it (exec, logs,
    port_forward; `by` names it in the wake's words); with
    `wake_it` a sleeping cell is woken first, in the caller's name, as `devcell exec` wakes
    it (`devcell logs` reads a sleeping cell's logs as they were left). What `devcell exec`
    says of it on stderr meanwhile (the wake, a runtime that drifted) is added to `notes`,
    each a line (cli/cell_open.py's words)."""
    from devcell.api import attach, wake
    from devcell.auth import policy, resources
    from devcell.store import actor, objects
    from devcell.store.db import Database

    db = Database(state_dir, create=False)
    try:
        if objects.get(db.conn, "Cell", cell) is None:
            raise NotFound(f'cell "{cell}" not found{objects.suggestion(db.conn, "Cell", cell)}')
        policy.require(principal, policy.Verb(verb), resources.recorded(db.conn, "Cell", cell))
    finally:
        db.close()
    with actor.acting_as(principal.user):
        attached = attach.attach(state_dir, cell)
        if wake_it and wake.asleep(attached.phase):
            attached.close()
            said = [] if notes is None else notes
            said.append(f"cell {printable(cell)} is asleep; waking it for {by}...\n")
            woken = wake.wake(state_dir, cell, by=by)
            if woken.fallback is not None:
                said.append(f"cell {printable(cell)}: resuming its saved machine failed "
                            f"({printable(woken.fallback)}); booted cold from its kept "
                            "workspace instead: its processes were not restored\n")
            else:
                said.append(f"cell {printable(cell)} woken in {woken.seconds:.1f}s: "
                            f"{printable(woken.note)}\n")
            attached = attach.attach(state_dir, cell)
    if attached.drift is not None and notes is not None:
        name = printable(attached.ref.name)
        anyway = {"exec": "running the command anyway", "port_forward": "forwarding anyway"
                  }.get(verb, "showing its logs as last written")
        notes.append(f"warning: cell {name}: its runtime {attached.drift.seen} (recorded "
                     f"{attached.drift.recorded}); `devcell cell start {name}` repairs it; "
                     f"{anyway}\n")
    return attached


class _Output:
    """A command's stream as a file its backend writes: each write sent as messages of its
    channel from the command's thread, through the event loop (a client gone: BrokenPipe,
    which ends the command)."""

    def __init__(self, channel: int, websocket: WebSocket, hang_up: threading.Event) -> None:
        self.channel, self.websocket, self.hang_up = channel, websocket, hang_up

    def write(self, data: bytes) -> int:
        for at in range(0, len(data), framing.MAX_OUTPUT):
            message = framing.frame(self.channel, bytes(data[at:at + framing.MAX_OUTPUT]))
            try:
                anyio.from_thread.run(self.websocket.send_bytes, message)
            except Exception:  # noqa: BLE001  (closed, disconnected: the reader is gone)
                # Hung up first, and given the backend's hang-up watch a moment (it polls
                # every 0.2 s): the broken pipe alone would close the exec's connection, not
                # end the command and what it started.
                self.hang_up.set()
                time.sleep(HANG_UP_GRACE_S)
                raise BrokenPipeError("the client went away") from None
        return len(data)

    def flush(self) -> None:
        """Each write is sent at once."""


class _Input:
    """The command's standard input as a file its backend reads (read(n)), fed by the event
    loop from STDIN messages through a bounded queue; None in the queue is its end."""

    def __init__(self) -> None:
        self.queue: queue.Queue[bytes | None] = queue.Queue(STDIN_QUEUE)
        self.rest = b""
        self.ended = False

    def read(self, n: int = -1) -> bytes:
        if not self.rest and not self.ended:
            chunk = self.queue.get()
            if chunk is None:
                self.ended = True
            else:
                self.rest = chunk
        size = len(self.rest) if n is None or n < 0 else n
        out, self.rest = self.rest[:size], self.rest[size:]
        return out

    async def put(self, chunk: bytes | None) -> None:
        """Queue `chunk` (None: the end), waiting while the command reads too slowly."""
        while True:
            try:
                self.queue.put_nowait(chunk)
                return
            except queue.Full:
                await anyio.sleep(0.01)

    def end(self) -> None:
        """End the input now, from any thread (a command done, a client gone)."""
        try:
            self.queue.put_nowait(None)
        except queue.Full:
            pass  # the reader is behind; it is hung up with the command


def _run(state_dir: Path, attached: Any, request: ExecRequest, out: BinaryIO, err: BinaryIO,
         stdin: BinaryIO | None, terminal: Any, hang_up: threading.Event) -> int:
    """The command, as `devcell exec` runs it; its exit status."""
    from devcell.backends.interactive import ExecOptions
    from devcell.store import activity

    options = ExecOptions(env=request.env, workdir=request.workdir, user=request.user,
                          hang_up=hang_up)
    session = activity.open_session(state_dir, attached.ref.id, "exec")
    try:
        if request.tty:  # a developer attaching (api/post_attach.py)
            from devcell.api import post_attach

            post_attach.run(attached.interactive(), attached.ref, out=err, options=options)
        return int(attached.interactive().exec(attached.ref, list(request.argv), stdout=out,
                                               stderr=err, stdin=stdin, terminal=terminal,
                                               options=options))
    finally:
        if session is not None:
            session.close()
        attached.close()


async def relay(state_dir: Path, websocket: WebSocket, attached: Any, request: ExecRequest,
                limiter: anyio.CapacityLimiter, still_allowed: Any = None,
                notes: list[str] | None = None) -> None:
    """Accept the upgrade, send `notes` (NOTICE), run the command, relay its streams both
    ways, send its exit status (or the problem that stopped it) and close.
    `still_allowed()` (TCP: the token is still valid) is asked each second; no: the command
    is hung up."""
    from devcell.backends.interactive import Terminal

    try:  # until the command's thread takes `attached` over, it is closed here if this ends
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(framing.SUBPROTOCOL if framing.SUBPROTOCOL in offered else None)
        if request.env_sent:
            refused = None
            try:
                request = request.replace(env=(*request.env,
                                               *await _sent_env(websocket, request)))
            except UsageError as exc:
                refused = problems.document(400, "bad-frame", "The stream is not valid",
                                            str(exc))
            # The values may take ENV_MESSAGE_S: a token revoked meanwhile runs nothing.
            if refused is None and still_allowed is not None and not await still_allowed():
                refused = _revoked()
            if refused is not None:
                attached.close()
                try:
                    await websocket.send_bytes(framing.status(refused))
                    await websocket.close(1003 if refused["status"] == 400 else 1000)
                except Exception:  # noqa: BLE001,S110  (the client is gone: nobody to tell)
                    pass
                return
        for note in notes or []:
            await websocket.send_bytes(framing.frame(framing.NOTICE, note.encode()))
    except BaseException:  # a client gone before its command ran (cancelled, disconnected)
        attached.close()
        raise
    hang_up = threading.Event()
    stdin = _Input() if request.stdin else None
    window: list[tuple[int, int] | None] = [None]
    terminal = Terminal(lambda: window[0]) if request.tty else None
    broken: list[dict[str, Any]] = []  # the problem that ended the stream early

    async def command(scope: anyio.CancelScope) -> None:
        try:
            code = await anyio.to_thread.run_sync(
                _run, state_dir, attached, request,
                cast(BinaryIO, _Output(framing.STDOUT, websocket, hang_up)),
                cast(BinaryIO, _Output(framing.STDERR, websocket, hang_up)),
                cast(BinaryIO, stdin) if stdin is not None else None, terminal, hang_up,
                limiter=limiter)
            doc: dict[str, Any] = {"exitCode": code}
        except Exception as exc:  # noqa: BLE001  (each said in the STATUS message)
            doc = problems.of_error(exc)
        finally:
            if stdin is not None:
                stdin.end()
        if broken:
            doc = broken[0]
        try:
            await websocket.send_bytes(framing.status(doc))
            await websocket.close(1003 if broken and broken[0]["status"] == 400 else 1000)
        except Exception:  # noqa: BLE001,S110  (the client is gone: nobody to tell)
            pass
        scope.cancel()

    async def receive() -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("bytes")
                try:
                    channel, payload = framing.split(data) if data is not None else (-1, b"")
                except ValueError:
                    channel, payload = -1, b""
                if channel == framing.STDIN and stdin is not None:
                    await stdin.put(payload or None)
                elif channel == framing.RESIZE and terminal is not None:
                    window[0] = framing.size(payload) or window[0]
                    terminal.resized.set()
                elif channel not in (framing.STDIN, framing.RESIZE):
                    broken.append(problems.document(
                        400, "bad-frame", "The stream is not valid",
                        "a binary message on channel 0 (stdin) or 4 (resize) was expected"
                        if data is not None else "text messages are not part of an exec "
                        "stream"))
                    break
        except WebSocketDisconnect:
            pass
        hang_up.set()  # the client left, or broke the framing: the command ends
        if stdin is not None:
            stdin.end()

    async def check() -> None:
        while still_allowed is not None and not hang_up.is_set():
            await anyio.sleep(1.0)
            if not await still_allowed():
                broken.append(_revoked())
                hang_up.set()
                if stdin is not None:
                    stdin.end()
                return

    async with anyio.create_task_group() as group:
        group.start_soon(command, group.cancel_scope)
        group.start_soon(receive)
        group.start_soon(check)


def _revoked() -> dict[str, Any]:
    """The STATUS of a stream whose token stopped authenticating."""
    return problems.document(401, "unauthenticated", "Not authenticated",
                             "the token is not valid (unknown, expired or revoked)")


ENV_MESSAGE_S = 30.0
"""How long the first message (framing.ENV) of an exec that declared variables may take."""


async def _sent_env(websocket: WebSocket, request: ExecRequest) -> list[tuple[str, str]]:
    """The values of the variables the query declared by name, from the stream's first
    message; UsageError naming what is wrong (names only: a value may be a secret)."""
    with anyio.move_on_after(ENV_MESSAGE_S):
        message = await websocket.receive()
        data = message.get("bytes") if message["type"] == "websocket.receive" else None
        channel, payload = framing.split(data) if data else (-1, b"")
        if channel != framing.ENV:
            raise UsageError(f"the query declared env {', '.join(request.env_sent)}: the "
                             "first message must carry their values (channel 6, JSON "
                             '{"NAME": "value"})')
        try:
            values = json.loads(payload)
        except (ValueError, RecursionError):
            values = None
        if not isinstance(values, dict) or set(values) != set(request.env_sent):
            raise UsageError("the first message (channel 6) must be a JSON object with a "
                             f"value for each name the query declared "
                             f"({', '.join(request.env_sent)}) and no other")
        for name in request.env_sent:
            if not isinstance(values[name], str) or "\0" in values[name]:
                raise UsageError(f"env {name}: its value must be a string without NUL bytes")
        return [(name, values[name]) for name in request.env_sent]
    raise UsageError(f"the values of env {', '.join(request.env_sent)} did not arrive within "
                     f"{ENV_MESSAGE_S:.0f} s of the upgrade")


def denial(doc: dict[str, Any]) -> Any:
    """The problem document refusing an upgrade, as the HTTP response the client reads."""
    from starlette.responses import Response

    headers = {"WWW-Authenticate": 'Bearer realm="devcell"'} if doc["status"] == 401 else None
    return Response(json.dumps(doc), status_code=doc["status"], media_type=problems.MEDIA_TYPE,
                    headers=headers)


# -- logs ---------------------------------------------------------------------------------------


LOG_QUEUE = 16
"""Pieces of log held for a client reading slowly before the reader thread waits."""


def log_options(query: QueryParams) -> Any:
    """The logs request of a query, as `devcell logs` takes its flags (api.logs.Options)."""
    from devcell.api import log_lines, logs

    tail = query.get("tail")
    if tail is not None and not (tail.isascii() and tail.isdigit() and len(tail) <= 9):
        raise UsageError(f"tail: a number of lines, not {printable(tail)!r}")
    since = query.get("since")
    if since is not None:
        try:
            since = log_lines.since_cutoff(since, time.time())
        except ValueError as exc:
            raise UsageError(str(exc).replace("--since", "since")) from None
    return logs.Options(service=query.get("service"),
                        tail=int(tail) if tail is not None else None, since=since,
                        timestamps=_flag(query, "timestamps"), follow=_flag(query, "follow"))


class LogReader:
    """A cell's service logs read on a thread of their own (api.logs, as `devcell logs`
    reads them), handed to the event loop through a bounded queue; `stop()` (the client gone,
    the time out, the token revoked) ends the thread at its next turn."""

    def __init__(self, attached: Any, options: Any, service_logs: Any) -> None:
        self.attached, self.options, self.service_logs = attached, options, service_logs
        self.queue: queue.Queue[bytes | None] = queue.Queue(LOG_QUEUE)
        self.stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="devcell-api-logs").start()

    def stop(self) -> None:
        self.stopped.set()

    def _out(self, data: bytes) -> None:
        put_until_stopped(self.queue, data, self.stopped)

    def _run(self) -> None:
        from devcell.api import logs
        from devcell.log import logger

        try:
            logs.services(self.attached.ref, self.service_logs, self.options,
                          sink=logs.Sink(out=self._out, note=lambda text: None),
                          stop=self.stopped.is_set)
        except BrokenPipeError:
            pass
        except Exception as exc:  # noqa: BLE001  (the answer has begun: logged, then ended)
            logger.warning("API logs of cell {} ended: {}", printable(self.attached.ref.name),
                           printable(str(exc)))
        finally:
            self.attached.close()
            while not self.stopped.is_set():
                try:
                    self.queue.put(None, timeout=0.2)
                    break
                except queue.Full:
                    continue

    async def pieces(self, deadline: float, still_allowed: Any) -> Any:
        """The log's pieces as they come, until it ends, `deadline` (time.monotonic()) passes
        or `still_allowed()` says no (checked each second)."""
        checked = time.monotonic()
        while not self.stopped.is_set() and time.monotonic() < deadline:
            if time.monotonic() - checked >= 1.0:
                if not await still_allowed():
                    return
                checked = time.monotonic()
            try:
                piece = self.queue.get_nowait()
            except queue.Empty:
                await anyio.sleep(0.05)
                continue
            if piece is None:
                return
            yield piece
