"""Wake on access of a sleeping vm cell, on real QEMU: `devcell exec`, `devcell ssh` and
OpenSSH through `ssh-proxy` wake it with its processes (a process started before the sleep
runs on after the wake, same pid, same command line), and a wake whose saved machine cannot be
resumed boots the cell cold from its kept disks instead, saying its processes were not restored.

One booted machine for the module (128 MiB, no network); each test sleeps and wakes it
(a save and a resume: a few seconds each under TCG). About 1 to 2 minutes in all.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.vm import disks as vm_disks
from devcell.backends.vm.layout import VmLayout
from tests.backends.ssh_support import Cell, serve_cell
from tests.backends.vm.conftest import cell_manifest, make_state
from tests.backends.vm_machines import kill_machines

NAME = "waker"
MARK = "sleep 86400"  # the process started before each sleep


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path) -> Iterator[Cell]:
    base = tmp_path_factory.mktemp("vmwake")
    state = make_state(base / "state", vm_cache)
    manifest = cell_manifest(base, NAME, counter=False)
    made = Cell(state, base / "ssh_config", base / "local", timeout=300)
    try:
        yield serve_cell(made, manifest, NAME, timeout=600)
    finally:
        kill_machines(state)


def _start_marked_process(cell: Cell) -> str:
    """A process in the guest that outlives the exec that started it: its pid."""
    done = cell.devcell("exec", NAME, "--", "sh", "-c",
                        f"setsid {MARK} </dev/null >/dev/null 2>&1 & echo $!")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _sleep(cell: Cell) -> None:
    done = cell.devcell("cell", "sleep", NAME)
    assert done.returncode == 0, done.stderr
    phase = cell.devcell("get", "cell", NAME, "-o", "jsonpath={.status.phase}").stdout
    assert phase.strip() == "Sleeping"


def _command_line(pid: str) -> str:
    return f"tr '\\0' ' ' < /proc/{pid}/cmdline"


def test_exec_wakes_a_sleeping_vm_cell_with_its_processes(cell: Cell) -> None:
    pid = _start_marked_process(cell)
    _sleep(cell)
    woken = cell.devcell("exec", NAME, "--", "sh", "-c", _command_line(pid))
    assert woken.returncode == 0, woken.stderr
    assert woken.stdout.strip() == MARK
    assert f"cell {NAME} is asleep; waking it for exec..." in woken.stderr
    assert "resumed from the saved machine: processes and memory came back" in woken.stderr


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs openssh-client")
def test_ssh_and_openssh_through_ssh_proxy_wake_it_with_its_processes(cell: Cell) -> None:
    pid = _start_marked_process(cell)
    _sleep(cell)
    woken = cell.devcell("ssh", NAME, "--", _command_line(pid))
    assert woken.returncode == 0, woken.stderr
    assert woken.stdout.strip() == MARK
    assert f"cell {NAME} is asleep; waking it for ssh..." in woken.stderr
    assert "processes and memory came back" in woken.stderr
    _sleep(cell)
    through_proxy = cell.ssh(f"{NAME}.devcell", _command_line(pid))
    assert through_proxy.returncode == 0, through_proxy.stderr
    assert through_proxy.stdout.decode().strip() == MARK
    assert b"waking it for ssh" in through_proxy.stderr


def test_a_wake_that_cannot_resume_boots_cold_and_says_so(cell: Cell) -> None:
    pid = _start_marked_process(cell)
    _sleep(cell)
    shown = json.loads(cell.devcell("get", "cell", NAME, "-o", "json").stdout)
    saved = VmLayout(cell.state).checkpoint(shown["status"]["sleep"]["checkpointId"])
    (saved / vm_disks.MEMORY).write_bytes(b"not a saved machine\n" * 64)  # its device state
    woken = cell.devcell("exec", NAME, "--", "sh", "-c",
                         f"test -e /proc/{pid} && {_command_line(pid)} || echo gone")
    assert woken.returncode == 0, woken.stderr
    assert "resuming its saved machine failed" in woken.stderr
    assert "booted cold from its kept workspace instead: its processes were not restored" \
        in woken.stderr
    assert woken.stdout.strip() != MARK
    described = cell.devcell("describe", "cell", NAME).stdout
    assert "cold boot from the persisted workspace; processes and memory were not restored " \
           "(resuming the saved machine failed" in described
    assert cell.devcell("get", "cell", NAME, "-o",
                        "jsonpath={.status.phase}").stdout.strip() == "Running"
