"""A vm cell serves the host (issue 30 item 5): its spec.network.ports published on the host's
loopback by the machine's own user network (QEMU's, restricted), the guest's loopback up, the
port kept through sleep and wake, and forks of a machine snapshot (`cell fork --count`) each
publishing their own port.

One machine for the module, driven through the CLI as a user drives it: one TCG boot (5-30 s
on a loaded host), a sleep and a wake (about a second each) and two fork resumes (a few
seconds each). Every connection is to the host's loopback or inside the guest.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.vm import network as vm_network
from devcell.backends.vm.drivers.driver import Forward
from devcell.backends.vm.drivers.qemu import user_network
from tests.backends.engine import IMAGE
from tests.backends.vm.conftest import make_state
from tests.backends.vm_machines import kill_machines
from tests.conftest import REPO

PAGE = "served-by-vm"


class Cell:
    """The module's vm cell: its state directory, host port and the CLI bound to both."""

    def __init__(self, state: Path, port: int) -> None:
        self.state = state
        self.port = port

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, DEVCELL_HOME=str(self.state))
        env.pop("DEVCELL_FAKE_FAIL", None)
        return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(port: int, *, wait: float = 120.0) -> str:
    """GET http://127.0.0.1:PORT/, retried until the guest's server answers (it starts after
    the boot) or `wait` runs out; the last error is raised."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as reply:
                return str(reply.read().decode())
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def listening_on(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                found.append(local.rsplit(":", 1)[0])
    return found


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path) -> Iterator[Cell]:
    base = tmp_path_factory.mktemp("vmnet")
    made = Cell(make_state(base / "state", vm_cache), free_port())
    manifest = base / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: web}}
        spec:
          backend: vm
          image: {IMAGE}
          network:
            mode: bridge
            ports: [{{containerPort: 8000, hostPort: {made.port}}}]
          workspace: {{mountPath: /workspace}}
          resources: {{memory: 128Mi}}
          services:
            - name: http
              command: [sh, -c, "echo {PAGE} > /workspace/index.html; exec httpd -f -p 8000 -h /workspace"]
        """))
    try:
        applied = made.cli("apply", "-f", str(manifest), timeout=600)
        assert applied.returncode == 0, applied.stderr
        yield made
    finally:
        kill_machines(made.state)


def test_a_published_port_answers_on_the_hosts_loopback_only(cell: Cell) -> None:
    assert fetch(cell.port) == PAGE + "\n"
    assert listening_on(cell.port) == ["0100007F"]  # 127.0.0.1, nothing else


def test_the_guests_loopback_is_up_and_wget_127_0_0_1_works(cell: Cell) -> None:
    fetch(cell.port)  # the server runs
    inside = cell.cli("exec", "web", "--", "wget", "-q", "-O", "-", "http://127.0.0.1:8000/")
    assert (inside.returncode, inside.stdout) == (0, PAGE + "\n"), inside.stderr
    named = cell.cli("exec", "web", "--", "wget", "-q", "-O", "-", "http://localhost:8000/")
    assert named.stdout == PAGE + "\n", named.stderr


def test_the_guest_reaches_nothing_outside_its_forwards(cell: Cell) -> None:
    """restrict=on: the user network's gateway (10.0.2.2, which unrestricted would lead to
    the host's loopback) takes nothing from the guest, and there is no default route."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()  # a connection that reached it would wait in the backlog
        port = server.getsockname()[1]
        tried = cell.cli("exec", "web", "--", "sh", "-c",
                         f"timeout 10 nc -w 5 10.0.2.2 {port} </dev/null; echo status=$?; "
                         "ip route")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing came: the guest did not reach the host's loopback
    assert tried.returncode == 0, tried.stderr
    assert "status=0" not in tried.stdout and "status=" in tried.stdout
    assert "default" not in tried.stdout


def test_the_port_answers_again_after_sleep_and_wake(cell: Cell) -> None:
    fetch(cell.port)
    pid = cell.cli("exec", "web", "--", "sh", "-c", "pidof httpd").stdout.strip()
    assert pid
    slept = cell.cli("cell", "sleep", "web")
    assert slept.returncode == 0, slept.stderr
    assert listening_on(cell.port) == []  # its machine is saved: nothing holds the port
    woke = cell.cli("cell", "start", "web")
    assert woke.returncode == 0, woke.stderr
    assert "resumed from the saved machine" in cell.cli("describe", "cell", "web").stdout
    assert fetch(cell.port, wait=30) == PAGE + "\n"
    again = cell.cli("exec", "web", "--", "sh", "-c", "pidof httpd").stdout.strip()
    assert again == pid, "the same server answers: its process came back with the machine"


def test_forks_of_a_machine_snapshot_each_publish_their_own_port(cell: Cell) -> None:
    """`cell fork --count 2 --port 8000:P`: fork K's server (resumed, not restarted)
    answers on P+K-1, the parent's on its own port still."""
    fetch(cell.port)
    taken = cell.cli("snapshot", "create", "web", "--name", "warm", "--consistency", "machine")
    assert taken.returncode == 0, taken.stderr
    first = free_port()
    while first + 1 in (cell.port,) or listening_on(first + 1):
        first = free_port()
    forked = cell.cli("cell", "fork", "web", "--snapshot", "warm", "--name", "exp",
                      "--count", "2", "--port", f"8000:{first}")
    assert forked.returncode == 0, forked.stderr
    for k, port in ((1, first), (2, first + 1)):
        assert fetch(port, wait=60) == PAGE + "\n"
        assert listening_on(port) == ["0100007F"]
        shown = cell.cli("exec", f"exp-{k}", "--", "sh", "-c",
                         "hostname; wget -q -O - http://127.0.0.1:8000/")
        assert shown.stdout.splitlines() == [f"exp-{k}", PAGE], shown.stderr
        described = cell.cli("describe", "cell", f"exp-{k}").stdout
        assert "resumed from a machine snapshot as a new machine" in described
    assert fetch(cell.port) == PAGE + "\n"
    gone = cell.cli("delete", "cell", "exp-1", "exp-2", "--approve")
    assert gone.returncode == 0, gone.stderr
    assert listening_on(first) == [] and listening_on(first + 1) == []


def test_the_forwards_a_record_keeps_and_the_netdev_they_make() -> None:
    """No machine: spec -> record -> QEMU's -netdev, and a damaged record named."""
    spec = {"network": {"mode": "bridge", "ports": [
        {"containerPort": 8000}, {"containerPort": 80, "hostPort": 18080, "hostIP": "0.0.0.0"}]}}
    record = {"forwards": vm_network.forwards(spec)}
    assert vm_network.of_record(record) == (Forward("127.0.0.1", 8000, 8000),
                                            Forward("0.0.0.0", 18080, 80))
    assert user_network(vm_network.of_record(record)) == (
        "user,id=net0,restrict=on,ipv6=off,hostfwd=tcp:127.0.0.1:8000-10.0.2.15:8000,"
        "hostfwd=tcp:0.0.0.0:18080-10.0.2.15:80")
    for damaged in (["127.0.0.1", 0, 80], ["127.0.0.1,guestfwd=x", 1, 2], ["", 1, 2], "x"):
        with pytest.raises(ValueError, match="is not \\[address, port, port\\]"):
            vm_network.of_record({"forwards": [damaged]})


def test_a_host_port_another_program_holds_fails_the_start_with_the_reason(
        cell: Cell, tmp_path: Path) -> None:
    """QEMU cannot bind the forward: the cell fails naming the port, not retried for ever
    (as a container's "port is already allocated"); no machine is left. A second or two:
    QEMU stops before any boot."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        manifest = tmp_path / "busy.yaml"
        manifest.write_text(textwrap.dedent(f"""\
            apiVersion: devcell.dev/v1alpha1
            kind: Cell
            metadata: {{name: busy}}
            spec:
              backend: vm
              image: {IMAGE}
              network: {{mode: bridge, ports: [{{containerPort: 8000, hostPort: {port}}}]}}
              resources: {{memory: 128Mi}}
            """))
        refused = cell.cli("apply", "-f", str(manifest))
    assert refused.returncode == 1
    assert (f"host port 127.0.0.1:{port} (published from port 8000) is held by another "
            "program or cell") in refused.stderr
    assert "Traceback" not in refused.stderr
    shown = cell.cli("get", "cell", "busy", "-o", "jsonpath={.status.phase}")
    assert shown.stdout == "Failed", shown.stderr
    assert cell.cli("delete", "cell", "busy", "--approve").returncode == 0


def test_forwards_are_judged_again_against_the_configuration_at_each_boot(
        tmp_path: Path) -> None:
    """A machine saved while an address was allowed is not woken onto it once the
    administrator took the allowance back: the record's forwards are judged at boot."""
    from types import SimpleNamespace

    from devcell.backends.vm.backend import VmBackend
    from devcell.errors import BackendRefused

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    backend = SimpleNamespace(layout=SimpleNamespace(state_dir=state))
    loopback = SimpleNamespace(name="m", forwards=(Forward("127.0.0.1", 18080, 80),))
    assert VmBackend._allowed(backend, loopback) is loopback  # type: ignore[arg-type]
    wide = SimpleNamespace(name="m", forwards=(Forward("0.0.0.0", 18080, 80),))
    with pytest.raises(BackendRefused, match="allowedPublishAddresses"):
        VmBackend._allowed(backend, wide)  # type: ignore[arg-type]
    (state / "config.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                                       "security:\n  allowedPublishAddresses: ['0.0.0.0']\n")
    os.chmod(state / "config.yaml", 0o600)
    assert VmBackend._allowed(backend, wide) is wide  # type: ignore[arg-type]
