"""A vm cell's commands and TCP ports as the Interactive and Forwarding protocols want them.

`run` is `exec` over a stream channel (streams.py): the caller's standard input copied as it
comes (a daemon thread, os.read on its descriptor so keystrokes are not held for a full
buffer), the output written as it arrives, a terminal's size followed, a hang-up ending the
command, the exit status returned. `open_port` gives a socket whose peer is relayed to a TCP
connection the guest's helper made to its own 127.0.0.1: what `ssh -L` and `devcell
port-forward` use. Nothing here reads the guest's files.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from typing import BinaryIO

from devcell.backends.interactive import Terminal
from devcell.backends.vm import streams
from devcell.backends.vm import streams_codec as codec
from devcell.errors import BackendError

TICK = 0.2
"""How often a waiting command looks at its terminal's size and its caller's hang-up."""


def run(connection: streams.Connection, request: codec.ExecRequest, what: str, *,
        stdout: BinaryIO,
        stderr: BinaryIO, stdin: BinaryIO | None, terminal: Terminal | None,
        hang_up: threading.Event | None) -> int:
    """Run `request` in the guest; its exit status (128 + signal when killed)."""
    channel = connection.channel()
    try:
        channel.control(codec.Host.EXEC, codec.exec_payload(request))
        channel.opened(f"cannot run {what}")
        if stdin is not None:
            threading.Thread(target=_feed, args=(stdin, channel), daemon=True,
                             name="devcell-vm-stdin").start()
        else:
            channel.control(codec.Host.EOF)
        shown = terminal.size() if terminal is not None else None
        while True:
            if hang_up is not None and hang_up.is_set():
                return 255
            if terminal is not None and terminal.resized.is_set():
                terminal.resized.clear()
                size = terminal.size()
                if size and size != shown:
                    shown = size
                    channel.control(codec.Host.RESIZE, codec.resize_payload(*size))
            frame = channel.next(TICK)
            if frame is None:
                continue
            if frame.type is codec.Guest.OUT:
                stdout.write(frame.payload)
                stdout.flush()
            elif frame.type is codec.Guest.ERR:
                stderr.write(frame.payload)
                stderr.flush()
            elif frame.type is codec.Guest.EXIT:
                channel.closed = True
                connection.forget(channel.number)
                return codec.exit_status(frame.payload)
            else:
                raise codec.ProtocolError(f"the cell's stream helper sent {frame.type.name} "
                                          "to a command")
    finally:
        channel.close()


def _feed(source: BinaryIO, channel: streams.Channel) -> None:
    """The caller's input to the command, then its end (the command's stdin closed). A
    descriptor is waited on with select and read only while the channel is open, so a
    command that ended leaves no read pending on a descriptor its caller then closes."""
    try:
        fd: int | None = source.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    try:
        while not channel.closed:
            if fd is not None:
                if not select.select([fd], [], [], TICK)[0]:
                    continue
                if channel.closed:
                    return
                chunk = os.read(fd, codec.CHUNK)
            else:
                chunk = source.read(codec.CHUNK)
            if not chunk:
                channel.control(codec.Host.EOF)
                return
            channel.send(chunk)
    except (OSError, ValueError, BackendError):
        pass  # the command ended, or the connection broke, first


def open_port(connection: streams.Connection, port: int) -> socket.socket:
    """A socket relayed to the guest's 127.0.0.1:`port`; BackendError when nothing listens."""
    channel = connection.channel()
    try:
        channel.control(codec.Host.CONNECT, codec.connect_payload(port))
        channel.opened(f"port {port}")
    except BaseException:
        channel.close()
        raise
    ours, theirs = socket.socketpair()
    threading.Thread(target=_to_guest, args=(ours, channel), daemon=True,
                     name="devcell-vm-port-out").start()
    threading.Thread(target=_from_guest, args=(ours, channel), daemon=True,
                     name="devcell-vm-port-in").start()
    return theirs


def _to_guest(sock: socket.socket, channel: streams.Channel) -> None:
    try:
        while data := sock.recv(codec.CHUNK):
            channel.send(data)
        channel.control(codec.Host.EOF)
    except (OSError, BackendError):
        channel.close()


def _from_guest(sock: socket.socket, channel: streams.Channel) -> None:
    try:
        while not channel.closed:
            frame = channel.next(1.0)
            if frame is None:
                continue
            if frame.type is codec.Guest.OUT:
                sock.sendall(frame.payload)
            elif frame.type is codec.Guest.EOF:
                sock.shutdown(socket.SHUT_WR)
            else:  # CLOSED, or anything else: the connection in the guest is over
                break
    except (OSError, BackendError):
        pass
    finally:
        channel.close()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
