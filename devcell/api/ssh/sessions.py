"""An SSH session channel (a shell, a command, a pseudo-terminal) run as the backend's exec.

The backend's exec is blocking and works on byte streams, asyncssh is asyncio: the command
runs on a worker thread, its standard input is an OS pipe the event loop fills as the client
sends (so a vm cell can read it to the end and a container's feeder gets keystrokes as they
come), and its output is written back through the event loop with the channel's flow
control (a writer waits while the client's window is full). A resized window sets the
Terminal's event, as `devcell exec -t` does. A client that goes away hangs the command up.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO

from devcell import names
from devcell.api import post_attach
from devcell.backends.interactive import ExecOptions, Interactive, Subsystems, Terminal
from devcell.errors import CapabilityMissing, DevCellError
from devcell.log import logger

if TYPE_CHECKING:
    import asyncssh

    from devcell.backends.base import CellRef

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
MAX_ENV = 64
SHELLS = ("/bin/bash", "/bin/sh")
"""A session's shell: bash where the image has it, else the POSIX shell every image has."""
_SHELL = 'for s in ' + " ".join(SHELLS) + '; do [ -x "$s" ] && exec "$s" -l; done; exit 127'
_COMMAND = ('for s in ' + " ".join(SHELLS) + '; do [ -x "$s" ] && exec "$s" -c "$1"; done; '
            'exit 127')


def argv_for(command: str | None) -> list[str]:
    """What a session runs: a login shell, or `command` given to the shell as OpenSSH's
    sshd does (`$SHELL -c COMMAND`), so scp, rsync and IDE installers work unchanged."""
    if command is None:
        return ["/bin/sh", "-c", _SHELL]
    return ["/bin/sh", "-c", _COMMAND, "devcell-ssh", command]


def environment(requested: Any, term_type: str | None) -> tuple[tuple[str, str], ...]:
    """The client's environment requests that are valid names with printable values (at most
    MAX_ENV), and TERM for a pseudo-terminal."""
    out: dict[str, str] = {}
    for raw_name, raw_value in dict(requested or {}).items():
        name = raw_name.decode(errors="replace") if isinstance(raw_name, bytes) else raw_name
        value = raw_value.decode(errors="replace") if isinstance(raw_value, bytes) \
            else str(raw_value)
        if _ENV_NAME.fullmatch(str(name)) and "\0" not in value and len(out) < MAX_ENV:
            out[str(name)] = value[:4096]
    if term_type:
        out["TERM"] = term_type[:64] if _ENV_NAME.fullmatch(term_type.replace("-", "_")) \
            else "xterm"
    return tuple(out.items())


class _Output:
    """A BinaryIO-shaped sink on the command's thread that writes through the event loop and
    waits for the channel to drain; raises BrokenPipeError once the client is gone."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stream: Any,
                 gone: threading.Event) -> None:
        self.loop = loop
        self.stream = stream
        self.gone = gone

    def write(self, data: bytes) -> int:
        if self.gone.is_set():
            raise BrokenPipeError("the SSH client went away")
        future = asyncio.run_coroutine_threadsafe(self._send(bytes(data)), self.loop)
        try:
            future.result()
        except (OSError, RuntimeError) as exc:
            self.gone.set()
            raise BrokenPipeError("the SSH client went away") from exc
        return len(data)

    async def _send(self, data: bytes) -> None:
        self.stream.write(data)
        await self.stream.drain()

    def flush(self) -> None:
        pass


async def run(process: asyncssh.SSHServerProcess[bytes], backend: Interactive, cell: CellRef,
              home: str) -> None:
    """Serve one session: its command in the cell, its exit status back to the client."""
    import asyncssh

    loop = asyncio.get_running_loop()
    log = logger.bind(cell=cell.name, op="ssh")
    term_type = process.term_type if process.get_terminal_type() else None
    size: list[tuple[int, int] | None] = [None]
    terminal = None
    if term_type:
        columns, rows, _, _ = process.term_size
        size[0] = (rows, columns) if rows and columns else None
        terminal = Terminal(lambda: size[0])
    argv = argv_for(process.command)
    if process.subsystem:
        try:
            served = backend.subsystem(cell, process.subsystem, home) \
                if isinstance(backend, Subsystems) else None
            if served is None:
                raise CapabilityMissing(f"subsystem {process.subsystem} is not offered here")
        except DevCellError as exc:
            process.stderr.write(f"devcell: {names.printable(str(exc))}\n".encode())
            process.exit(1)
            return
        argv, terminal = served, None  # a program in the cell speaks it (a vm's sftp-server)
    gone = threading.Event()
    options = ExecOptions(env=environment(process.env, term_type), workdir=home,
                          hang_up=gone)
    read_end, write_end = os.pipe()
    stdin: BinaryIO = open(read_end, "rb")  # buffered: read(n) returns n bytes or the end
    stdout = _Output(loop, process.stdout, gone)
    stderr = stdout if terminal is not None else _Output(loop, process.stderr, gone)

    attaching = process.command is None and not process.subsystem

    def command() -> int:
        try:
            if attaching:  # a developer's shell (api/post_attach.py), not a tool's command
                post_attach.run(backend, cell, out=stderr,  # type: ignore[arg-type]
                                options=options, raw_terminal=terminal is not None)
            return backend.exec(cell, argv, stdout=stdout, stderr=stderr,  # type: ignore[arg-type]
                                stdin=stdin, terminal=terminal, options=options)
        finally:
            stdin.close()

    log.debug("session {}", "shell" if process.command is None else "command")
    running = loop.run_in_executor(None, command)
    feeding = asyncio.ensure_future(_feed(process, write_end, size, terminal, loop))
    watching = asyncio.ensure_future(_watch_close(process, gone))
    try:
        code = await running
    except DevCellError as exc:
        code = 255 if not gone.is_set() else 0
        if not gone.is_set():
            process.stderr.write(f"devcell: {names.printable(str(exc))}\n".encode())
    except BrokenPipeError:
        code = 255
    finally:
        feeding.cancel()
        watching.cancel()
    if not gone.is_set():
        try:
            process.exit(code)
        except (OSError, asyncssh.Error):
            pass


async def _feed(process: asyncssh.SSHServerProcess[bytes], fd: int,
                size: list[tuple[int, int] | None], terminal: Terminal | None,
                loop: asyncio.AbstractEventLoop) -> None:
    """The client's input into the pipe, then its end; window changes to the Terminal.

    A thread of its own writes the pipe and alone closes it: the event loop never blocks on
    a command that does not read, and a descriptor is never closed under a pending write."""
    import asyncssh

    pipe = _PipeWriter(fd)
    try:
        while True:
            try:
                data = await process.stdin.read(65536)
            except asyncssh.TerminalSizeChanged as change:
                if terminal is not None and change.height and change.width:
                    size[0] = (change.height, change.width)
                    terminal.resized.set()
                continue
            except (asyncssh.BreakReceived, asyncssh.SignalReceived):
                continue
            if not data:
                break
            await loop.run_in_executor(None, pipe.queue.put, data)
    except (OSError, asyncssh.Error):
        pass
    finally:
        pipe.end()


class _PipeWriter:
    """Writes queued chunks to the pipe, then closes it; after a broken pipe (the command
    ended) it discards the rest, so a producer never waits on it for ever."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        threading.Thread(target=self._run, name="devcell-ssh-stdin", daemon=True).start()

    def end(self) -> None:
        threading.Thread(target=self.queue.put, args=(None,), daemon=True).start()

    def _run(self) -> None:
        broken = False
        try:
            while (data := self.queue.get()) is not None:
                if broken:
                    continue
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(self.fd, view):]
                except OSError:
                    broken = True
        finally:
            os.close(self.fd)


async def _watch_close(process: asyncssh.SSHServerProcess[bytes],
                       gone: threading.Event) -> None:
    await process.wait_closed()
    gone.set()


def factory(backend: Interactive, cell: CellRef, home: str
            ) -> Callable[[asyncssh.SSHServerProcess[bytes]], Any]:
    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        await run(process, backend, cell, home)
    return handle
