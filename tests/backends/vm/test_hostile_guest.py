"""Root in a real vm cell replaces qemu-guest-agent with its own program on the agent's port.

The guest kills the init's agent loop and qemu-ga, then answers the host itself: syncs
honestly (so the host believes it), then each guest-exec a different way: an error whose
text carries an escape sequence and a forged output line (after a reply to another id),
JSON nested 100 000 levels deep, silence, and a line that never ends. Each `devcell logs`
(commands go through the stream helper, vm/streams.py; logs, quiesce and the clock still go
through the agent) must end with a clear error naming the cell, within its timeouts, with no traceback and
nothing unescaped; and the cell is still deleted (stopped first) with no QEMU left behind.
The parser's own bounds (memory, every reply shape) are in
tests/adversarial/test_hostile_guest_agent.py, against a fake agent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.layout import VmLayout
from tests.backends.vm.conftest import cell_manifest, make_state
from tests.backends.vm_machines import kill_machines
from tests.conftest import Cli

STOP_AGENT = r"""
sleep 2  # the host has collected this command's status by now
init=$(tr '\0' ' ' < /proc/1/cmdline)
for p in /proc/[0-9]*; do
    n=${p#/proc/}
    [ "$n" = 1 ] && continue
    c=$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null)
    case "$c" in "$init"|*qemu-ga*) kill -9 "$n" ;; esac
done
"""
"""Kills the init's agent loop and qemu-ga: the agent's port is then the guest's own."""

HOSTILE_AGENT = STOP_AGENT + r"""
port=
for d in /sys/class/virtio-ports/*; do
    [ "$(cat "$d/name")" = org.qemu.guest_agent.0 ] && port=/dev/${d##*/}
done
bomb=$(head -c 100000 /dev/zero | tr '\0' '[')
chunk=$(head -c 65536 /dev/zero | tr '\0' 'A')
n=0
while :; do
    exec 3<>"$port"
    while read -r line <&3; do
        id=$(echo "$line" | sed -n 's/.*"id": *\("\{0,1\}[-a-z0-9]*"\{0,1\}\).*/\1/p')
        case "$line" in
        *guest-sync-delimited*) printf '\377{"return": %s}\n' "$id" >&3 ;;
        *)
            n=$((n+1))
            case $n in
            1) printf '{"return": 0, "id": "other"}\n' >&3
               desc='\u001b[31mred\ncell/evil created'
               printf '{"error": {"desc": "%s"}, "id": %s}\n' "$desc" "$id" >&3 ;;
            2) printf '%s\n' "$bomb" >&3 ;;
            3) : ;;
            *) while :; do printf '%s' "$chunk"; done >&3 ;;
            esac ;;
        esac
    done
    exec 3<&-
    sleep 0.2
done
"""


def _manifest(tmp_path: Path) -> Path:
    return cell_manifest(tmp_path, "vmevil")  # its service's log is read through the agent


def _applied_and_planted(cli: Cli, tmp_path: Path, script: str) -> None:
    """The cell `vmevil` running, and `script` started in it as root, on its own (it
    outlives the exec that planted it); five seconds later it has done its work."""
    applied = cli("apply", "-f", str(_manifest(tmp_path)), timeout=300)
    assert applied.returncode == 0, applied.stderr
    planted = cli("exec", "-i", "vmevil", "--", "sh", "-c",
                  "cat > /tmp/plant.sh; setsid sh /tmp/plant.sh </dev/null >/dev/null 2>&1 &",
                  input=script, timeout=300)
    assert planted.returncode == 0, planted.stderr
    time.sleep(5)


def test_a_guest_that_replaces_its_agent_gets_clear_errors_and_the_cell_still_ends(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    make_state(state_dir, vm_cache)
    prefix = VmLayout(state_dir).name_prefix
    try:
        _applied_and_planted(cli, tmp_path, HOSTILE_AGENT)  # it kills its agent, is its own
        expected = ["refused", "(not JSON|more than 4096 JSON objects)", "did not answer in time",
                    "(did not answer in time|longer than)"]
        for n, what in enumerate(expected, 1):
            began = time.monotonic()
            attacked = cli("logs", "vmevil", timeout=300)
            took = time.monotonic() - began
            err = attacked.stderr
            assert attacked.returncode != 0, (n, err)
            assert "Traceback" not in err, err
            assert "cell vmevil" in err, err
            assert re.search(what, err), (n, err)
            assert "\x1b" not in err and "\ncell/evil created" not in err, err
            assert took < 200, (n, took)  # bounded by the agent's timeouts, never a hang
        deleted = cli("delete", "cell", "vmevil", "--approve", timeout=300)
        assert deleted.returncode == 0, deleted.stderr
        assert not vm_proc.scan(prefix)
    finally:
        kill_machines(state_dir)


def test_a_deep_state_directory_and_owner_only_machine_files(
        cli: Cli, tmp_path: Path, vm_cache: Path) -> None:
    """QMP's and the agent's socket paths past a sockaddr_un's 108 bytes still work (reached
    through /proc/self/fd), the largest output an honest agent sends is read in time, and
    nothing of a running machine is open to other users: its directory is 0700, its RAM
    file 0600, no file in it group- or world-writable."""
    state = tmp_path / ("d" * 60) / ("e" * 60) / "state"
    state.mkdir(parents=True)
    make_state(state, vm_cache)
    env = {"DEVCELL_HOME": str(state)}
    layout = VmLayout(state)
    try:
        applied = cli("apply", "-f", str(_manifest(tmp_path)), env=env, timeout=300)
        assert applied.returncode == 0, applied.stderr
        (cell_dir,) = [p for p in layout.cells.iterdir() if not p.name.startswith(".")]
        assert len(str(cell_dir / "qmp.sock")) > 108
        ran = cli("exec", "vmevil", "--", "echo", "deep", env=env, timeout=300)
        assert (ran.returncode, ran.stdout) == (0, "deep\n"), ran.stderr
        # The most an honest agent sends: 16 MiB on both streams, one ~45 MiB reply line
        # (read quadratically before, it took longer than the 10 s command timeout).
        full = subprocess.run(
            [sys.executable, "-m", "devcell", "exec", "vmevil", "--", "sh", "-c",
             f"head -c {16 << 20} /dev/zero; head -c {16 << 20} /dev/zero >&2"],
            capture_output=True, env=dict(os.environ, **env), timeout=300)
        assert full.returncode == 0, full.stderr[-2000:]
        assert (full.stdout, full.stderr) == (bytes(16 << 20), bytes(16 << 20))
        slept = cli("cell", "sleep", "vmevil", env=env, timeout=300)  # QMP: save to file
        assert slept.returncode == 0, slept.stderr
        started = cli("cell", "start", "vmevil", env=env, timeout=300)
        assert started.returncode == 0, started.stderr
        assert cell_dir.stat().st_mode & 0o077 == 0
        assert (cell_dir / "ram.bin").stat().st_mode & 0o777 == 0o600
        for entry in cell_dir.iterdir():
            assert entry.lstat().st_mode & 0o022 == 0, entry
        deleted = cli("delete", "cell", "vmevil", "--approve", env=env, timeout=300)
        assert deleted.returncode == 0, deleted.stderr
        assert not vm_proc.scan(layout.name_prefix)
    finally:
        kill_machines(state)


def test_a_booted_guest_that_stops_its_agent_is_reported_soon_not_after_the_boot_timeout(
        cli: Cli, tmp_path: Path, state_dir: Path, vm_cache: Path) -> None:
    """Once a machine's agent has answered, its machine is past booting: `logs` then waits
    AGENT_ANSWER_SECONDS for a silent agent, not the 120 s a boot may take, and says what to
    do. A stop and start boots it afresh, agent and all."""
    make_state(state_dir, vm_cache)
    try:
        _applied_and_planted(cli, tmp_path, STOP_AGENT)
        began = time.monotonic()
        silent = cli("logs", "vmevil", timeout=300)
        took = time.monotonic() - began
        assert silent.returncode != 0 and "Traceback" not in silent.stderr, silent.stderr
        assert "cell vmevil" in silent.stderr and "has booted" in silent.stderr, silent.stderr
        assert "spec.state: Stopped" in silent.stderr, silent.stderr
        assert took < 90, took  # 30 s and the process, not the boot timeout's 120 s
        manifest = _manifest(tmp_path)
        for state in ("Stopped", "Running"):
            manifest.write_text(manifest.read_text() + f"  state: {state}\n"
                                if state == "Stopped" else
                                manifest.read_text().replace("state: Stopped", "state: Running"))
            done = cli("apply", "-f", str(manifest), timeout=300)
            assert done.returncode == 0, done.stderr
        again = cli("exec", "vmevil", "--", "echo", "back", timeout=300)
        assert again.returncode == 0 and again.stdout.strip() == "back", again.stderr
        assert cli("delete", "cell", "vmevil", "--approve", timeout=300).returncode == 0
    finally:
        kill_machines(state_dir)
