"""The host's end of a vm cell's stream ports: one connection per process, channels over it.

A machine has PORTS virtio-serial ports for DevCell's stream helper (guest_streams.c), each a
unix socket QEMU listens on in the cell's owner-only directory (`streamsN.sock`). QEMU takes
one client a socket, so a process takes a port under an exclusive `flock` of `streamsN.lock`
and keeps it while it lives; every channel of that process (an SSH connection's shell, sftp
and forwards, or one `devcell exec`) is multiplexed over it (streams_codec.py). A reader
thread decodes the guest's frames and hands them to their channel; a channel holds at most
the credit it granted (WINDOW), so a guest that floods is caught lying, never buffered.

The guest is hostile: the greeting, an open and every send have a deadline, and a wedged,
silent or lying helper ends the connection with one BackendError line naming the cell.
"""

from __future__ import annotations

import collections
import fcntl
import os
import secrets
import socket
import threading
import time
from pathlib import Path

from devcell.backends.vm import streams_codec as codec
from devcell.backends.vm.drivers import qmp as vm_qmp
from devcell.errors import BackendError, BackendUnavailable
from devcell.log import logger

PORTS = 8
"""Stream ports a machine has: processes that can reach one cell's guest at once."""
HELLO_SECONDS = 20.0
"""How long the helper may take to answer a new connection (a busy TCG guest is slow)."""
OPEN_SECONDS = 30.0
"""How long the helper may take to start a command or connect."""
_DATA = (codec.Guest.OUT, codec.Guest.ERR)
CONTROL_FRAMES = 16
"""Frames other than output a channel may hold unread (an honest helper sends two or three
in a channel's life: OPENED, EOF, EXIT or CLOSED); more is a flood, refused."""
SEND_SECONDS = 30.0
"""How long a frame may wait for the guest to read its port: the helper always reads, and
payload is sent only within credit, so a longer wait is a wedged helper."""
IDLE_SECONDS = 60.0
"""How long a connection with no channel open keeps its port: a long-lived process (the
daemon installing dotfiles, running hooks) gives the port back for the developer's sessions,
while a burst of commands in one process still shares one greeting."""


def socket_name(index: int) -> str:
    return f"streams{index}.sock"


def port_name(index: int) -> str:
    return f"dev.devcell.streams.{index}"


class _Output:
    """Output of one stream queued on a channel: the payload of every frame of that type
    that came since the last other frame, merged, so a flood of one-byte frames costs the
    host its payload, not a Python object a frame."""

    __slots__ = ("type", "data")

    def __init__(self, kind: codec.Guest, payload: bytes) -> None:
        self.type = kind
        self.data = bytearray(payload)


class Channel:
    """One command or TCP connection: frames from the guest queued (within the credit this
    side granted, output of a stream merged until another frame comes), payload to the
    guest sent within the credit the guest granted."""

    def __init__(self, connection: Connection, number: int) -> None:
        self.connection = connection
        self.number = number
        self._frames: collections.deque[codec.Frame | _Output] = collections.deque()
        self._ready = threading.Condition()
        self._owed = codec.WINDOW  # what the guest may still send us
        self._may_send = codec.WINDOW
        self._controls = 0  # frames other than output queued
        self.closed = False

    # -- from the reader thread ------------------------------------------------------------

    def deliver(self, frame: codec.Frame) -> None:
        with self._ready:
            if frame.type is codec.Guest.CREDIT:
                self._may_send = min(self._may_send + codec.credit_of(frame.payload),
                                     codec.WINDOW)
            else:
                if frame.type in _DATA:
                    self._owed -= len(frame.payload)
                    if self._owed < 0:
                        raise codec.ProtocolError("the cell's stream helper sent more than "
                                                  "the window it was given")
                    self._queue_output(frame)
                else:
                    if self._controls >= CONTROL_FRAMES:
                        raise codec.ProtocolError(f"the cell's stream helper sent more than "
                                                  f"{CONTROL_FRAMES} frames unread")
                    self._controls += 1
                    self._frames.append(codec.Frame(frame.type, frame.channel,
                                                    frame.payload[:codec.MAX_MESSAGE * 4]))
            self._ready.notify_all()

    def _queue_output(self, frame: codec.Frame) -> None:
        """Into the queued output of its stream since the last other frame (stdout and
        stderr are separate streams, ordered only against the command's end)."""
        for item in reversed(self._frames):
            if not isinstance(item, _Output):
                break
            if item.type is frame.type:
                item.data += frame.payload
                return
        self._frames.append(_Output(frame.type, frame.payload))

    def wake(self) -> None:
        with self._ready:
            self._ready.notify_all()

    # -- from the channel's user -----------------------------------------------------------

    def next(self, timeout: float) -> codec.Frame | None:
        """The guest's next frame, None after `timeout`; BackendError once the connection
        broke. Payload taken is credited back to the guest."""
        with self._ready:
            if not self._frames and not self.connection.broken:
                self._ready.wait(timeout)
            if self._frames:
                item = self._frames.popleft()
                if isinstance(item, _Output):
                    frame = codec.Frame(item.type, self.number, bytes(item.data))
                else:
                    frame = item
                    self._controls -= 1
            else:
                self.connection.check()
                return None
        if frame.type in _DATA:
            with self._ready:
                self._owed += len(frame.payload)
            self.connection.send(codec.credit(self.number, len(frame.payload)))
        return frame

    def send(self, data: bytes) -> None:
        """Payload to the guest, in pieces, each waiting for the guest's credit."""
        view = memoryview(data)
        while view:
            with self._ready:
                while self._may_send == 0 and not self.closed:
                    self.connection.check()
                    self._ready.wait(1.0)
                if self.closed:
                    raise BrokenPipeError("the channel is closed")
                n = min(len(view), self._may_send, codec.CHUNK)
                self._may_send -= n
            self.connection.send(codec.frame(codec.Host.DATA, self.number, bytes(view[:n])))
            view = view[n:]

    def control(self, kind: codec.Host, payload: bytes = b"") -> None:
        if not self.closed:
            self.connection.send(codec.frame(kind, self.number, payload))

    def close(self) -> None:
        """Done with it: the guest kills what still runs and forgets it."""
        if self.closed:
            return
        try:
            self.control(codec.Host.CLOSE)
        except BackendError:
            pass
        self.closed = True
        self.wake()
        self.connection.forget(self.number)

    def opened(self, what: str) -> None:
        """Wait for the guest's OPENED; BackendError with its reason on FAILED or silence."""
        deadline = time.monotonic() + OPEN_SECONDS
        while True:
            frame = self.next(max(0.0, deadline - time.monotonic()))
            if frame is not None and frame.type is codec.Guest.OPENED:
                return
            if frame is not None and frame.type is codec.Guest.FAILED:
                self.closed = True
                self.connection.forget(self.number)
                raise BackendError(f"cell {self.connection.cell}: {what}: "
                                   f"{codec.message(frame.payload)}")
            if frame is not None:
                raise codec.ProtocolError(f"the cell's stream helper sent {frame.type.name} "
                                          "before the channel opened")
            if time.monotonic() >= deadline:
                self.close()
                raise BackendError(f"cell {self.connection.cell}: {what}: the stream helper "
                                   f"did not answer within {OPEN_SECONDS:.0f} s")


class Connection:
    """One stream port of one machine, taken by this process."""

    def __init__(self, directory: Path, cell: str, *, hello_seconds: float = HELLO_SECONDS
                 ) -> None:
        self.cell = cell
        self.broken: str | None = None
        self._channels: dict[int, Channel] = {}
        self._next = 1
        self._idle = 0
        self._closed = False
        """Bumped when the last channel goes and when a caller takes the connection."""
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._lock_fd, index = _take_port(directory, cell)
        try:
            self._sock = vm_qmp.connect(directory, socket_name(index), timeout=SEND_SECONDS)
            rest = self._greet(hello_seconds)
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._decoder = codec.Decoder()
        threading.Thread(target=self._read, args=(rest,), daemon=True,
                         name=f"devcell-vm-streams-{cell}").start()
        logger.bind(cell=cell, port=index).debug("stream port connected")

    def _greet(self, seconds: float) -> bytes:
        """HELLO with a fresh nonce; the bytes after the guest's SYNC carrying it."""
        nonce = secrets.token_bytes(codec.NONCE_BYTES)
        self._sock.sendall(codec.hello(nonce))
        deadline = time.monotonic() + seconds
        seen = bytearray()
        skipped = 0
        while True:
            at = codec.find_sync(seen, nonce)
            if at >= 0:
                return bytes(seen[at:])
            keep = len(codec.SYNC) + codec.NONCE_BYTES
            if len(seen) > keep:  # old output is skipped, never kept
                skipped += len(seen) - keep
                del seen[:-keep]
            if skipped > codec.SKIP_LIMIT:
                raise BackendError(f"cell {self.cell}: the stream helper sent more than "
                                   f"{codec.SKIP_LIMIT >> 20} MiB without answering")
            left = deadline - time.monotonic()
            if left <= 0:
                raise BackendUnavailable(
                    f"cell {self.cell}: the stream helper did not answer within "
                    f"{seconds:.0f} s (the guest is still booting, overloaded, or its "
                    "helper was stopped)")
            self._sock.settimeout(min(left, 1.0))
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                raise BackendError(f"cell {self.cell}: the stream port closed during the "
                                   "greeting (the machine stopped)")
            seen += data

    def _read(self, first: bytes) -> None:
        """Frames to their channels until the port closes. The socket's timeout is the
        senders' (SEND_SECONDS): a quiet guest is no fault here, so a timeout reads on."""
        try:
            data = first
            while True:
                for frame in self._decoder.feed(data):
                    channel = self._channels.get(frame.channel)
                    if channel is not None:
                        channel.deliver(frame)
                try:
                    data = self._sock.recv(65536)
                except TimeoutError:
                    if self.broken:
                        return
                    data = b""
                    continue
                if not data:
                    raise BackendError(f"cell {self.cell} is no longer running (asleep, "
                                       "stopped or deleted): its stream connection closed, "
                                       "and a command's end is unknown")
        except BackendError as exc:
            self._break(str(exc))
        except OSError as exc:
            self._break(f"cell {self.cell}: the stream connection broke ({exc})")

    def _break(self, why: str) -> None:
        """The first reason the connection ended is the one every channel reports."""
        if self.broken:
            return
        if not why.startswith(f"cell {self.cell}"):
            why = f"cell {self.cell}: {why}"
        self.broken = why
        for channel in list(self._channels.values()):
            channel.wake()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def check(self) -> None:
        if self.broken:
            raise BackendError(self.broken)

    def send(self, data: bytes) -> None:
        self.check()
        with self._send_lock:
            try:
                self._sock.settimeout(SEND_SECONDS)
                self._sock.sendall(data)
            except TimeoutError:
                self._break(f"the stream helper read nothing for {SEND_SECONDS:.0f} s "
                            "(wedged)")
            except OSError as exc:
                self._break(f"the stream connection broke ({exc})")
        self.check()

    def channel(self) -> Channel:
        with self._lock:
            if len(self._channels) >= 64:
                raise BackendUnavailable(f"cell {self.cell}: 64 channels are open on this "
                                         "connection; close some first")
            number = self._next
            self._next += 1
            made = Channel(self, number)
            self._channels[number] = made
            return made

    def forget(self, number: int) -> None:
        with self._lock:
            self._channels.pop(number, None)
            if self._channels:
                return
            self._idle += 1
            token = self._idle
        timer = threading.Timer(IDLE_SECONDS, _release_if_idle, (self, token))
        timer.daemon = True
        timer.start()

    def idle_since(self, token: int) -> bool:
        """Whether no channel was opened or left open since `token` was handed out (the
        caller holds the connections' lock, so none can be opened meanwhile)."""
        with self._lock:
            return not self._channels and self._idle == token

    def touch(self) -> None:
        """Handed to a caller about to open a channel: an idle release pending is void."""
        with self._lock:
            self._idle += 1

    def close(self) -> None:
        """Give the port back; once (an idle release and the owner may both ask)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._break("closed")
        self._sock.close()
        os.close(self._lock_fd)


def _take_port(directory: Path, cell: str) -> tuple[int, int]:
    """(the lock's descriptor, the port's index) of the first port no process holds."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for index in range(PORTS):
            fd = os.open(f"streams{index}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd, index
            except BlockingIOError:
                os.close(fd)
    finally:
        os.close(dir_fd)
    raise BackendUnavailable(f"cell {cell}: {PORTS} processes hold its stream ports (ssh "
                             "connections, exec); close one and try again")


_CONNECTIONS: dict[Path, Connection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def connection(directory: Path, cell: str, *, hello_seconds: float = HELLO_SECONDS
               ) -> Connection:
    """This process's connection to the machine in `directory`, made on first use and again
    after one broke."""
    with _CONNECTIONS_LOCK:
        known = _CONNECTIONS.get(directory)
        if known is not None and not known.broken:
            known.touch()
            return known
        if known is not None:
            known.close()
        made = Connection(directory, cell, hello_seconds=hello_seconds)
        _CONNECTIONS[directory] = made
        return made


def _release_if_idle(connection: Connection, token: int) -> None:
    """Close `connection` and give its port back if it stayed idle since `token`."""
    with _CONNECTIONS_LOCK:
        if not connection.idle_since(token):
            return
        for directory, known in list(_CONNECTIONS.items()):
            if known is connection:
                del _CONNECTIONS[directory]
    connection.close()
