"""--listen: the unix socket is the owner's alone, a stale one is replaced, a live one or a
file in the way refused; a tcp address in use is refused."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import devcell
from devcell.errors import UsageError
from devcell.server import serve

ROOT = Path(devcell.__file__).parent.parent


def test_parse_listen() -> None:
    assert serve.parse_listen("unix:/run/x.sock") == serve.Listen("unix", "/run/x.sock")
    assert serve.parse_listen("tcp:127.0.0.1:8443") == serve.Listen("tcp", "127.0.0.1:8443")
    assert serve.host_port(serve.parse_listen("tcp:[::1]:0")) == ("::1", 0)
    for bad in ("x", "unix:", "http:/x", "tcp:8443", "tcp:host:x", "tcp:host:99999"):
        with pytest.raises(UsageError):
            serve.parse_listen(bad)


def test_socket_is_owner_only_and_a_stale_one_is_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "api.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()  # a dead server's socket: nobody listens
    sock = serve.unix_socket(path)
    try:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        with pytest.raises(UsageError, match="another server listens"):
            serve.unix_socket(path)
    finally:
        sock.close()


def test_the_socket_is_owner_only_under_any_umask_and_leaves_the_umask_alone(
        tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        sock = serve.unix_socket(str(tmp_path / "api.sock"))
        seen = os.umask(0)
    finally:
        os.umask(old)
    try:
        assert seen == 0
        assert stat.S_IMODE(os.lstat(tmp_path / "api.sock").st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["api.sock"]  # no private detour left
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(tmp_path / "api.sock"))
        client.close()
    finally:
        sock.close()


def test_a_path_longer_than_a_client_can_reach_is_refused(tmp_path: Path) -> None:
    """The bind goes through /proc/self/fd and the socket is linked into place, neither
    bounded: a 200-byte path was listened on, no client could connect, and the next start
    said "--listen unix:...: None"."""
    def path(n: int) -> str:
        return str(tmp_path) + "/" + "s" * (n - len(str(tmp_path)) - 1)

    sock = serve.unix_socket(path(serve.PATH_BYTES))
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path(serve.PATH_BYTES))
        client.close()
    finally:
        sock.close()
        os.unlink(path(serve.PATH_BYTES))
    for n in (serve.PATH_BYTES + 1, 200):
        with pytest.raises(UsageError, match=f": {n} bytes, longer than a unix socket's path "
                           "may be \\(107\\); give a shorter one"):
            serve.unix_socket(path(n))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and setpriv to make and listen on another user's socket")
def test_a_dead_socket_this_user_cannot_remove_is_refused_in_words() -> None:
    """Another user's dead socket (mode 0777) in a shared sticky directory: the probe is
    refused, so it is taken for stale, and its unlink was a PermissionError traceback."""
    shared = tempfile.mkdtemp(prefix="devcell-sticky-")
    try:
        os.chmod(shared, 0o1777)
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(f"{shared}/api.sock")
        stale.close()
        os.chmod(f"{shared}/api.sock", 0o777)
        code = ("from devcell.errors import UsageError\n"
                "from devcell.server import serve\n"
                f"try: serve.unix_socket({shared + '/api.sock'!r})\n"
                "except UsageError as e: print(e)\n")
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.stderr == ""
        assert done.stdout == (f"--listen unix:{shared}/api.sock: a dead server's socket is "
                               "there and cannot be removed (Operation not permitted); remove "
                               "it or give another path\n")
        assert os.listdir(shared) == ["api.sock"]
    finally:
        shutil.rmtree(shared)


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("mine")
    with pytest.raises(UsageError, match="not a socket"):
        serve.unix_socket(str(tmp_path / "f"))
    assert (tmp_path / "f").read_text() == "mine"


def test_a_tcp_address_in_use_is_refused(tmp_path: Path) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"tcp:127.0.0.1:{port}: "):
            serve.tcp_socket(serve.Listen("tcp", f"127.0.0.1:{port}"))
    finally:
        taken.close()


def test_a_connection_whose_request_head_never_arrives_is_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Half a request's head, sent and left there (slow-loris): the connection closed after
    HEAD_SECONDS, so 256 of them cannot hold every slot and leave the listener answering 503
    to everyone; a whole request is answered, and its connection kept alive for the next
    (found by attack27c)."""
    import time

    monkeypatch.setattr(serve, "HEAD_SECONDS", 0.5)
    path = str(tmp_path / "api.sock")
    serving = serve.start(serve.Listen("unix", path), tmp_path)
    try:
        held = []
        for _ in range(3):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect(path)
            client.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: devcell\r\n")
            held.append(client)
        started = time.monotonic()
        for client in held:
            assert client.recv(1024) == b""  # closed, nothing answered
            client.close()
        assert time.monotonic() - started < 5
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(10)
            client.connect(path)
            client.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\nHost: devcell\r\n\r\n")
            assert client.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        serving.stop()
