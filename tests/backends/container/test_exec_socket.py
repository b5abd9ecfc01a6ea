"""The exec fast path's engine client (container/exec_socket.py): its frames relayed in bounded
pieces whatever a frame claims, and the words it spells out pinned to their owners'."""

from __future__ import annotations

import io
import socket
import threading
from pathlib import Path

import pytest

from devcell.backends import supervisor
from devcell.backends.container import engine_http, exec_socket
from devcell.backends.container import observe as container_observe
from devcell.backends.host.ids import state_hash


class _Recorder(io.RawIOBase):
    """A binary stream that keeps what it was given and the largest single write."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.largest = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.data += data
        self.largest = max(self.largest, len(data))
        return len(data)


def _frame(stream: int, data: bytes, claimed: int | None = None) -> bytes:
    size = len(data) if claimed is None else claimed
    return bytes([stream, 0, 0, 0]) + size.to_bytes(4, "big") + data


def _relay(sent: bytes, first: bytes = b"", *, pieces: int = 1) -> tuple[_Recorder, _Recorder]:
    """Relay `sent` written by a peer in `pieces` writes (frames split anywhere)."""
    ours, theirs = socket.socketpair()
    out, err = _Recorder(), _Recorder()

    def send() -> None:
        step = max(1, len(sent) // pieces)
        for at in range(0, len(sent), step):
            theirs.sendall(sent[at:at + step])
        theirs.close()

    writer = threading.Thread(target=send)
    writer.start()
    try:
        exec_socket.relay(ours, first, out, err)  # type: ignore[arg-type]
    finally:
        writer.join(timeout=30)
        ours.close()
    return out, err


def test_frames_split_anywhere_go_to_their_streams() -> None:
    frames = (_frame(1, b"out-1 ") + _frame(2, b"err-1 ") + _frame(1, b"") + _frame(1, b"out-2")
              + _frame(2, b"x" * 200_000) + _frame(3, b"system"))
    for pieces in (1, 3, 7, len(frames)):
        out, err = _relay(frames[5:], first=frames[:5], pieces=pieces)
        assert bytes(out.data) == b"out-1 out-2system"  # stream 3 (an engine's own) with stdout
        assert bytes(err.data) == b"err-1 " + b"x" * 200_000


def test_a_frame_claiming_4_gib_is_relayed_as_it_comes_never_gathered() -> None:
    data = b"y" * 3_000_000
    out, err = _relay(_frame(1, data, claimed=(1 << 32) - 1), pieces=50)
    assert bytes(out.data) == data and not err.data
    assert out.largest <= exec_socket.CHUNK


def test_many_tiny_frames_are_relayed_in_order() -> None:
    frames = b"".join(_frame(1 + i % 2, bytes([65 + i % 26])) for i in range(100_000))
    out, err = _relay(frames, pieces=13)
    assert len(out.data) == len(err.data) == 50_000
    assert bytes(out.data[:3]) == b"ACE" and bytes(err.data[:3]) == b"BDF"


def test_a_stream_that_ends_inside_a_header_ends_the_relay() -> None:
    out, err = _relay(_frame(1, b"whole") + b"\x01\x00\x00")
    assert bytes(out.data) == b"whole" and not err.data


def test_what_it_spells_out_is_what_its_owners_say(tmp_path: Path) -> None:
    assert [*exec_socket.EXEC_PREFIX, "true"] == supervisor.exec_argv(["true"])
    assert exec_socket.QUIESCED == container_observe.QUIESCED
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    for path in (real, tmp_path / "link", tmp_path / "link" / ".." / "real"):
        assert exec_socket.state_hash(str(path)) == state_hash(path)


def test_a_client_configuration_that_adds_to_requests_is_left_to_the_sdk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert exec_socket.socket_path() == "/var/run/docker.sock"
    (tmp_path / "config.json").write_text('{"auths": {}}')
    assert exec_socket.socket_path() == "/var/run/docker.sock"
    for setting in ('{"detachKeys": "ctrl-x"}', '{"HttpHeaders": {"X-A": "b"}}'):
        (tmp_path / "config.json").write_text(setting)
        with pytest.raises(exec_socket.Fallback):
            exec_socket.socket_path()
    monkeypatch.delenv("DOCKER_CONFIG")
    for address in ("tcp://127.0.0.1:2375", "ssh://host", "unix://relative.sock"):
        monkeypatch.setenv("DOCKER_HOST", address)
        with pytest.raises(exec_socket.Fallback):
            exec_socket.socket_path()


def _engine_answering(tmp_path: Path, answer: bytes | None) -> str:
    """A one-request engine on a unix socket: reads the request, then sends `answer` and
    closes (None: closes without a word, as a broken engine or proxy does)."""
    path = str(tmp_path / "engine.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            data = b""
            while not data.endswith(b'"Detach":false}'):
                data += conn.recv(4096)
            if answer is not None:
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return path


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 10", b"garbage\r\n\r\n"])
def test_a_start_sent_and_left_unanswered_is_not_a_fallback(tmp_path: Path,
                                                            answer: bytes | None) -> None:
    """The engine may have started the command: the full path must not run it again."""
    path = _engine_answering(tmp_path, answer)
    with pytest.raises(engine_http.Unanswered):
        exec_socket.start(path, "ab" * 32)


def test_a_start_refused_or_not_sent_is_a_fallback(tmp_path: Path) -> None:
    path = _engine_answering(tmp_path, b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}")
    with pytest.raises(exec_socket.Fallback):
        exec_socket.start(path, "ab" * 32)
    with pytest.raises(exec_socket.Fallback):
        exec_socket.start(str(tmp_path / "none.sock"), "ab" * 32)
