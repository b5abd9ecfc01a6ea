"""The API's real server, shared by its tests: `devcell controller run --listen unix:...` as
a subprocess on the fake backend, with an httpx client over its socket.

It listens on a unix socket (its caller is the admin) and on TLS at 127.0.0.1 (a free port,
DevCell's own certificate, bearer tokens). Session-scoped: one daemon (~2-3 s to start on a
loaded machine) serves test_app.py, test_app_auth.py and test_openapi.py; each test names its
own cells so they do not depend on each other's order.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from tests import processes
from tests.conftest import REPO

BODY_SECONDS = 1.5
"""DEVCELL_API_BODY_SECONDS for the test server: the slow-body test waits this long."""


ARCHIVE_BYTES = 4 << 20
"""DEVCELL_API_ARCHIVE_BYTES for the test server: an import's bound, which a test passes."""


class Api(NamedTuple):
    client: httpx.Client
    socket: Path
    state: Path
    manifests: Path
    log: Path
    pid: int
    url: str
    """The TLS listener on 127.0.0.1 (a free port), which asks for bearer tokens."""

    @property
    def certificate(self) -> Path:
        """DevCell's own certificate, made in the state directory (api-tls/)."""
        return self.state / "api-tls" / "cert.pem"

    def tls_client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        import ssl

        trusted = ssl.create_default_context(cafile=str(self.certificate))
        return httpx.Client(base_url=self.url, verify=trusted, headers=headers, timeout=30.0)

    def token(self, user: str, role: str) -> str:
        made = self.cli("token", "create", "--user", user, "--role", role)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip()

    def peak_rss(self) -> int:
        """The daemon's peak resident memory so far (VmHWM), in bytes."""
        with open(f"/proc/{self.pid}/status") as status:
            line = next(x for x in status if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    def cli(self, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
        """The CLI on the same state directory, for comparing its output with the API's."""
        return subprocess.run([sys.executable, "-m", "devcell", "--state-dir", str(self.state),
                               *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def client_for(socket: Path, timeout: float = 30.0) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(socket)),
                        base_url="http://devcell", timeout=timeout)


@pytest.fixture(scope="session")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("api-server")
    state, manifests, sock, log = root / "state", root / "manifests", root / "api.sock", \
        root / "daemon.log"
    manifests.mkdir()
    (manifests / "seed.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: seed, labels: "
        "{team: core}}\nspec:\n  backend: fake\n  image: devcell/busybox:latest\n  env:\n"
        "    - {name: API_TOKEN, value: not-a-secret, secret: true}\n")
    env = dict(os.environ, DEVCELL_API_BODY_SECONDS=str(BODY_SECONDS),
               DEVCELL_API_ARCHIVE_BYTES=str(ARCHIVE_BYTES))
    env.pop("DEVCELL_FAKE_FAIL", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "devcell", "--state-dir", str(state), "controller", "run",
             "--manifests", str(manifests), "--resync", "0", "--listen", f"unix:{sock}",
             "--listen", "tcp:127.0.0.1:0"],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
            preexec_fn=processes.child_setup)
    client = client_for(sock)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the daemon exited: {log.read_text()}")
            try:
                served = re.search(r"API served on (https://127\.0\.0\.1:\d+)",
                                   log.read_text())
                if served and client.get("/api/v1/cells/seed").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the API did not answer within 60 s: {log.read_text()}")
            time.sleep(0.05)
        yield Api(client, sock, state, manifests, log, proc.pid, served.group(1))
    finally:
        client.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                pass
        processes.end(proc)


@contextlib.contextmanager
def running_container_cell(api: Api, prefix: str, command: str) -> Iterator[str]:
    """A container cell the admin (the unix socket) owns, its one service `ticker` running
    `sh -c COMMAND`; Running when yielded, deleted and its containers removed after."""
    from devcell import Client, errors
    from tests.backends.engine import IMAGE, remove_containers, require_engine
    from tests.server.test_app import wait_for

    require_engine()
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    with Client(f"unix:{api.socket}") as dc:
        dc.apply(f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\n"
                 f"spec:\n  backend: container\n  image: {IMAGE}\n  services:\n"
                 f"    - name: ticker\n      command: [sh, -c, {command}]\n")
        try:
            wait_for(api, f"/api/v1/cells/{name}",
                     lambda r: r.json()["status"].get("phase") == "Running", timeout=120)
            yield name
        finally:
            dc.delete("cells", name)
            with contextlib.suppress(errors.NotFound, TimeoutError):
                dc.wait(name, "Deleted", timeout=60)
            remove_containers(api.state)
