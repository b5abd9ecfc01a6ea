"""SSH to a container cell with Debian's real OpenSSH client (ssh, scp, sftp, rsync -e ssh,
forwards) through the ProxyCommand `devcell ssh-config` writes: no sshd in the image, no port.

One cell for the module (its image adds rsync, copied with its libraries from the host, to
DevCell's busybox base by a build), so the cost is one build and one start (~5 s).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.backends.engine import remove_containers, require_engine
from tests.backends.ssh_support import Cell, interactive_shell, rsync_context, serve_cell

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs openssh-client")


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cell]:
    require_engine()
    base = tmp_path_factory.mktemp("ssh")
    state = base / "state"
    rsync_context(base / "app")
    manifest = base / "cell.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: sshweb}\nspec:\n"
        "  backend: container\n  build: {context: app}\n  network: {mode: none}\n"
        "  env: [{name: GREETING, value: from-spec}]\n"
        "  services:\n    - name: http\n"
        '      command: [httpd, -f, -p, "127.0.0.1:8000", -h, /workspace]\n')
    made = Cell(state, base / "ssh_config", base / "local", timeout=120)
    try:
        yield serve_cell(made, manifest, "sshweb", timeout=300)
    finally:
        remove_containers(state)


def test_ssh_runs_a_command_with_its_exit_status_and_the_cells_environment(cell: Cell) -> None:
    done = cell.ssh("sshweb.devcell", "uname -a; echo $GREETING; pwd; exit 7")
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 7, done.stderr
    assert lines[0].startswith("Linux sshweb ")
    assert lines[1:] == ["from-spec", "/workspace"]
    assert b"Warning" not in done.stderr  # the host key was pinned: no first-use note
    piped = cell.ssh("sshweb.devcell", "cat; echo done >&2", input=b"piped\n" * 1000)
    assert piped.returncode == 0 and piped.stdout == b"piped\n" * 1000
    assert piped.stderr == b"done\n"


def test_devcell_ssh_keeps_each_argument_and_refuses_a_fake_cell(cell: Cell, tmp_path: Path
                                                                ) -> None:
    done = cell.devcell("ssh", "sshweb", "--", "printf", "%s|", "two words", "$HOME")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "two words|$HOME|"
    fake = tmp_path / "fake.yaml"
    fake.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: f}\n"
                    "spec: {backend: fake}\n")
    assert cell.devcell("apply", "-f", str(fake)).returncode == 0
    refused = cell.devcell("ssh", "f")
    assert refused.returncode == 1 and "backend fake cannot run commands" in refused.stderr
    assert "Host f.devcell" not in cell.devcell("ssh-config").stdout
    missing = cell.devcell("ssh-config", "nope")
    assert missing.returncode != 0 and "nope" in missing.stderr
    assert "Traceback" not in refused.stderr + missing.stderr


def test_an_interactive_shell_on_a_terminal_under_tmux(cell: Cell) -> None:
    interactive_shell(cell, "sshweb.devcell", seconds=30)


def test_scp_both_ways_sftp_and_rsync(cell: Cell) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    (cell.work / "up.bin").write_bytes(payload)
    up = cell.ssh("up.bin", "sshweb.devcell:", program="scp")
    assert up.returncode == 0, up.stderr
    remote = cell.ssh("sshweb.devcell", "sha256sum /workspace/up.bin")
    assert remote.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    down = cell.ssh("sshweb.devcell:/workspace/up.bin", "down.bin", program="scp")
    assert down.returncode == 0, down.stderr
    assert (cell.work / "down.bin").read_bytes() == payload

    batch = cell.work / "batch"
    batch.write_text("mkdir made\ncd made\nput up.bin\nrename up.bin renamed.bin\nls -l\n"
                     "pwd\nsymlink renamed.bin alias\nrm alias\n")
    sftp = cell.ssh("-b", str(batch), "sshweb.devcell", program="sftp")
    assert sftp.returncode == 0, sftp.stderr
    assert b"renamed.bin" in sftp.stdout and b"/workspace/made" in sftp.stdout
    listed = cell.ssh("sshweb.devcell", "ls /workspace/made")
    assert listed.stdout == b"renamed.bin\n"

    tree = cell.work / "src"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("print('hi')\n")
    (tree / "README").write_text("readme\n")
    rsync = subprocess.run(["rsync", "-a", "-e", f"ssh -F {cell.config}", f"{tree}/",
                            "sshweb.devcell:/workspace/src/"], capture_output=True, timeout=60)
    assert rsync.returncode == 0, rsync.stderr
    shown = cell.ssh("sshweb.devcell", "cat /workspace/src/README /workspace/src/pkg/mod.py")
    assert shown.stdout == b"readme\nprint('hi')\n"


def test_a_link_the_cell_planted_is_resolved_inside_the_cell(cell: Cell, tmp_path: Path
                                                             ) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    planted = cell.ssh("sshweb.devcell",
                       f"ln -sf {secret} /workspace/to-host && ln -sf /etc/passwd /workspace/pw"
                       " && ln -sf ../../../../../../.. /workspace/up && mkfifo /workspace/fifo"
                       " && echo cell-passwd-line > /tmp/marker")
    assert planted.returncode == 0, planted.stderr
    got = cell.ssh("sshweb.devcell:/workspace/to-host", "x", program="scp")
    assert got.returncode != 0 and not (cell.work / "x").exists()  # no such file in the cell
    got = cell.ssh("sshweb.devcell:/workspace/pw", "pw", program="scp")
    assert got.returncode == 0
    assert (cell.work / "pw").read_text().startswith("root:x:0:0:root:/root:/bin/sh")  # cell's
    assert (cell.work / "pw").read_text() != Path("/etc/passwd").read_text()
    climbed = cell.ssh(f"sshweb.devcell:/workspace/up/{secret}", "y", program="scp")
    assert climbed.returncode != 0 and not (cell.work / "y").exists()
    began = time.monotonic()
    fifo = cell.ssh("sshweb.devcell:/workspace/fifo", "z", program="scp", timeout=30)
    assert fifo.returncode != 0 and time.monotonic() - began < 20  # refused, never blocked
    wrote = cell.ssh("up.bin" if (cell.work / "up.bin").exists() else "pw",
                     "sshweb.devcell:/workspace/to-host", program="scp")
    assert secret.read_text() == "host only\n", wrote.stderr  # the host's file untouched


def test_forwards_reach_the_cells_loopback_only_and_r_reaches_the_host(cell: Cell) -> None:
    index = cell.ssh("sshweb.devcell", "echo served-in-cell > /workspace/index.html")
    assert index.returncode == 0
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    forward = subprocess.Popen(["ssh", "-F", str(cell.config), "-N", "-L",
                                f"{local}:localhost:8000", "sshweb.devcell"],
                               stderr=subprocess.PIPE)
    try:
        body = _get(f"http://127.0.0.1:{local}/index.html")
        assert body == b"served-in-cell\n"
    finally:
        forward.terminate()
        forward.wait(10)

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"from-the-host\n")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    back = subprocess.Popen(["ssh", "-F", str(cell.config), "-N", "-o",
                             "ExitOnForwardFailure=yes", "-R",
                             f"19123:localhost:{server.server_address[1]}", "sshweb.devcell"],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        got = b""
        while time.monotonic() < deadline and b"from-the-host" not in got:
            got = cell.ssh("sshweb.devcell", "wget -qO- http://127.0.0.1:19123/").stdout
            time.sleep(0.3)
        assert got == b"from-the-host\n"
    finally:
        back.terminate()
        back.wait(10)
        server.shutdown()

    refused = cell.ssh("-o", "LogLevel=INFO", "-W", "example.invalid:80", "sshweb.devcell",
                       timeout=30)  # a name: refused before any lookup, no packet sent
    assert refused.returncode != 0
    assert b"administratively prohibited" in refused.stderr, refused.stderr


def _get(url: str) -> bytes:
    deadline = time.monotonic() + 20
    while True:
        try:
            return bytes(urllib.request.urlopen(url, timeout=10).read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_exec_takes_environment_a_working_directory_and_a_user(cell: Cell) -> None:
    done = cell.devcell("exec", "-e", "FOO=bar baz", "-e", "GREETING=overridden", "-w", "/tmp",
                        "-u", "nobody", "sshweb", "--", "sh", "-c",
                        'echo "$FOO|$GREETING"; pwd; id -u')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["bar baz|overridden", "/tmp", "65534"]
    for flags, said in ((["-e", "1X=2"], "-e 1X=…: write NAME=VALUE"), (["-w", "relative"], "absolute path"),
                        (["-u", "a b"], "-u a b")):
        refused = cell.devcell("exec", *flags, "sshweb", "--", "true")
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    missing = cell.devcell("exec", "-u", "nosuch", "sshweb", "--", "true")
    assert missing.returncode != 0 and "nosuch" in missing.stdout + missing.stderr
