"""A vm cell's state on the host, damaged or planted: a machine record with fields missing
or of the wrong type, a pidfile that names another process, a pid that is recycled. None of
them is a traceback, and no process DevCell did not start is ever signalled.

No QEMU is booted here: the record is read before any machine starts, and the stand-in
hypervisors are ordinary processes whose command line says `qemu-system-x86_64 -name ...`,
which is all vm_proc reads to decide ownership.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.base import CellRef
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.backend import MARKER, VmBackend
from devcell.errors import BackendError
from tests.backends.vm.conftest import SPEC


@pytest.fixture
def backend(tmp_path: Path) -> VmBackend:
    return VmBackend(state_dir=tmp_path / "state")


def _record(backend: VmBackend, cell_id: str, record: Any) -> CellRef:
    directory = backend.layout.cell(cell_id)
    directory.mkdir(mode=0o700)
    (directory / MARKER).write_text(json.dumps(record))
    return CellRef(cell_id, "box", SPEC, None)


@pytest.mark.parametrize("record", [
    {},
    {"kernel": "/boot/k", "initrd": "/boot/i"},
    {"kernel": "/boot/k", "initrd": "/boot/i", "memory_mib": "lots", "cpus": 1},
    {"kernel": None, "initrd": "/boot/i", "memory_mib": 256, "cpus": 1},
    {"kernel": "/boot/k", "initrd": "/boot/i", "memory_mib": 256, "cpus": [1]},
    # a MAC is given to QEMU inside an option: anything but one DevCell made is refused
    {"kernel": "/boot/k", "initrd": "/boot/i", "memory_mib": 256, "cpus": 1,
     "mac": "52:54:00:00:00:01,netdev=x"},
    {"kernel": "/boot/k", "initrd": "/boot/i", "memory_mib": 256, "cpus": 1, "mac": 5},
])
def test_a_damaged_machine_record_is_a_clear_error(backend: VmBackend, record: Any) -> None:
    ref = _record(backend, "cell_damaged01", record)
    with pytest.raises(BackendError, match=r"machine record of cell cell_damaged01 .* "
                                           r"is damaged") as caught:
        backend.start(ref)
    assert str(caught.value).isprintable()


def test_a_record_that_is_not_json_is_no_machine(backend: VmBackend) -> None:
    ref = _record(backend, "cell_damaged02", {})
    (backend.layout.cell(ref.id) / MARKER).write_bytes(b"\x00{not json")
    assert not backend.observe(ref).exists
    with pytest.raises(BackendError, match="has no machine"):
        backend.start(ref)


@pytest.fixture
def stand_in() -> Iterator[Any]:
    """Start a process whose command line is `qemu-system-x86_64 ... -name LABEL`."""
    started: list[subprocess.Popen[bytes]] = []

    def start(label: str) -> subprocess.Popen[bytes]:
        # sh with argv[0] set: `sh -c SCRIPT $0 $1` keeps `-name LABEL` on its command line.
        proc = subprocess.Popen(["qemu-system-x86_64", "-c", "sleep 60; :", "-name", label],
                                executable="/bin/sh")
        started.append(proc)
        return proc
    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_kill_ends_only_the_labelled_machine(backend: VmBackend, stand_in: Any) -> None:
    label = backend.layout.machine_name("cell_owned0001")
    other = stand_in(backend.layout.machine_name("cell_other0001"))
    mine = stand_in(label)
    vm_proc.kill(other.pid, label)
    assert other.poll() is None  # another label: never signalled
    vm_proc.kill(mine.pid, label)
    assert mine.wait(timeout=10) == -9


def test_a_recycled_pid_is_not_signalled(backend: VmBackend, stand_in: Any) -> None:
    """The machine ended and its pid is gone: kill neither raises nor reaches anyone."""
    label = backend.layout.machine_name("cell_owned0002")
    gone = stand_in(label)
    gone.kill()
    gone.wait()
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        vm_proc.kill(gone.pid, label)
        vm_proc.kill(foreign.pid, label)
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_a_scan_does_not_wait_on_a_process_with_no_command_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A zombie (as a kernel thread) reads as an empty command line: a scan of /proc reads it
    once and goes on; only the check of one pid asks again (a machine mid-exec)."""
    zombie = subprocess.Popen(["true"])
    try:
        while vm_proc._alive(zombie.pid):  # exited, not reaped: a zombie
            time.sleep(0.01)
        slept: list[float] = []
        monkeypatch.setattr(vm_proc.time, "sleep", slept.append)
        assert vm_proc._argv(zombie.pid) == []
        assert slept == []
        assert vm_proc.scan("devcell-no-such-label-") == {}
        assert slept == []
        assert vm_proc._argv(zombie.pid, settle=True) == []
        assert len(slept) == vm_proc.EXEC_RETRIES - 1
    finally:
        zombie.wait()


@pytest.mark.parametrize("content", [b"abc", b"99999999999999999999999", b"-1", b"\xff\xfe",
                                     b"1" * 10_000, str(os.getpid()).encode()])
def test_a_planted_pidfile_is_not_believed(backend: VmBackend, content: bytes) -> None:
    ref = _record(backend, "cell_planted01", {})
    (backend.layout.cell(ref.id) / vm_proc.PIDFILE).write_bytes(content)
    assert backend.stop(ref) == {"stopped": False}
    assert not backend.observe(ref).running


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", "", "cell_x\n", "/etc"])
def test_an_id_that_could_escape_a_directory_is_refused(backend: VmBackend, bad: str) -> None:
    """Cell, volume, checkpoint (disk and machine snapshot) and layer ids become paths only
    after the same check: nothing outside the state directory is ever named."""
    for make in (backend.layout.cell, backend.layout.volume, backend.layout.checkpoint,
                 backend.machines.path, backend.disks.layers.path,
                 backend.layout.machine_name):
        with pytest.raises(BackendError):
            make(bad)
    with pytest.raises(BackendError):
        backend.start(CellRef(bad, "box", SPEC, None))


def test_a_fork_without_its_own_identity_is_not_used(backend: VmBackend,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork whose start failed between its resume and its identity runs as its parent's
    copy (hostname, machine-id, random state): exec and logs refuse it, saying why."""
    ref = _record(backend, "cell_forked001", {
        "kernel": "/boot/k", "initrd": "/boot/i", "memory_mib": 256, "cpus": 1,
        "identity_pending": True})
    monkeypatch.setattr(VmBackend, "_pid", lambda self, cell_id: 4242)  # "running"
    with pytest.raises(BackendError, match="not yet given its own identity"):
        backend.exec(ref, ["hostname"], stdout=io.BytesIO(), stderr=io.BytesIO())
    with pytest.raises(BackendError, match="not yet given its own identity"):
        backend.log_sources(ref)
