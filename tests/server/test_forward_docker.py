"""port-forward through the API (server/forward.py, Client.port_forward, `devcell --server URL
port-forward`) to a real container cell with no network at all (mode none: its ports are
reached only inside its namespace, as the direct forward reaches them), against the session's
real server: bytes both ways unchanged (64 MiB echoed, with a checksum), the client's end of
writing passed on as a half-close (the cell answers after it), a port nothing listens on
said, not hung on, and the CLI's forward through the server; OpenSSH through `devcell
--server URL ssh-proxy` (the same stream to the cell's SSH server).

Cost: ~10-20 s for the cell (an engine), then a few seconds a test.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell import errors
from tests.conftest import REPO
from tests.server.conftest import Api

ECHO, DIGEST, NOTHING = 7000, 7001, 7009


@pytest.fixture(scope="module")
def cell(api: Api) -> Iterator[str]:
    """A container cell without a network: `cat` on port 7000 (an echo), `sha256sum` on
    7001 (answers once its input ended)."""
    from devcell import Client
    from tests.backends.engine import IMAGE, remove_containers, require_engine
    from tests.server.test_app import wait_for

    require_engine()
    name = f"fwd-{uuid.uuid4().hex[:6]}"
    with Client(f"unix:{api.socket}") as dc:
        dc.apply(f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\n"
                 f"spec:\n  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
                 f"  services:\n"
                 f"    - {{name: echo, command: [nc, -ll, -p, '{ECHO}', -e, cat]}}\n"
                 f"    - {{name: digest, command: [nc, -ll, -p, '{DIGEST}', -e, sha256sum]}}\n")
        try:
            wait_for(api, f"/api/v1/cells/{name}",
                     lambda r: r.json()["status"].get("phase") == "Running", timeout=120)
            yield name
        finally:
            dc.delete("cells", name)
            with contextlib.suppress(errors.NotFound, TimeoutError):
                dc.wait(name, "Deleted", timeout=60)
            remove_containers(api.state)


def _connect(port: int) -> socket.socket:
    """A connection to the forward's local port (the cell's service may still be starting:
    nc is up within a second of the cell Running)."""
    return socket.create_connection(("127.0.0.1", port), timeout=60)


def _echoed(sock: socket.socket, data: bytes) -> bytes:
    """`data` sent (then the end of it) while what comes back is read, until its end."""
    def send() -> None:
        for at in range(0, len(data), 1 << 20):
            sock.sendall(data[at:at + (1 << 20)])
        sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    got = bytearray()
    while chunk := sock.recv(1 << 20):
        got += chunk
    sender.join(60)
    return bytes(got)


def test_bytes_go_both_ways_unchanged_and_a_half_close_is_passed_on(api: Api, cell: str) -> None:
    from devcell import Client

    with Client(f"unix:{api.socket}") as dc, dc.port_forward(cell, ECHO) as forward:
        with _connect(forward.port) as sock:
            assert _echoed(sock, b"hello\n") == b"hello\n"
        data = os.urandom(64 << 20)
        with _connect(forward.port) as sock:
            back = _echoed(sock, data)
        assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()
    with Client(f"unix:{api.socket}") as dc, dc.port_forward(cell, DIGEST) as forward:
        with _connect(forward.port) as sock:  # sha256sum answers only once its input ended
            answer = _echoed(sock, b"abc")
        assert answer.split()[0].decode() == hashlib.sha256(b"abc").hexdigest()


def test_a_port_nothing_listens_on_is_said_not_hung_on(api: Api, cell: str) -> None:
    from devcell import Client

    with Client(f"unix:{api.socket}") as dc:
        with pytest.raises(errors.DevCellError, match=f"port {NOTHING} .*Connection refused"):
            dc.port_socket(cell, NOTHING)
        said: list[str] = []
        with dc.port_forward(cell, NOTHING, on_error=said.append) as forward:
            with _connect(forward.port) as sock:
                assert sock.recv(10) == b""  # closed, not left waiting
        assert said and "Connection refused" in said[0], said


def test_the_cli_forwards_through_the_server(api: Api, cell: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "devcell", "--server", f"unix:{api.socket}", "port-forward",
         cell, f":{ECHO}", f":{NOTHING}"], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout is not None
    try:
        ports = []
        for _ in range(2):
            line = proc.stdout.readline()
            found = re.fullmatch(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+\n", line)
            assert found, (line, proc.poll())
            ports.append(int(found.group(1)))
        with _connect(ports[1]) as sock:
            assert sock.recv(10) == b""
        with _connect(ports[0]) as sock:
            assert _echoed(sock, b"through the API\n") == b"through the API\n"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"error: connecting to port {NOTHING} in cell {cell}: Connection refused" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("how", ["unix", "tls"])
def test_openssh_reaches_the_cell_by_what_ssh_config_writes_through_the_api(
        api: Api, cell: str, tmp_path: Path, how: str) -> None:
    """`devcell --server URL ssh-config CELL` on a developer's machine: a Host block whose
    ProxyCommand reaches the cell through the server (with the certificate and token file it
    was given, never a token itself) and whose known_hosts pins the server's host key; real
    OpenSSH with that file alone, both ways; `devcell --server URL ssh CELL -- CMD` too."""
    import shutil

    from devcell.api.ssh import client_config, keys

    if shutil.which("ssh") is None:
        pytest.skip("OpenSSH's client is not installed")
    env = dict(os.environ, PYTHONPATH=str(REPO), DEVCELL_CONTEXTS=str(tmp_path / "ctx.json"))
    if how == "unix":
        reach = ["--server", f"unix:{api.socket}"]
    else:
        token = tmp_path / "token"
        token.write_text(api.token(f"ssh-{uuid.uuid4().hex[:4]}", "admin") + "\n")
        token.chmod(0o600)
        reach = ["--server", api.url, "--certificate-authority", str(api.certificate),
                 "--token-file", str(token)]
    written = subprocess.run([sys.executable, "-m", "devcell", *reach, "ssh-config", cell],
                             capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert written.returncode == 0, written.stderr
    config = tmp_path / "ssh_config"
    config.write_text(written.stdout)
    block = dict(line.strip().split(" ", 1) for line in written.stdout.splitlines()
                 if line.startswith("    "))
    assert block["HostName"] == client_config.host_alias(cell)
    assert " ".join(reach[:2]) in block["ProxyCommand"] and "ssh-proxy" in block["ProxyCommand"]
    known = Path(block["UserKnownHostsFile"].strip('"'))
    assert known.parent == tmp_path / "ssh" and oct(known.stat().st_mode & 0o777) == "0o600"
    assert known.read_text() == f"*.devcell {keys.public_key(keys.host_key(api.state))}\n"
    done = subprocess.run(["ssh", "-F", str(config), client_config.host_alias(cell), "--",
                           "echo through-the-api; cat"], input=b"and back\n",
                          capture_output=True, cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"through-the-api\nand back\n"
    assert b"Traceback" not in done.stderr
    once = subprocess.run([sys.executable, "-m", "devcell", *reach, "ssh", cell, "--",
                           "echo", "a b"], capture_output=True, cwd=tmp_path, timeout=120,
                          env=env)
    assert (once.returncode, once.stdout) == (0, b"a b\n"), once.stderr
    fake = subprocess.run([sys.executable, "-m", "devcell", *reach, "ssh-config", "seed"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert fake.returncode == 1 and "cannot run commands" in fake.stderr, fake.stderr


def test_a_connection_ends_when_its_token_is_revoked(api: Api, cell: str) -> None:
    """Over TCP the token is checked again each second: revoked, the connection ends with a
    401 status (an open connection is not a way to keep a revoked token's access)."""
    import json
    import time

    from devcell import Client
    from devcell.server import framing

    token = api.token("fwd-revoked", "admin")
    with Client(api.url, token=token, ca=str(api.certificate)) as dc:
        with dc.port_socket(cell, ECHO) as ws:
            ws.send(framing.frame(framing.STDIN, b"ping"))
            assert ws.recv(timeout=30) == framing.frame(framing.STDOUT, b"ping")
            assert api.cli("token", "revoke", token.split("_")[1]).returncode == 0
            revoked = time.monotonic()
            while True:
                channel, payload = framing.split(ws.recv(timeout=30))
                if channel == framing.STATUS:
                    break
            assert time.monotonic() - revoked < 10
            assert json.loads(payload)["status"] == 401


def test_a_client_that_does_not_read_holds_the_server_to_bounded_memory(api: Api,
                                                                        cell: str) -> None:
    """64 MiB sent to the echo by a client that reads nothing back: the server stops reading
    the port once its message to the client waits, the cell then stops reading, and the
    server stops reading the client (backpressure both ways): its memory does not grow by
    what was sent."""
    import time

    from devcell import Client
    from devcell.server import framing

    def rss() -> int:
        with open(f"/proc/{api.pid}/status") as status:
            line = next(x for x in status if x.startswith("VmRSS:"))
        return int(line.split()[1]) * 1024

    before = rss()
    sent = [0]
    with Client(f"unix:{api.socket}") as dc, dc.port_socket(cell, ECHO) as ws:
        def send() -> None:
            piece = framing.frame(framing.STDIN, b"\0" * (64 << 10))
            try:
                for _ in range(1024):  # 64 MiB
                    ws.send(piece)
                    sent[0] += 64 << 10
            except Exception:  # noqa: BLE001,S110  (closed under it at the end)
                pass

        threading.Thread(target=send, daemon=True).start()
        time.sleep(8)
        grown = rss() - before
        ws.socket.shutdown(socket.SHUT_RDWR)  # gone at once: no close handshake to wait on
    print(f"sent {sent[0] >> 20} MiB, the server grew by {grown >> 20} MiB")
    assert sent[0] < 64 << 20, "nothing held the sender back"
    assert grown < 24 << 20, f"the server grew by {grown >> 20} MiB"


def test_code_through_the_server_writes_the_editors_settings_and_runs_post_attach(
        api: Api, tmp_path: Path) -> None:
    """`devcell --server URL code CELL` on a developer's machine: the cell's VS Code settings
    written and its postAttach hook run in the cell through the exec stream, as the server's
    own `devcell code` does; the line VS Code opens printed, and the ssh-config note names
    the server. A second run keeps the settings; a viewer is refused before anything runs.
    Cost: one more container cell, ~10-20 s."""
    from devcell import Client
    from devcell.api.devcontainer_lifecycle import SETTINGS
    from tests.backends.engine import IMAGE, require_engine
    from tests.server.test_app import wait_for

    require_engine()
    name = f"code-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp_path),
               DEVCELL_CONTEXTS=str(tmp_path / "ctx.json"))
    reach = ["--server", f"unix:{api.socket}"]

    def code(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devcell", *extra, "code", name,
                               "--print"], capture_output=True, text=True, cwd=REPO, env=env,
                              timeout=120)

    with Client(f"unix:{api.socket}") as dc:
        dc.apply(f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata:\n  name: {name}\n"
                 f"  annotations: {{{SETTINGS}: '{{\"editor.tabSize\": 2}}'}}\n"
                 f"spec:\n  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
                 f"  hooks: {{postAttach: [[sh, -c, 'echo attached >> /tmp/attached']]}}\n"
                 f"  services: [{{name: idle, command: [sleep, '3600']}}]\n")
        try:
            wait_for(api, f"/api/v1/cells/{name}",
                     lambda r: r.json()["status"].get("phase") == "Running", timeout=120)
            first = code(*reach)
            assert first.returncode == 0, first.stderr
            assert first.stdout == ("code --folder-uri "
                                    f"vscode-remote://ssh-remote+{name}.devcell/workspace\n")
            settings = "/root/.vscode-server/data/Machine/settings.json"
            assert f"settings: wrote {settings}" in first.stderr, first.stderr
            assert (f"add it with `devcell --server unix:{api.socket} ssh-config {name} >> "
                    "~/.ssh/config`") in first.stderr
            assert "Traceback" not in first.stderr
            assert dc.exec(name, ["cat", settings]).stdout == b'{\n    "editor.tabSize": 2\n}\n'
            again = code(*reach)
            assert f"settings: kept {settings} (it exists)" in again.stderr, again.stderr
            assert dc.exec(name, ["cat", "/tmp/attached"]).stdout == b"attached\nattached\n"
            token = tmp_path / "token"
            token.write_text(api.token(f"v-{uuid.uuid4().hex[:4]}", "viewer") + "\n")
            token.chmod(0o600)
            refused = code("--server", api.url, "--certificate-authority",
                           str(api.certificate), "--token-file", str(token))
            assert refused.returncode != 0 and "viewer-read-only" in refused.stderr
            assert "settings:" not in refused.stderr and refused.stdout == ""
            assert dc.exec(name, ["cat", "/tmp/attached"]).stdout == b"attached\nattached\n"
        finally:
            dc.delete("cells", name)
            with contextlib.suppress(errors.NotFound, TimeoutError):
                dc.wait(name, "Deleted", timeout=60)  # its containers with it
