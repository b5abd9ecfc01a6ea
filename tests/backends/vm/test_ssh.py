"""SSH to a vm cell with Debian's real OpenSSH client (ssh, a terminal under tmux, scp, sftp,
rsync -e ssh, -L) and `devcell exec`/`port-forward`, all through the machine's stream ports
(vm/streams.py): no sshd and no network in the guest.

One booted machine for the module (its image adds rsync, copied with its libraries from the
host, to DevCell's busybox base): one image build, one root disk (~10 s) and one TCG boot.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.engine import require_engine
from tests.backends.ssh_support import Cell, interactive_shell, rsync_context, serve_cell
from tests.backends.vm.conftest import make_state
from tests.backends.vm_machines import kill_machines
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="needs openssh-client")
IMAGE = "devcell-test/vm-ssh:1"


def _build_image(base: Path) -> None:
    import docker

    context = rsync_context(base / "image")
    docker.from_env().images.build(path=str(context), tag=IMAGE, rm=True)


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path) -> Iterator[Cell]:
    require_engine()
    base = tmp_path_factory.mktemp("vmssh")
    state = make_state(base / "state", vm_cache)
    _build_image(base)
    manifest = base / "cell.yaml"
    manifest.write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: vmssh}\nspec:\n"
        f"  backend: vm\n  image: {IMAGE}\n  network: {{mode: none}}\n"
        "  workspace: {mountPath: /workspace}\n  resources: {memory: 256Mi}\n"
        "  env: [{name: GREETING, value: from-spec}]\n"
        "  services:\n    - name: http\n"
        '      command: [httpd, -f, -p, "127.0.0.1:8000", -h, /workspace]\n')
    made = Cell(state, base / "ssh_config", base / "local", timeout=300)
    try:
        yield serve_cell(made, manifest, "vmssh", timeout=600)
    finally:
        kill_machines(state)


def test_ssh_runs_a_command_streaming_both_ways_with_its_exit_status(cell: Cell) -> None:
    done = cell.ssh("vmssh.devcell", "uname -a; echo $GREETING; pwd; exit 7")
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 7, done.stderr
    assert lines[0].startswith("Linux vmssh ")
    assert lines[1:] == ["from-spec", "/workspace"]
    assert b"Warning" not in done.stderr
    piped = cell.ssh("vmssh.devcell", "cat; echo done >&2", input=b"piped\n" * 100000)
    assert piped.returncode == 0 and piped.stdout == b"piped\n" * 100000
    assert piped.stderr == b"done\n"
    for _ in range(3):  # a command on a terminal: its last output is not lost with it
        tty = cell.ssh("-tt", "vmssh.devcell", "echo on-a-tty; exit 3")
        assert tty.returncode == 3 and b"on-a-tty" in tty.stdout, (tty.stdout, tty.stderr)


def test_an_interactive_shell_on_a_terminal_under_tmux(cell: Cell) -> None:
    interactive_shell(cell, "vmssh.devcell", seconds=60)


def test_exec_it_gets_a_terminal_the_size_of_the_window_and_its_exit_status(cell: Cell
                                                                           ) -> None:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is missing: scripts/test installs it")
    session = f"devcell-vmexec-{os.getpid()}"
    marker = cell.work / "exec-exited"
    command = (f"cd {REPO} && DEVCELL_HOME={cell.state} {sys.executable} -m devcell exec -it "
               f"vmssh -- sh; echo $? > {marker}")
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "90", "-y", "33",
                    command], check=True)
    try:
        deadline = time.monotonic() + 60
        shown = ""
        while time.monotonic() < deadline and "END-7" not in shown:
            subprocess.run(["tmux", "send-keys", "-t", session,
                            "stty size; tty; echo END-$((3+4))", "Enter"], check=True)
            time.sleep(2)
            shown = subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                   capture_output=True, text=True).stdout
        assert "33 90" in shown and "/dev/pts/" in shown, shown
        subprocess.run(["tmux", "send-keys", "-t", session, "exit 3", "Enter"], check=True)
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.read_text().strip() == "3"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_scp_both_ways_sftp_and_rsync(cell: Cell) -> None:
    payload = os.urandom(3 * 1024 * 1024 + 17)
    (cell.work / "up.bin").write_bytes(payload)
    up = cell.ssh("up.bin", "vmssh.devcell:", program="scp", timeout=300)
    assert up.returncode == 0, up.stderr
    remote = cell.ssh("vmssh.devcell", "sha256sum /workspace/up.bin")
    assert remote.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    down = cell.ssh("vmssh.devcell:/workspace/up.bin", "down.bin", program="scp", timeout=300)
    assert down.returncode == 0, down.stderr
    assert (cell.work / "down.bin").read_bytes() == payload

    batch = cell.work / "batch"
    batch.write_text("mkdir made\ncd made\nput up.bin\nrename up.bin renamed.bin\nls -l\n"
                     "pwd\nsymlink renamed.bin alias\nrm alias\n")
    sftp = cell.ssh("-b", str(batch), "vmssh.devcell", program="sftp", timeout=300)
    assert sftp.returncode == 0, sftp.stderr
    assert b"renamed.bin" in sftp.stdout and b"/workspace/made" in sftp.stdout
    listed = cell.ssh("vmssh.devcell", "ls /workspace/made")
    assert listed.stdout == b"renamed.bin\n"

    tree = cell.work / "src"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("print('hi')\n")
    (tree / "README").write_text("readme\n")
    rsync = subprocess.run(["rsync", "-a", "-e", f"ssh -F {cell.config}", f"{tree}/",
                            "vmssh.devcell:/workspace/src/"], capture_output=True, timeout=300)
    assert rsync.returncode == 0, rsync.stderr
    shown = cell.ssh("vmssh.devcell", "cat /workspace/src/README /workspace/src/pkg/mod.py")
    assert shown.stdout == b"readme\nprint('hi')\n"


def test_a_link_the_cell_planted_is_resolved_inside_the_guest(cell: Cell, tmp_path: Path
                                                              ) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    planted = cell.ssh("vmssh.devcell",
                       f"ln -sf {secret} /workspace/to-host && ln -sf /etc/passwd /workspace/pw"
                       " && ln -sf ../../../../../../.. /workspace/up")
    assert planted.returncode == 0, planted.stderr
    got = cell.ssh("vmssh.devcell:/workspace/to-host", "x", program="scp")
    assert got.returncode != 0 and not (cell.work / "x").exists()  # no such file in the guest
    got = cell.ssh("vmssh.devcell:/workspace/pw", "pw", program="scp")
    assert got.returncode == 0, got.stderr
    assert (cell.work / "pw").read_text().startswith("root:x:0:0:root:/root:/bin/sh")  # guest's
    assert (cell.work / "pw").read_text() != Path("/etc/passwd").read_text()
    climbed = cell.ssh(f"vmssh.devcell:/workspace/up/{secret}", "y", program="scp")
    assert climbed.returncode != 0 and not (cell.work / "y").exists()
    wrote = cell.ssh("pw", "vmssh.devcell:/workspace/to-host", program="scp")
    assert secret.read_text() == "host only\n", wrote.stderr  # the host's file untouched

    assert cell.ssh("vmssh.devcell", "mkfifo /workspace/fifo").returncode == 0
    began = time.monotonic()
    fifo = cell.ssh("vmssh.devcell:/workspace/fifo", "z", program="scp", timeout=30)
    assert fifo.returncode != 0 and time.monotonic() - began < 20  # refused, never blocked


def test_a_client_that_goes_away_takes_its_commands_in_the_guest_with_it(cell: Cell) -> None:
    """The client killed, its proxy ends with it, and the guest's helper, seeing its port
    hung up, kills what that connection ran (a command outlives no one who could see it)."""
    client = subprocess.Popen(["ssh", "-F", str(cell.config), "vmssh.devcell",
                               "sleep 4321"], cwd=cell.work, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def sleepers() -> bytes:
        return cell.ssh("vmssh.devcell", "ps | grep -c '[s]leep 4321'").stdout.strip()

    deadline = time.monotonic() + 30
    while sleepers() != b"1":
        assert time.monotonic() < deadline, "the command never ran"
        time.sleep(0.5)
    os.killpg(client.pid, signal.SIGKILL)
    client.wait(10)
    deadline = time.monotonic() + 30
    while sleepers() != b"0":
        assert time.monotonic() < deadline, "the command outlived its client"
        time.sleep(0.5)


def test_l_and_port_forward_reach_a_server_on_the_guests_loopback(cell: Cell) -> None:
    index = cell.ssh("vmssh.devcell", "echo served-in-vm > /workspace/index.html")
    assert index.returncode == 0
    local = _free_port()
    forward = subprocess.Popen(["ssh", "-F", str(cell.config), "-N", "-L",
                                f"{local}:localhost:8000", "vmssh.devcell"],
                               stderr=subprocess.PIPE)
    try:
        assert _get(f"http://127.0.0.1:{local}/index.html") == b"served-in-vm\n"
        assert _get(f"http://127.0.0.1:{local}/index.html") == b"served-in-vm\n"  # again
    finally:
        forward.terminate()
        forward.wait(10)
    local = _free_port()
    kubectl_like = subprocess.Popen(
        [sys.executable, "-m", "devcell", "port-forward", "vmssh", f"{local}:8000"], cwd=REPO,
        env=dict(os.environ, DEVCELL_HOME=str(cell.state)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        assert _get(f"http://127.0.0.1:{local}/index.html") == b"served-in-vm\n"
    finally:
        kubectl_like.terminate()
        kubectl_like.wait(10)
    closed = cell.ssh("-o", "ExitOnForwardFailure=yes", "-W", "localhost:8999", "vmssh.devcell",
                      timeout=60)
    assert closed.returncode != 0  # nothing listens there: the channel is refused


def test_exec_streams_and_takes_environment_a_working_directory_and_a_user(cell: Cell) -> None:
    done = cell.devcell("exec", "-e", "FOO=bar baz", "-e", "GREETING=overridden", "-w", "/tmp",
                        "-u", "nobody", "vmssh", "--", "sh", "-c",
                        'echo "$FOO|$GREETING"; pwd; id -u')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["bar baz|overridden", "/tmp", "65534"]
    piped = cell.devcell("exec", "-i", "vmssh", "--", "sh", "-c", "wc -c; exit 4",
                         input="y" * 200000)
    assert piped.returncode == 4 and piped.stdout.strip() == "200000", piped.stderr
    missing = cell.devcell("exec", "-u", "nosuch", "vmssh", "--", "true")
    assert missing.returncode != 0 and "no user nosuch" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get(url: str) -> bytes:
    deadline = time.monotonic() + 60
    while True:
        try:
            return bytes(urllib.request.urlopen(url, timeout=30).read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
