"""The vm stream ports' protocol without QEMU: the codec's framing and bounds, and the host's
connection against a fake helper that lies, floods, stalls or never answers (each must be one
BackendError line within its deadline, never a hang or a traceback)."""

from __future__ import annotations

import io
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devcell.backends.vm import streams, streams_relay
from devcell.backends.vm import streams_codec as codec
from devcell.errors import BackendError, BackendUnavailable


def guest_frame(kind: int, channel: int, payload: bytes = b"") -> bytes:
    return struct.pack("<BHI", kind, len(payload), channel) + payload


def test_frames_are_decoded_whatever_the_pieces_they_arrive_in() -> None:
    data = (guest_frame(codec.Guest.OPENED, 1) + guest_frame(codec.Guest.OUT, 1, b"hello")
            + guest_frame(codec.Guest.EXIT, 1, b"\x00\x07"))
    decoder = codec.Decoder()
    frames = [f for byte in data for f in decoder.feed(bytes([byte]))]
    assert [(f.type, f.channel, f.payload) for f in frames] == [
        (codec.Guest.OPENED, 1, b""), (codec.Guest.OUT, 1, b"hello"),
        (codec.Guest.EXIT, 1, b"\x00\x07")]
    assert codec.exit_status(frames[2].payload) == 7
    assert codec.exit_status(b"\x01\x09") == 137
    assert decoder.pending == 0


def test_the_decoder_holds_at_most_one_frame_of_the_largest_size() -> None:
    decoder = codec.Decoder()
    header = struct.pack("<BHI", codec.Guest.OUT, 0xFFFF, 1)
    assert decoder.feed(header + b"x" * 60000) == []
    assert decoder.pending == len(header) + 60000  # a u16 length: never more than 64 KiB
    (frame,) = decoder.feed(b"x" * 5535)
    assert len(frame.payload) == 0xFFFF


@pytest.mark.parametrize("data, said", [
    (guest_frame(99, 1), "unknown type 99"),
    (guest_frame(codec.Guest.OUT, 0, b"x"), "channel 0"),
    (guest_frame(codec.Guest.EXIT, 1, b"\x00"), "EXIT frame of 1 bytes"),
    (guest_frame(codec.Guest.CREDIT, 1, b"\x00" * 8), "CREDIT frame of 8 bytes"),
    (guest_frame(codec.Guest.OPENED, 1, b"x"), "OPENED frame of 1 bytes"),
    (guest_frame(codec.Guest.OUT, 1), "OUT frame of 0 bytes"),
])
def test_a_frame_the_protocol_does_not_allow_is_refused(data: bytes, said: str) -> None:
    with pytest.raises(codec.ProtocolError, match=said):
        codec.Decoder().feed(data)


def test_an_impossible_exit_is_refused_and_a_message_is_made_printable() -> None:
    with pytest.raises(codec.ProtocolError, match="impossible end"):
        codec.exit_status(b"\x01\x00")
    with pytest.raises(codec.ProtocolError, match="impossible end"):
        codec.exit_status(b"\x07\x01")
    said = codec.message(b"no such\x1b[2J file" + b"x" * 5000)
    assert "\x1b" not in said and len(said) == codec.MAX_MESSAGE


def test_a_request_is_bounded_before_it_is_sent() -> None:
    ok = codec.exec_payload(codec.ExecRequest(argv=("/bin/sh", "-c", "true"), env=("A=1",),
                                              user="nobody", terminal=(40, 120)))
    assert ok[:9] == struct.pack("<BHHHH", 1, 40, 120, 3, 1)
    assert ok[9:] == b"nobody\0\0/bin/sh\0-c\0true\0A=1\0"
    for request, said in ((codec.ExecRequest(argv=()), "1 to"),
                          (codec.ExecRequest(argv=("a\0b",)), "NUL"),
                          (codec.ExecRequest(argv=("x" * 70000,)), "65,535 bytes"),
                          (codec.ExecRequest(argv=("a",) * 5000), "1 to")):
        with pytest.raises(BackendError, match=said):
            codec.exec_payload(request)
    with pytest.raises(BackendError, match="not a TCP port"):
        codec.connect_payload(70000)
    assert codec.resize_payload(10**6, -3) == struct.pack("<HH", 0xFFFF, 0)


def test_sync_is_found_only_with_this_sessions_nonce() -> None:
    nonce = b"n" * 16
    stale = codec.SYNC + b"o" * 16 + b"old frames"
    assert codec.find_sync(stale, nonce) == -1
    data = stale + codec.SYNC + nonce + b"rest"
    assert data[codec.find_sync(data, nonce):] == b"rest"
    assert codec.hello(nonce).startswith(b"\0" * (7 + 0xFFFF))


# -- the host's connection against a fake helper -------------------------------------------


@pytest.fixture
def helper(tmp_path: Path) -> Iterator[Callable[[Callable[[socket.socket, bytes], None]], Path]]:
    """Serve `behave(conn, nonce)` on the machine directory's first stream socket."""
    servers: list[socket.socket] = []

    def start(behave: Callable[[socket.socket, bytes], None]) -> Path:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(tmp_path / streams.socket_name(0)))
        server.listen(1)
        servers.append(server)

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                got = b""
                while len(got) < len(codec.PAD) + 7 + 16:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    got += chunk
                try:
                    behave(conn, got[len(codec.PAD) + 7:len(codec.PAD) + 23])
                except OSError:
                    pass

        threading.Thread(target=serve, daemon=True).start()
        return tmp_path

    yield start
    for server in servers:
        server.close()


def _exec(connection: streams.Connection) -> tuple[int, bytes]:
    out = io.BytesIO()
    code = streams_relay.run(connection, codec.ExecRequest(argv=("/bin/true",)), "true",
                             stdout=out, stderr=io.BytesIO(), stdin=None, terminal=None,
                             hang_up=None)
    return code, out.getvalue()


def test_a_well_behaved_helper_streams_output_and_an_exit_status(
        helper: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "SEND_SECONDS", 0.3)  # a quiet command is no wedged helper

    def behave(conn: socket.socket, nonce: bytes) -> None:
        conn.sendall(b"old session's bytes" * 100 + codec.SYNC + nonce)
        conn.recv(65536)  # EXEC
        conn.sendall(guest_frame(codec.Guest.OPENED, 1))
        time.sleep(1.2)
        conn.sendall(guest_frame(codec.Guest.OUT, 1, b"hi")
                     + guest_frame(codec.Guest.EXIT, 1, b"\x00\x05"))
        time.sleep(1)

    connection = streams.Connection(helper(behave), "fake", hello_seconds=5)
    assert _exec(connection) == (5, b"hi")
    connection.close()


def test_a_helper_that_never_answers_is_unavailable_in_its_time(helper: Callable[..., Path]
                                                                ) -> None:
    began = time.monotonic()
    with pytest.raises(BackendUnavailable, match="did not answer within 1 s"):
        streams.Connection(helper(lambda conn, nonce: time.sleep(5)), "fake", hello_seconds=1)
    assert time.monotonic() - began < 4


def test_a_helper_that_floods_before_answering_is_refused(helper: Callable[..., Path]) -> None:
    def behave(conn: socket.socket, nonce: bytes) -> None:
        junk = b"\xff" * 65536
        for _ in range(codec.SKIP_LIMIT // len(junk) + 4):
            conn.sendall(junk)

    with pytest.raises(BackendError, match="more than 4 MiB without answering"):
        streams.Connection(helper(behave), "fake", hello_seconds=30)


def test_a_helper_that_sends_past_its_window_breaks_the_connection(helper: Callable[..., Path]
                                                                  ) -> None:
    def behave(conn: socket.socket, nonce: bytes) -> None:
        conn.sendall(codec.SYNC + nonce)
        conn.recv(65536)
        conn.sendall(guest_frame(codec.Guest.OPENED, 1))
        # twice the window: the host's first read takes what was queued (merged) and its
        # credit comes back only after a slow write, so a window's worth is over it
        for _ in range(2 * codec.WINDOW // 60000 + 2):
            conn.sendall(guest_frame(codec.Guest.ERR, 1, b"x" * 60000))
        time.sleep(5)

    connection = streams.Connection(helper(behave), "fake", hello_seconds=5)
    stuck = io.BytesIO()

    class Slow(io.BytesIO):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            time.sleep(0.5)  # the credit comes back later than the flood
            return stuck.write(data)

    with pytest.raises(BackendError, match="more than the window it was given"):
        streams_relay.run(connection, codec.ExecRequest(argv=("/bin/true",)), "true",
                          stdout=io.BytesIO(), stderr=Slow(), stdin=None, terminal=None,
                          hang_up=None)


class _Quiet:
    """A connection that is never broken and sends nowhere (a channel's only needs)."""

    broken = None
    cell = "fake"

    def check(self) -> None:
        pass

    def send(self, data: bytes) -> None:
        pass


def test_a_channel_holds_a_bounded_number_of_control_frames_each_cut_short() -> None:
    channel = streams.Channel(_Quiet(), 1)  # type: ignore[arg-type]
    channel.deliver(codec.Frame(codec.Guest.FAILED, 1, b"x" * 60000))
    for _ in range(streams.CONTROL_FRAMES - 1):  # not payload, so no credit bounds them
        channel.deliver(codec.Frame(codec.Guest.EOF, 1, b""))
    with pytest.raises(codec.ProtocolError, match="more than 16 frames unread"):
        channel.deliver(codec.Frame(codec.Guest.EOF, 1, b""))
    first = channel.next(0)
    assert first is not None and len(first.payload) == codec.MAX_MESSAGE * 4
    channel.deliver(codec.Frame(codec.Guest.CLOSED, 1, b""))  # one read: room for one more


def test_a_helper_silent_after_a_request_times_out_and_lies_are_refused(
        helper: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streams, "OPEN_SECONDS", 1.0)

    def behave(conn: socket.socket, nonce: bytes) -> None:
        conn.sendall(codec.SYNC + nonce)
        time.sleep(5)

    connection = streams.Connection(helper(behave), "fake", hello_seconds=5)
    began = time.monotonic()
    with pytest.raises(BackendError, match="did not answer within 1 s"):
        _exec(connection)
    assert time.monotonic() - began < 4


def test_a_helper_that_sends_an_unknown_frame_is_one_clear_error(helper: Callable[..., Path]
                                                                ) -> None:
    def behave(conn: socket.socket, nonce: bytes) -> None:
        conn.sendall(codec.SYNC + nonce)
        conn.recv(65536)
        conn.sendall(guest_frame(codec.Guest.OPENED, 1) + guest_frame(200, 1, b"?"))
        time.sleep(5)

    connection = streams.Connection(helper(behave), "fake", hello_seconds=5)
    with pytest.raises(BackendError, match="cell fake: the cell's stream helper sent a frame "
                                           "of unknown type 200"):
        _exec(connection)


def test_a_port_is_taken_by_one_process_at_a_time(tmp_path: Path) -> None:
    fd, index = streams._take_port(tmp_path, "fake")
    try:
        other, second = streams._take_port(tmp_path, "fake")
        assert (index, second) == (0, 1)
        streams.os.close(other)
    finally:
        streams.os.close(fd)


def test_a_flood_of_one_byte_frames_costs_the_host_its_payload_not_a_frame_each() -> None:
    import tracemalloc

    channel = streams.Channel(_Quiet(), 1)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        for i in range(codec.WINDOW):  # the whole window, a byte a frame, stdout and stderr
            channel.deliver(codec.Frame(codec.Guest.ERR if i % 2 else codec.Guest.OUT, 1,
                                        b"o" if i % 2 == 0 else b"e"))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 2 * codec.WINDOW  # was 26 MiB: a Frame and a bytes object for every byte
    first = channel.next(0)  # stdout's half, merged; its credit given back
    assert first is not None and first.payload == b"o" * (codec.WINDOW // 2)
    channel.deliver(codec.Frame(codec.Guest.EXIT, 1, b"\x00\x00"))
    channel.deliver(codec.Frame(codec.Guest.OUT, 1, b"late"))  # never merged past the end
    got = [channel.next(0) for _ in range(3)]
    assert [(f.type, f.payload) for f in got if f is not None] == [
        (codec.Guest.ERR, b"e" * (codec.WINDOW // 2)), (codec.Guest.EXIT, b"\x00\x00"),
        (codec.Guest.OUT, b"late")]


def test_an_idle_connection_gives_its_port_back_and_a_busy_one_keeps_it(
        helper: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A long-lived process (the daemon after a dotfiles install) held one of the cell's
    eight ports for its whole life; now only while a channel is open, and a moment after."""
    monkeypatch.setattr(streams, "IDLE_SECONDS", 0.3)

    def behave(conn: socket.socket, nonce: bytes) -> None:
        conn.sendall(codec.SYNC + nonce)
        for number in (1, 2):
            conn.recv(65536)  # EXEC
            conn.sendall(guest_frame(codec.Guest.OPENED, number)
                         + guest_frame(codec.Guest.EXIT, number, b"\x00\x00"))
            conn.recv(65536)  # CLOSE
        time.sleep(5)

    directory = helper(behave)
    first = streams.connection(directory, "fake", hello_seconds=5)
    assert _exec(first) == (0, b"")
    time.sleep(0.1)  # within the idle time: the same connection serves the next command
    assert streams.connection(directory, "fake") is first and _exec(first) == (0, b"")
    deadline = time.monotonic() + 5
    while directory in streams._CONNECTIONS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert directory not in streams._CONNECTIONS and first.broken
    fd, index = streams._take_port(directory, "fake")  # the port is free again
    streams.os.close(fd)
    assert index == 0
    first.close()  # a second close is harmless
