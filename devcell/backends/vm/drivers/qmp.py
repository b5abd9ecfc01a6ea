"""JSON to QEMU (QMP, a unix socket) and to the guest agent (qemu-ga), with timeouts.

The agent's port is a pair of FIFOs QEMU holds open for its whole life (`-chardev pipe`:
`ga.in` to the guest, `ga.out` from it), so the guest's end of the port never sees its host
leave: qemu-ga waits in a read and answers a new client at once. Behind a unix socket it
was told of every client that left and then looked for the next one only every 100 ms
(measured: the first answer to a new client 0.07-0.10 s late, bench/vm_wake.py). Clients take
turns by an flock on `ga.lock`, one request and its reply at a time (each request's id is
unique to its connection, so a reply is only ever taken by its asker): a long `exec`
polling its command no longer keeps every other command of that machine waiting, as one
socket client did. Machines started before this kept their `ga.sock`, which still works.

Every path lives in the cell's owner-only directory. Their paths can be longer than a
sockaddr_un holds (108 bytes) under a deep state directory, so they are reached through
`/proc/self/fd/<dir>/<name>`: the directory is opened once (without following links) and the
short path resolves through it. Every read has a deadline, so a wedged QEMU or a guest that
never answers is a BackendError, not a hang. Replies are read line by line with a bound on a
line's length: the guest agent speaks for the guest, which is hostile. So nothing it sends
leaves here as anything but a BackendError (a TimeoutError too, for callers that wait): JSON
nested too deep, an error that is not an object, a reply to another request (each request
carries an id qemu-ga echoes), and its words are escaped and cut before they join a message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from devcell import names
from devcell.errors import BackendError, BackendUnavailable
from devcell.log import logger

SYNC_RETRY = 0.05
SYNC_FAST = 2.0
MAX_LINE = 64 << 20
"""A reply longer than this is refused (guest-exec output is at most 16 MiB, base64)."""
MAX_CONTAINERS = 4096
"""JSON objects and arrays a reply may hold: the answers DevCell asks for hold a few (output
is base64 in one string). A line of `[{},{},...]` under MAX_LINE would otherwise be parsed
whole: 30 MB of it is ten million objects, 1.5 GB of host memory for one cell's exec."""
MAX_WORDS = 300
"""How much of an error's description (the guest's words) joins a message."""
AGENT_PIPE = "ga"
"""QEMU's `-chardev pipe,path=ga`: it opens the FIFOs ga.in (host to guest) and ga.out."""
AGENT_LOCK = "ga.lock"
LOCK_POLL = 0.01
TURN_SECONDS = 120.0
"""How long an exchange waits for other clients' turns (a 16 MiB input or output takes
seconds): apart from its own timeout, which starts with its turn."""
FROZEN_POLL = 0.05


class AgentSilent(BackendUnavailable):
    """The agent never answered a sync within the time given: still booting, stopped, hung,
    or its port flooded by the guest."""


class ChannelTimeout(BackendUnavailable, TimeoutError):
    """The other end did not answer in time: a BackendError for the CLI and the engine (a
    traceback otherwise), a TimeoutError for the callers that wait and retry."""


def said(value: object) -> str:
    """What the other end said, for a message: escaped, at most MAX_WORDS characters."""
    text = value if isinstance(value, str) else repr(value)
    text = names.printable(text[:MAX_WORDS])
    return text + ("..." if len(text) > MAX_WORDS else "")


def refusal(error: object) -> str:
    """The description of a QMP/agent error reply, whatever shape the guest gave it."""
    return said(error.get("desc", error) if isinstance(error, dict) else error)


def connect(directory: Path, name: str, *, timeout: float) -> socket.socket:
    """A connected stream socket to `directory/name`, however long that path is."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(f"/proc/self/fd/{dir_fd}/{name}")
        except OSError:
            sock.close()
            raise
        return sock
    finally:
        os.close(dir_fd)


class Stream(Protocol):
    """What JsonChannel reads and writes: a socket, or the agent's FIFOs (PipeStream)."""

    def settimeout(self, value: float | None, /) -> None: ...
    def sendall(self, data: bytes, /) -> None: ...
    def recv(self, size: int, /) -> bytes: ...
    def close(self) -> None: ...


def make_agent_pipes(directory: Path) -> None:
    """Fresh, empty FIFOs for a QEMU about to start in `directory` (bytes a previous machine
    or client left in the old ones go with them); made without following a link."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in (f"{AGENT_PIPE}.in", f"{AGENT_PIPE}.out"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
            os.mkfifo(name, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def has_agent_pipes(directory: Path) -> bool:
    """Whether the machine in `directory` was started with its agent on FIFOs: anything at
    ga.in says so (what is not a FIFO there is refused when opened, never taken for a socket
    machine's missing socket)."""
    try:
        os.lstat(directory / f"{AGENT_PIPE}.in")
        return True
    except OSError:
        return False


BROKEN = (errno.ELOOP, errno.EINVAL, errno.EISDIR)
"""Opening the agent's FIFOs or lock failed for good: a link where one belongs (O_NOFOLLOW),
or something of the wrong type. Never retried: no wait makes it right."""


class PipeStream:
    """The host's end of the agent's FIFOs, with the socket calls JsonChannel makes.

    Opened without blocking: the write end fails with ENXIO while no QEMU holds the FIFOs
    (not started, or gone), as a socket's connect is refused. QEMU holds both FIFOs open
    read-write, so this end never sees an end of file while it runs; once it has quit, a
    read finds one and a write fails (EPIPE): the connection closed. Each open FIFO end is
    checked to be a FIFO (fstat), so nothing else is ever read or written through here.
    """

    def __init__(self, directory: Path) -> None:
        self.timeout: float | None = None
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fds: list[int] = []
        try:
            fds.append(os.open(AGENT_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                               0o600, dir_fd=dir_fd))
            if not stat.S_ISREG(os.fstat(fds[0]).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", AGENT_LOCK)
            fds.append(os.open(f"{AGENT_PIPE}.out", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW
                               | os.O_CLOEXEC, dir_fd=dir_fd))
            fds.append(os.open(f"{AGENT_PIPE}.in", os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW
                               | os.O_CLOEXEC, dir_fd=dir_fd))
            for fd, name in zip(fds[1:], (f"{AGENT_PIPE}.out", f"{AGENT_PIPE}.in"), strict=True):
                if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                    raise OSError(errno.EINVAL, "the guest agent's port is not a FIFO", name)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        finally:
            os.close(dir_fd)
        self.lock, self.from_guest, self.to_guest = fds

    @contextlib.contextmanager
    def turn(self, deadline: float, *, waiting: Callable[[], None] = lambda: None
             ) -> Iterator[bool]:
        """The port to ourselves for one exchange (a sync, or a request and its reply):
        another client's is waited for until `deadline`. Yields whether the exchange before
        ended whole: one that did not (its client died or gave up mid-request or mid-reply:
        the kernel ends a dead client's turn) may have left half a request in the FIFO,
        or a reply no one will read, and the next one starts by syncing again. Marked in
        ga.lock itself: "1" while an exchange runs, "0" once it ended whole. `waiting` is
        called between looks at the lock (it raises to give up: the machine stopped)."""
        while True:
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ChannelTimeout("another process holds this machine's guest agent "
                                         f"({AGENT_LOCK}) and did not let it go in time"
                                         ) from None
                waiting()
                time.sleep(LOCK_POLL)
        try:
            whole = os.pread(self.lock, 1, 0) != b"1"
            os.pwrite(self.lock, b"1", 0)
            yield whole
            os.pwrite(self.lock, b"0", 0)  # not reached when the exchange raised
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)

    def settimeout(self, value: float | None, /) -> None:
        self.timeout = value

    def _wait(self, fd: int, event: int) -> None:
        poller = select.poll()
        poller.register(fd, event)
        timeout_ms = None if self.timeout is None else max(0, int(self.timeout * 1000))
        if not poller.poll(timeout_ms):
            raise TimeoutError("timed out")

    def recv(self, size: int, /) -> bytes:
        while True:
            try:
                return os.read(self.from_guest, size)
            except BlockingIOError:
                self._wait(self.from_guest, select.POLLIN)

    def sendall(self, data: bytes, /) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.to_guest, view):]
            except BlockingIOError:
                self._wait(self.to_guest, select.POLLOUT)

    def close(self) -> None:
        for fd in (self.to_guest, self.from_guest, self.lock):
            os.close(fd)


class JsonChannel:
    """One JSON document per line, each read with a deadline."""

    def __init__(self, sock: Stream, what: str) -> None:
        self.sock = sock
        self.what = what
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, message: dict[str, Any], *, timeout: float = 10.0) -> None:
        self.send_bytes(json.dumps(message).encode() + b"\n", timeout=timeout)

    def send_bytes(self, data: bytes, *, timeout: float) -> None:
        """All of `data`, within `timeout` (a peer that reads nothing fills the socket)."""
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise ChannelTimeout(f"{self.what} did not read a request in time") from None
        except OSError as exc:
            raise BackendUnavailable(f"{self.what} closed the connection "
                                     f"({exc.strerror or exc})") from None

    def read_line(self, deadline: float) -> bytes:
        # Only the bytes not searched yet are searched: a 64 MiB line costs one pass, not
        # one per chunk.
        searched = 0
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout(f"{self.what} did not answer in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise ChannelTimeout(f"{self.what} did not answer in time") from None
            except OSError as exc:
                raise BackendUnavailable(f"{self.what} closed the connection "
                                         f"({exc.strerror or exc})") from None
            if not chunk:
                raise BackendUnavailable(f"{self.what} closed the connection")
            self.buffer += chunk
            if len(self.buffer) > MAX_LINE:
                self.buffer = bytearray()
                raise BackendError(f"{self.what} sent a reply longer than {MAX_LINE} bytes")
        # Copied once through a view (a slice of the bytearray would be a second copy first):
        # a line in memory costs the buffer and itself, not three times its size.
        with memoryview(self.buffer) as view, view[:end] as part:
            line = bytes(part)
        del self.buffer[:end + 1]
        return line

    def read_json(self, deadline: float) -> dict[str, Any]:
        while True:
            line = self.read_line(deadline).strip()
            if not line:
                continue
            if too_many_containers(line):
                raise BackendError(f"{self.what} sent a reply holding more than "
                                   f"{MAX_CONTAINERS} JSON objects and arrays; not read")
            try:
                value = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested deep
                raise BackendError(f"{self.what} sent something that is not JSON") from None
            if not isinstance(value, dict):
                raise BackendError(f"{self.what} sent a JSON value that is not an object")
            return value


class Qmp:
    """QEMU's machine protocol: capabilities negotiated on connect, then commands."""

    def __init__(self, directory: Path, *, timeout: float = 10.0) -> None:
        try:
            sock = connect(directory, "qmp.sock", timeout=timeout)
        except OSError as exc:
            raise BackendUnavailable(f"cannot reach QEMU's monitor in {directory}: "
                                     f"{exc.strerror or exc}") from None
        self.channel = JsonChannel(sock, "QEMU's monitor")
        self.timeout = timeout
        self.channel.read_json(time.monotonic() + timeout)  # the greeting
        self.command("qmp_capabilities")

    def __enter__(self) -> Qmp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def command(self, name: str, timeout: float | None = None, **arguments: Any) -> Any:
        message: dict[str, Any] = {"execute": name}
        if arguments:
            message["arguments"] = arguments
        self.channel.send(message)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self.channel.read_json(deadline)
            if "event" in reply:
                logger.bind(event=reply.get("event")).debug("qmp event")
                continue
            if "error" in reply:
                raise BackendError(f"QEMU refused {name}: {refusal(reply['error'])}")
            return reply.get("return")


def too_many_containers(line: bytes) -> bool:
    """More `{` and `[` than MAX_CONTAINERS (counted in C, strings included: an upper bound)."""
    return line.count(b"{") + line.count(b"[") > MAX_CONTAINERS


def gone_unless(alive: Callable[[], bool] | None) -> None:
    """Between attempts to reach an agent: a machine that is no longer running (slept,
    stopped, deleted meanwhile) will never answer, so waiting out the boot timeout for it
    would only keep the caller (a `logs -f`, an exec) hanging."""
    if alive is not None and not alive():
        raise BackendUnavailable("the machine is not running, so its guest agent cannot "
                                 "answer")


def file_handle(reply: Any) -> int:
    """guest-file-open's answer, checked: the guest's word that it is a handle."""
    if type(reply) is not int or reply < 0:
        raise BackendError(f"the guest agent answered guest-file-open with {said(reply)}, "
                           "not a handle")
    return reply


class Agent:
    """qemu-ga in the guest, over its virtio-serial port.

    The port keeps whatever an earlier client left unread, so every connection starts with
    guest-sync-delimited: the agent answers after a 0xFF byte, everything before it is stale.
    On the FIFOs (PipeStream) clients take turns one exchange at a time, and an exchange
    after one that did not end whole (any client's) syncs again first.
    """

    requests = 0
    """Requests sent on this connection: each one's id."""
    alive: Callable[[], bool] | None = None
    """Whether the machine still runs: a wait for the agent ends once it does not."""

    def __init__(self, directory: Path, *, timeout: float,
                 alive: Callable[[], bool] | None = None) -> None:
        deadline = time.monotonic() + timeout
        self.alive = alive
        self.session = os.urandom(4).hex()
        """In every request's id: a reply is taken only by the connection that asked."""
        self.channel = JsonChannel(self._connect(directory, deadline, alive),
                                   "the guest agent")
        try:
            asked = time.monotonic()
            with self._turn(asked + TURN_SECONDS):
                self._sync(deadline + (time.monotonic() - asked))  # others' turns not counted
        except BaseException:
            self.channel.close()
            raise

    @staticmethod
    def _connect(directory: Path, deadline: float, alive: Callable[[], bool] | None
                 ) -> Stream:
        while True:
            try:
                if has_agent_pipes(directory):
                    return PipeStream(directory)
                return connect(directory, "ga.sock", timeout=2.0)
            except OSError as exc:
                what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
                if exc.errno in BROKEN:
                    raise BackendError(f"cannot reach the guest agent in {directory}: {what}"
                                       ) from None
                if time.monotonic() > deadline:
                    raise BackendUnavailable(f"cannot reach the guest agent in {directory}: "
                                             f"{what}") from None
                gone_unless(alive)
                time.sleep(0.1)

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    @contextlib.contextmanager
    def _turn(self, deadline: float) -> Iterator[bool]:
        """One exchange's turn on the FIFOs, yielding whether the one before ended whole; on
        a socket (one client at a time) always whole."""
        stream = self.channel.sock
        if not isinstance(stream, PipeStream):
            yield True
            return
        with stream.turn(deadline, waiting=lambda: gone_unless(self.alive)) as whole:
            yield whole

    @contextlib.contextmanager
    def _exchange(self, timeout: float) -> Iterator[float]:
        """A turn for one request and its reply (waited for up to TURN_SECONDS), synced again
        first when the exchange before (any client's, this one's too) did not end whole;
        yields the exchange's deadline, `timeout` from the start of its turn."""
        with self._turn(time.monotonic() + TURN_SECONDS) as whole:
            deadline = time.monotonic() + timeout
            if not whole:
                self.channel.buffer.clear()
                self._sync(deadline, silent="the guest agent did not answer (nor the request "
                                            "before, which was given up)")
            yield deadline

    def _sync(self, deadline: float, *,
              silent: str = "the guest agent did not answer: the machine is still booting, "
                            "or its agent is not running") -> None:
        token = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
        # 0xFF first: it resets the agent's parser, whatever half a request was left in it.
        request = b"\xff" + json.dumps({"execute": "guest-sync-delimited",
                                         "arguments": {"id": token}}).encode() + b"\n"
        began = time.monotonic()
        while True:
            try:
                # A guest whose agent is not up yet reads nothing: the send itself can stall.
                self.channel.send_bytes(request, timeout=1.0)
                # Short: a request sent while a just-resumed guest reopens its port is lost,
                # and the agent answers one sent after it has. Every SYNC_RETRY for the first
                # SYNC_FAST seconds (a resume), then once a second (a machine still booting).
                fast = time.monotonic() - began < SYNC_FAST
                wait = SYNC_RETRY if fast else 1.0
                if self._synced(token, min(deadline, time.monotonic() + wait)):
                    break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise AgentSilent(silent) from None
        # Requests sent while the agent was starting may still be answered (or refused, for
        # the 0xFF bytes): one more round without 0xFF puts every stale reply behind us.
        token += 1
        self.channel.send({"execute": "guest-sync-delimited", "arguments": {"id": token}})
        # Within the caller's time (a sleep gives its held connection 1 s, not 11), but never
        # less than half a second: the agent has just answered the first round.
        now = time.monotonic()
        self._synced(token, min(now + 10.0, max(deadline, now + 0.5)))

    def _synced(self, token: int, deadline: float) -> bool:
        while True:
            line = self.channel.read_line(deadline).rpartition(b"\xff")[2].strip()
            if too_many_containers(line):
                continue  # not a sync's answer, and not worth parsing
            try:
                reply = json.loads(line) if line else None
            except (ValueError, RecursionError):
                continue  # the tail of a reply an earlier client left unread
            if isinstance(reply, dict) and reply.get("return") == token:
                return True

    def command(self, name: str, timeout: float = 10.0, **arguments: Any) -> Any:
        """The agent's answer to `name`; replies to other requests (qemu-ga echoes each
        request's id) are skipped until the deadline. The time waited for other clients'
        turns (TURN_SECONDS at most) is not taken from `timeout`. Refused because the guest's
        filesystems are frozen (a checkpoint between two of an exec's polls: its agent then
        answers only a few calls), it is asked again until the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self._ask(name, timeout, arguments)
            refused = "error" in reply
            if not refused or not _frozen(reply["error"]) or time.monotonic() > deadline:
                break
            time.sleep(FROZEN_POLL)
        if refused:
            raise BackendError(f"the guest agent refused {name}: {refusal(reply['error'])}")
        return reply.get("return")

    def _ask(self, name: str, timeout: float, arguments: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        request_id = f"devcell-{self.session}-{self.requests}"
        message: dict[str, Any] = {"execute": name, "id": request_id}
        if arguments:
            message["arguments"] = arguments
        with self._exchange(timeout) as deadline:
            self.channel.send(message, timeout=max(0.05, deadline - time.monotonic()))
            while True:
                reply = self.channel.read_json(deadline)
                if reply.get("id") == request_id:
                    return reply


def _frozen(error: object) -> bool:
    """Whether an agent's refusal is qemu-ga's for a call it does not take while the guest's
    filesystems are frozen ("... has been disabled: the agent is in frozen state")."""
    return isinstance(error, dict) and "frozen state" in str(error.get("desc", ""))
