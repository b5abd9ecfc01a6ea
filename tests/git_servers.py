"""Git servers on 127.0.0.1 for the tests that clone over the network: `git daemon` (git://)
and `git http-backend` behind a small HTTP server (smart http://), each serving the bare
repositories of one directory, started on a free port and stopped when the block exits.

Loopback only (the tests' network rule); each server is a real git speaking its real
protocol, so a clone from it goes the way a clone from a team's server goes, without the
network.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests import processes

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


def free_port() -> int:
    """A port nothing listens on now (also: a URL that is unreachable)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"git daemon exited {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"git daemon did not listen on 127.0.0.1:{port} within 10 s")


@contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """`git daemon` serving every repository under `base`; yields `git://127.0.0.1:PORT`."""
    port = free_port()
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
         "--export-all", f"--base-path={base}", str(base)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=processes.child_setup, start_new_session=True)
    try:
        _wait_listening(port, proc)
        yield f"git://127.0.0.1:{port}"
    finally:
        # `git daemon` runs git-daemon as its child: killing git alone left that serving.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        processes.end(proc)


class _Backend(BaseHTTPRequestHandler):
    """One request handed to git-http-backend as CGI (RFC 3875), its answer passed back."""

    root: Path
    wanted: str | None = None
    """The Authorization header every request must carry (None: none asked)."""

    def _refused(self) -> bool:
        if self.wanted is None or self.headers.get("Authorization") == self.wanted:
            return False
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def do_GET(self) -> None:
        if not self._refused():
            self._cgi(b"")

    def do_POST(self) -> None:
        if self._refused():
            return
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._chunked()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._cgi(body)

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def _cgi(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        env = {"GIT_PROJECT_ROOT": str(self.root), "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1",
               "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_PROTOCOL": "HTTP/1.1",
               "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        for header in ("Content-Encoding", "Git-Protocol"):
            if header in self.headers:
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True,
                              timeout=60, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def git_http(base: Path, basic: str | None = None) -> Iterator[str]:
    """git-http-backend serving every repository under `base` over smart HTTP; yields
    `http://127.0.0.1:PORT`. `basic` ("user:password"): every request must carry it (HTTP
    Basic authentication, as a private repository's server asks), else 401."""
    if not os.access(HTTP_BACKEND, os.X_OK):
        raise RuntimeError(f"{HTTP_BACKEND} is missing (Debian's git package has it)")
    import base64

    wanted = None if basic is None else "Basic " + base64.b64encode(basic.encode()).decode()
    handler = type("Handler", (_Backend,), {"root": base, "wanted": wanted})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
