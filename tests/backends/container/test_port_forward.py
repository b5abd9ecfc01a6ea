"""`devcell port-forward` on the real Docker engine: a cell with no network at all (mode
none) serves HTTP on its own loopback, and the host reaches it through a local port; a port
nothing listens on is said and the forward goes on; bytes come through unchanged."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.container.support import IMAGE
from tests.conftest import REPO, Cli


@pytest.fixture
def web(engine: None, cli: Cli, tmp_path: Path) -> Iterator[str]:
    manifest = tmp_path / "web.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: web}\nspec:\n"
        f"  backend: container\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        "  services:\n    - name: http\n"
        '      command: [httpd, -f, -p, "127.0.0.1:8000", -h, /workspace]\n')
    done = cli("apply", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    made = cli("exec", "web", "--", "sh", "-c",
               "echo hello > /workspace/index.html && "
               "head -c 20971520 /dev/urandom > /workspace/big.bin && sha256sum /workspace/big.bin")
    assert made.returncode == 0, made.stderr
    yield made.stdout.split()[-2]


def _forward(state: Path, *ports: str) -> tuple[subprocess.Popen[str], list[int]]:
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "port-forward", "web", *ports],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, DEVCELL_HOME=str(state)))
    assert proc.stdout is not None
    locals_ = []
    for _ in ports:
        line = proc.stdout.readline()
        found = re.fullmatch(r"Forwarding from 127\.0\.0\.1:(\d+) -> \d+\n", line)
        assert found, (line, proc.poll())
        locals_.append(int(found.group(1)))
    return proc, locals_


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err  # Ctrl-C is how a forward ends
    assert "Traceback" not in err
    return err


def test_a_cell_without_a_network_is_reached_through_a_local_port(web: str, state: Path) -> None:
    proc, (port,) = _forward(state, ":8000")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10).read()
        assert body == b"hello\n"
        began = time.monotonic()
        data = urllib.request.urlopen(f"http://127.0.0.1:{port}/big.bin", timeout=60).read()
        print(f"20 MiB through the forward in {time.monotonic() - began:.2f} s")
        assert hashlib.sha256(data).hexdigest() == web  # unchanged, byte for byte
    finally:
        _stop(proc)


def test_a_port_nothing_listens_on_is_said_and_the_forward_goes_on(
        web: str, state: Path, cli: Cli) -> None:
    proc, (dead, alive) = _forward(state, ":9999", ":8000")
    try:
        shown = cli("describe", "cell", "web").stdout
        assert f"127.0.0.1:{alive} -> 8000 (port-forward, pid {proc.pid})" in shown, shown
        with socket.create_connection(("127.0.0.1", dead), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(1) == b""  # closed: the cell refused it
        body = urllib.request.urlopen(f"http://127.0.0.1:{alive}/index.html", timeout=10).read()
        assert body == b"hello\n"
    finally:
        err = _stop(proc)
    assert "connecting to port 9999 in cell web: Connection refused" in err
    assert "port-forward" not in cli("describe", "cell", "web").stdout  # ended with it
