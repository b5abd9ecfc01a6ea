"""`exec`, `logs`, `port-forward` and `ssh-proxy` through a server (cli/remote.py).

exec: the command line checked as cmd_exec checks it, then the exec WebSocket (server/
streams.py, framing.py): the command's output written as it arrives (stdout, stderr; with
-t both on stdout), DevCell's own notes (a cell woken for it, a runtime that drifted) on
stderr as `exec` says them, -i's input sent as it is read (then its end), -t's terminal raw
and its size sent whenever it changes; the exit status is the command's. Ctrl-C (without
-t) or a closed connection hangs the command up, as on the server's machine.

logs: GET /api/v1/cells/NAME/logs (the same code as `devcell logs`), its lines written as
they come; -f goes on until Ctrl-C (or the server's hour).

port-forward: the local ports listened on as `devcell port-forward` listens (api.port_forward.
Listener, loopback only), each accepted connection relayed through its own port-forward
WebSocket (server/forward.py); a connection the server refuses (a port nothing listens on)
is said on stderr and closed, and the forward goes on.

ssh-proxy: standard input and output relayed through the cell's SSH stream (the server runs
the SSH server `ssh-proxy` runs on its machine), for OpenSSH's ProxyCommand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from devcell import errors
from devcell.errors import UsageError
from devcell.names import printable, printable_text

READ_BYTES = 64 << 10
"""What -i reads of standard input at once (one STDIN message)."""


def run_exec(args: argparse.Namespace) -> int:
    from devcell.cli import cmd_exec

    argv = cmd_exec.command(args)
    if (args.stdin or args.tty) and sys.stdin is None:
        raise UsageError("-i and -t need a standard input, and this process has none")
    if args.tty and not sys.stdin.isatty():
        raise UsageError("the input device is not a terminal: -t needs one (to pipe input "
                         "into the command, use -i without -t)")
    settings = cmd_exec.exec_options(args)
    ws = args.remote.exec_socket(
        args.cell, argv, stdin=args.stdin, tty=args.tty,
        env=list(settings.env) if settings else None,
        workdir=settings.workdir if settings else None,
        user=settings.user if settings else None)
    with ws:
        if not args.tty:
            return _relay(ws, args, None)
        with cmd_exec._terminal(raw=args.stdin) as terminal:
            return _relay(ws, args, terminal)


def _relay(ws: Any, args: argparse.Namespace, terminal: Any) -> int:
    """The stream until its STATUS: output written, input and window sizes sent."""

    from devcell.server import framing

    if args.stdin:
        threading.Thread(target=_feed, args=(ws,), daemon=True,
                         name="devcell-exec-stdin").start()
    if terminal is not None:
        threading.Thread(target=_sizes, args=(ws, terminal), daemon=True,
                         name="devcell-exec-resize").start()
    out = {framing.STDOUT: sys.stdout.buffer, framing.STDERR: sys.stderr.buffer}
    sys.stdout.flush()
    sys.stderr.flush()
    status = relay_output(ws, args.cell, out)
    assert status is not None  # nothing hangs this stream up
    return status


HANG_UP_POLL_SECONDS = 0.25
"""How often relay_output looks at its hang-up while the command is quiet."""


def relay_output(ws: Any, cell: str, out: dict[int, Any],
                 hang_up: threading.Event | None = None) -> int | None:
    """The exec stream's output written to `out` (by channel) until its STATUS: the
    command's exit status; None once `hang_up` is set (the stream is then closed by its
    owner, and the server ends the command). DevCell's notices go to stderr, escaped."""
    from websockets.exceptions import ConnectionClosed

    from devcell.client import exec_status
    from devcell.server import framing

    while True:
        if hang_up is not None and hang_up.is_set():
            return None
        try:
            message = ws.recv(timeout=None if hang_up is None else HANG_UP_POLL_SECONDS)
        except TimeoutError:
            continue
        except ConnectionClosed:
            raise errors.TemporaryError(f"exec in cell {printable(cell)}: the stream ended "
                                        "without an exit status") from None
        if not isinstance(message, bytes) or not message:
            continue
        channel, payload = framing.split(message)
        if channel in out:
            out[channel].write(payload)
            out[channel].flush()
        elif channel == framing.NOTICE:  # DevCell's own words, escaped (the command's are not)
            sys.stderr.write(printable_text(payload.decode("utf-8", "replace")))
            sys.stderr.flush()
        elif channel == framing.STATUS:
            return exec_status(bytes(payload))


def _feed(ws: Any) -> None:
    """-i: standard input sent as it is read, then its end (an empty STDIN message)."""
    from websockets.exceptions import ConnectionClosed

    from devcell.server import framing

    fd = sys.stdin.fileno()
    try:
        while True:
            chunk = os.read(fd, READ_BYTES)
            ws.send(framing.frame(framing.STDIN, chunk))
            if not chunk:
                return
    except (ConnectionClosed, OSError):
        return  # the command ended before reading it all


def _sizes(ws: Any, terminal: Any) -> None:
    """-t: the window's size, at once and whenever it changes (SIGWINCH sets `resized`)."""
    from websockets.exceptions import ConnectionClosed

    from devcell.server import framing

    try:
        while True:
            size = terminal.size()
            if size is not None:
                rows, columns = size
                ws.send(framing.frame(framing.RESIZE, json.dumps(
                    {"rows": rows, "columns": columns}).encode()))
            terminal.resized.wait()
            terminal.resized.clear()
    except (ConnectionClosed, OSError):
        return


def run_logs(args: argparse.Namespace) -> int:
    from devcell.api import log_lines

    if args.sidecar is not None:
        raise UsageError("--sidecar is not served through the DevCell API yet: run the "
                         "command on the server's machine, or without it")
    if args.since is not None:
        try:  # refused here as on the server's machine; the server takes its cutoff
            log_lines.since_cutoff(args.since, time.time())
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    lines = args.remote.logs(args.cell, args.service,
                             tail=None if args.tail < 0 else args.tail, since=args.since,
                             timestamps=args.timestamps, follow=args.follow,
                             on_notes=lambda notes: sys.stderr.write("".join(notes)))
    try:
        for line in lines:
            sys.stdout.write(line)
            if args.follow:
                sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C ends a follow normally
        if not args.follow:
            raise
    finally:
        lines.close()
    return 0


def run_port_forward(args: argparse.Namespace) -> int:
    """`devcell port-forward` through a server: the same ports and words as on the state
    directory (cmd_port_forward), each accepted connection its own WebSocket (Client.
    relay_port); until Ctrl-C."""
    from devcell.api import port_forward

    mappings = port_forward.parse(args.ports)
    address = port_forward.loopback(args.address)
    client = args.remote

    def said(message: str) -> None:
        sys.stderr.write(f"error: {printable(message)}\n")
        sys.stderr.flush()

    client.get("cells", args.cell)  # a cell not found (or not to be read) said before listening
    listener = port_forward.Listener(
        mappings, address, said,
        lambda sock, remote: client.relay_port(args.cell, remote, sock, said))
    try:
        shown = f"[{address}]" if ":" in address else address
        for item in listener.listening:
            sys.stdout.write(f"Forwarding from {shown}:{item.local} -> {item.remote}\n")
        sys.stdout.flush()
        try:
            listener.serve(threading.Event())
        except KeyboardInterrupt:  # Ctrl-C is how a forward ends, as kubectl's
            return 0
    finally:
        listener.close()
    return 0


class _Stdio:
    """Standard input and output as the one connection `Client.relay` reads and writes."""

    def recv(self, n: int) -> bytes:
        return os.read(0, n)

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]

    def shutdown(self, how: int) -> None:
        import socket

        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            try:
                os.close(1)
            except OSError:
                pass


def run_ssh_proxy(args: argparse.Namespace) -> int:
    """`devcell ssh-proxy CELL` through a server: standard input and output relayed through
    the cell's SSH stream (server/forward.py's ssh), OpenSSH's ProxyCommand as on the server's
    machine; a refusal said on stderr, exit 1."""
    if sys.stdin is None or sys.stdout is None:
        raise UsageError("ssh-proxy speaks SSH on its standard input and output; OpenSSH "
                         "runs it as a ProxyCommand (see devcell ssh-config)")
    ws = args.remote.ssh_socket(args.cell)
    failed: list[str] = []

    def said(message: str) -> None:
        failed.append(message)
        sys.stderr.write(f"error: {printable(message)}\n")
        sys.stderr.flush()

    args.remote.relay(ws, _Stdio(), said)
    return 1 if failed else 0  # a stream that broke (no status, another's) exited 0
