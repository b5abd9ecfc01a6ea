"""The framing of a vm cell's stream ports, apart from any socket, so it is tested alone.

The guest agent cannot stream, so each vm cell's machine has virtio-serial ports named
`dev.devcell.streams.N` served by DevCell's helper in the guest (guest_streams.c). On one
port the host multiplexes channels: a command on pipes or a pseudo-terminal, or a TCP
connection to the guest's loopback. A frame is a 7-byte header (type u8, payload length
u16, channel u32, little-endian) and its payload: no length can exceed 65,535 by
construction. A session starts with the host's HELLO carrying a random nonce, after 64 KiB of
padding (a pad is one zero byte) that completes any frame a previous client left half
written; the guest answers with SYNC and the nonce, raw, and the host skips whatever came
before that (bounded by SKIP_LIMIT). Payload bytes flow only within credit: each side may
have at most WINDOW bytes unacknowledged on a channel, and a guest that sends more is lying.

Everything the guest sends is hostile: the decoder holds at most one frame, refuses an
unknown type, and the parsers here check every field's size before they believe it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from devcell.errors import BackendError

HEADER = struct.Struct("<BHI")
MAX_PAYLOAD = 0xFFFF
WINDOW = 256 * 1024
"""Payload bytes a side may send on one channel before the other grants more credit."""
CHUNK = 32768
"""What the host sends in one DATA frame."""
SYNC = b"DEVCELL-STREAM-1"
NONCE_BYTES = 16
PAD = b"\0" * (HEADER.size + MAX_PAYLOAD)
"""Sent before HELLO: completes a frame a killed client left half written, then is skipped."""
SKIP_LIMIT = 4 << 20
"""Bytes of a previous session's output skipped while looking for SYNC before giving up."""
MAX_ARGS = 4096
MAX_ENV = 512
MAX_MESSAGE = 300
"""Characters of a guest's failure message kept."""


class Host(enum.IntEnum):
    """Frames the host sends."""

    HELLO = 1
    EXEC = 2
    CONNECT = 3
    DATA = 4
    EOF = 5
    RESIZE = 6
    SIGNAL = 7
    CLOSE = 8
    CREDIT = 9


class Guest(enum.IntEnum):
    """Frames the guest sends."""

    OPENED = 10
    FAILED = 11
    OUT = 12
    ERR = 13
    EXIT = 14
    EOF = 15
    CREDIT = 16
    CLOSED = 17


_GUEST = {t.value: t for t in Guest}
_EMPTY = {Guest.OPENED, Guest.EOF, Guest.CLOSED}


@dataclass(frozen=True)
class Frame:
    type: Guest
    channel: int
    payload: bytes


@dataclass(frozen=True)
class ExecRequest:
    """What a channel runs: argv (argv[0] a path in the guest), env as NAME=VALUE, a user
    ("" for root, a name or uid[:gid]), a working directory ("" for the helper's own)."""

    argv: tuple[str, ...]
    env: tuple[str, ...] = ()
    user: str = ""
    cwd: str = ""
    terminal: tuple[int, int] | None = None
    """(rows, columns) of a pseudo-terminal, (0, 0) when unknown; None: pipes."""


class ProtocolError(BackendError):
    """The guest's helper sent what the protocol does not allow."""


def frame(kind: Host, channel: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"a frame holds at most {MAX_PAYLOAD} bytes, not {len(payload)}")
    return HEADER.pack(kind, len(payload), channel) + payload


def hello(nonce: bytes) -> bytes:
    return PAD + frame(Host.HELLO, 0, nonce)


def exec_payload(request: ExecRequest) -> bytes:
    """An EXEC frame's payload; BackendError when it would not fit in one frame or holds a
    NUL."""
    strings = (request.user, request.cwd, *request.argv, *request.env)
    if not request.argv or len(request.argv) > MAX_ARGS or len(request.env) > MAX_ENV:
        raise BackendError(f"a command for a vm cell takes 1 to {MAX_ARGS} arguments and at "
                           f"most {MAX_ENV} variables")
    if any("\0" in s for s in strings):
        raise BackendError("an argument or variable for a vm cell holds a NUL byte")
    rows, columns = request.terminal or (0, 0)
    head = struct.pack("<BHHHH", 1 if request.terminal is not None else 0, _u16(rows),
                       _u16(columns), len(request.argv), len(request.env))
    payload = head + b"".join(s.encode("utf-8", "surrogateescape") + b"\0" for s in strings)
    if len(payload) > MAX_PAYLOAD:
        raise BackendError(f"a command for a vm cell is limited to {MAX_PAYLOAD:,} bytes of "
                           "arguments and environment")
    return payload


def connect_payload(port: int) -> bytes:
    if not 0 < port < 65536:
        raise BackendError(f"port {port} is not a TCP port")
    return struct.pack("<H", port)


def resize_payload(rows: int, columns: int) -> bytes:
    return struct.pack("<HH", _u16(rows), _u16(columns))


def credit(channel: int, count: int) -> bytes:
    return frame(Host.CREDIT, channel, struct.pack("<I", count))


def _u16(value: int) -> int:
    return max(0, min(int(value), 0xFFFF))


def find_sync(data: bytes | bytearray, nonce: bytes) -> int:
    """Where the frames start after the guest's SYNC with this nonce, or -1."""
    at = data.find(SYNC + nonce)
    return -1 if at < 0 else at + len(SYNC) + len(nonce)


class Decoder:
    """Frames from the guest's bytes, holding at most one header and payload at a time."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= HEADER.size:
            kind, length, channel = HEADER.unpack_from(self._buffer)
            if len(self._buffer) < HEADER.size + length:
                break
            payload = bytes(self._buffer[HEADER.size:HEADER.size + length])
            del self._buffer[:HEADER.size + length]
            frames.append(checked(kind, channel, payload))
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


def checked(kind: int, channel: int, payload: bytes) -> Frame:
    """A guest frame whose type is known and whose payload has that type's size."""
    known = _GUEST.get(kind)
    if known is None:
        raise ProtocolError(f"the cell's stream helper sent a frame of unknown type {kind}")
    if channel == 0:
        raise ProtocolError("the cell's stream helper sent a frame on channel 0")
    size = len(payload)
    if (known in _EMPTY and size) or (known is Guest.EXIT and size != 2) or \
            (known is Guest.CREDIT and size != 4) or \
            (known in (Guest.OUT, Guest.ERR) and size == 0):
        raise ProtocolError(f"the cell's stream helper sent a {known.name} frame of {size} "
                            "bytes")
    return Frame(known, channel, payload)


def exit_status(payload: bytes) -> int:
    """128 + signal for a killed command, else its exit status (0-255 by the frame's size)."""
    kind, value = payload[0], payload[1]
    if kind == 0:
        return value
    if kind == 1 and 0 < value < 128:
        return 128 + value
    raise ProtocolError(f"the cell's stream helper reported an impossible end ({kind}, {value})")


def credit_of(payload: bytes) -> int:
    return int(struct.unpack("<I", payload)[0])


def message(payload: bytes) -> str:
    """A guest's failure text, printable and cut to MAX_MESSAGE characters."""
    text = payload[:MAX_MESSAGE * 4].decode("utf-8", "replace")
    return "".join(c if c.isprintable() else "?" for c in text)[:MAX_MESSAGE]
