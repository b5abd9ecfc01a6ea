"""The Firecracker driver as a process DevCell owns: started, proven by its --id, configured,
saved, restored and ended, against a stand-in that serves Firecracker's API description
(firecracker_fake.py; not Firecracker, which has not run on this host). And the clear errors
a user gets when choosing Firecracker on a host that cannot run it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from devcell.backends.base import CellRef
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.backend import VmBackend
from devcell.backends.vm.drivers import choose as vm_drivers
from devcell.backends.vm.drivers import firecracker as vm_firecracker
from devcell.backends.vm.drivers import firecracker_api as api
from devcell.backends.vm.drivers.driver import Disk, MachineConfig
from devcell.errors import BackendUnavailable, CapabilityMissing
from tests.backends.vm import firecracker_contract as contract
from tests.backends.vm import firecracker_fake as fake

LABEL = "devcell-0123456789abcdef-cell_fctest0001"


@pytest.fixture()
def stand_in(tmp_path: Path) -> Path:
    """An executable that runs as `firecracker` (its argv[0], as /proc shows it) and serves
    the fake API; the bash `exec -a` keeps the name the ownership check reads."""
    script = tmp_path / "bin" / "firecracker"
    script.parent.mkdir()
    paths = os.pathsep.join(p for p in sys.path if p)
    script.write_text(f"#!/bin/bash\nexport PYTHONPATH={paths!r}\n"
                      f"exec -a firecracker {sys.executable} {Path(fake.__file__)} \"$@\"\n")
    script.chmod(0o700)
    return script


@pytest.fixture()
def cell_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "cell"
    directory.mkdir(mode=0o700)
    yield directory
    for name, pid in vm_proc.scan("devcell-0123456789abcdef-").items():
        if name == LABEL:
            vm_proc.kill(pid, LABEL)


def config(directory: Path) -> MachineConfig:
    return MachineConfig(
        name=LABEL, directory=directory, kernel=Path("/boot/vmlinux"),
        initrd=directory / "initrd.cpio", cmdline="console=ttyS0", memory_mib=128, cpus=1,
        disks=(Disk(directory / "root.img", "raw"), Disk(directory / "ws.img", "raw")),
        accel="kvm", driver="firecracker")


def recorded(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def documented_success(request: dict[str, object]) -> int | None:
    described = contract.endpoint(str(request["method"]), str(request["path"]))
    return None if described is None else described.success


def test_boot_save_restore_and_shutdown_of_an_owned_process(
        stand_in: Path, cell_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    record = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_FIRECRACKER_RECORD", str(record))
    driver = vm_firecracker.FirecrackerDriver(binary=str(stand_in))
    machine = config(cell_dir)

    pid = driver.boot(machine)
    assert vm_proc.is_owned(pid, LABEL)  # proven by --id, as a QEMU is by -name
    assert vm_proc.find(cell_dir, LABEL) == pid
    assert vm_proc.scan("devcell-0123456789abcdef-") == {LABEL: pid}
    assert driver.running(machine) and not driver.paused(machine)
    assert (cell_dir / api.CONSOLE_FILE).stat().st_mode & 0o077 == 0

    memory = tmp_path / "sleep" / "memory.bin"
    memory.parent.mkdir()
    saved = driver.save(machine, memory)
    assert saved.path == memory and vm_firecracker.state_file(memory).is_file()
    assert saved.size_bytes >= 128 << 20
    assert vm_proc.wait_gone(pid, LABEL, 5.0)

    pid = driver.restore(machine, memory)
    assert driver.running(machine)
    diff = driver.snapshot(machine, tmp_path / "sleep" / "diff.bin", api.SnapshotKind.DIFF)
    assert diff.path.is_file() and driver.running(machine)
    driver.shutdown(machine, pid, timeout=0.5)  # the stand-in ignores Ctrl-Alt-Del: killed
    assert not vm_proc.is_owned(pid, LABEL)

    requests = recorded(record)
    assert all(r["errors"] == [] and r["status"] == documented_success(r) for r in requests), \
        requests
    paths = [(r["method"], r["path"]) for r in requests if r["path"] != "/"]
    boot, rest = paths[:paths.index(("PUT", "/actions")) + 1], paths[len(paths) - 9:]
    assert boot[2:5] == [("PUT", "/machine-config"), ("PUT", "/boot-source"),
                         ("PUT", "/drives/vda")]
    assert rest == [("PATCH", "/vm"), ("PUT", "/snapshot/create"),  # save: Full, not resumed
                    ("PUT", "/logger"), ("PUT", "/metrics"), ("PUT", "/snapshot/load"),
                    ("PATCH", "/vm"), ("PUT", "/snapshot/create"), ("PATCH", "/vm"),
                    ("PUT", "/actions")]


def test_a_stand_in_that_dies_is_a_clear_error(cell_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "firecracker"
    broken.write_text("#!/bin/sh\necho 'Invalid instance ID' >&2\nexit 1\n")
    broken.chmod(0o700)
    driver = vm_firecracker.FirecrackerDriver(binary=str(broken))
    with pytest.raises(Exception, match="exited .* Invalid instance ID"):
        driver.boot(config(cell_dir))


def test_no_binary_here_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vm_firecracker.BINARY_ENV, raising=False)
    if shutil.which("firecracker"):
        pytest.skip("a firecracker binary is installed here")
    with pytest.raises(BackendUnavailable, match="firecracker binary not found"):
        vm_firecracker.FirecrackerDriver().probe(Path("/k"), Path("/i"))


def test_a_host_whose_guests_do_not_run_under_kvm_says_firecracker_needs_kvm(
        stand_in: Path) -> None:
    driver = vm_firecracker.FirecrackerDriver(binary=str(stand_in),
                                              kvm_probe=lambda kernel, initrd: "tcg")
    with pytest.raises(CapabilityMissing, match="needs KVM"):
        driver.probe(Path("/k"), Path("/i"))


def test_choosing_firecracker_fails_at_create_before_any_image_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vm_firecracker.BINARY_ENV, raising=False)
    if shutil.which("firecracker"):
        pytest.skip("a firecracker binary is installed here")
    backend = VmBackend(state_dir=tmp_path / "state")
    spec = {"backend": "vm", "image": "devcell/none:never", "vm": {"driver": "firecracker"}}
    with pytest.raises(BackendUnavailable, match="firecracker binary not found"):
        backend.create(CellRef("cell_fcx0001", "fc", spec, None), "hash")
    assert not backend.layout.cell("cell_fcx0001").exists()
    assert vm_drivers.spec_driver({}) == "qemu-microvm"


def test_firecracker_ids_carry_the_label_both_ways() -> None:
    machine_id = vm_proc.firecracker_id(LABEL)
    assert "_" not in machine_id and len(machine_id) <= vm_firecracker.MAX_ID
    argv = ["/usr/local/bin/firecracker", "--api-sock", "api.sock", "--id", machine_id]
    assert vm_proc.machine_name(argv) == LABEL
    assert vm_proc.machine_name(["/usr/bin/python3", "--id", machine_id]) is None


def _vsock_mux(path: Path, *, accept_port: int) -> None:
    """Firecracker's host side of vsock: `CONNECT <port>` then `OK <n>`, and behind it a
    guest agent that answers guest-sync-delimited and guest-ping (or a closed port)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def run() -> None:
        while True:
            conn, _ = listener.accept()
            line = conn.makefile("rb").readline()
            if line != f"CONNECT {accept_port}\n".encode():
                conn.close()
                continue
            conn.sendall(b"OK 1073741824\n")
            for raw in conn.makefile("rb"):
                request = json.loads(raw.lstrip(b"\xff"))
                if request["execute"] == "guest-sync-delimited":
                    conn.sendall(b"\xff" + json.dumps(
                        {"return": request["arguments"]["id"]}).encode() + b"\n")
                else:
                    conn.sendall(json.dumps({"return": {}, "id": request.get("id")}).encode()
                                 + b"\n")  # qemu-ga echoes a request's id
            return
    threading.Thread(target=run, daemon=True).start()


def test_the_guest_agent_is_reached_over_vsock(tmp_path: Path) -> None:
    _vsock_mux(tmp_path / api.VSOCK_SOCKET, accept_port=vm_firecracker.AGENT_PORT)
    with vm_firecracker.VsockAgent(tmp_path, port=vm_firecracker.AGENT_PORT,
                                   timeout=5.0) as agent:
        assert agent.command("guest-ping") == {}


def test_a_closed_vsock_port_is_unavailable_after_the_timeout(tmp_path: Path) -> None:
    _vsock_mux(tmp_path / api.VSOCK_SOCKET, accept_port=9)
    with pytest.raises(BackendUnavailable, match="vsock port 1024"):
        vm_firecracker.VsockAgent(tmp_path, port=1024, timeout=0.5)


def test_each_call_goes_to_the_driver_the_cell_was_made_with(
        stand_in: Path, cell_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    monkeypatch.setenv(vm_firecracker.BINARY_ENV, str(stand_in))
    drivers = vm_drivers.Dispatch(accel_cache=tmp_path / "accel.json")
    machine = config(cell_dir)
    assert isinstance(drivers.of(machine), vm_firecracker.FirecrackerDriver)
    assert drivers.of(replace(machine, driver="qemu-microvm")).name == "qemu-microvm"
    with pytest.raises(CapabilityMissing, match="'hyperv'"):
        drivers.of(replace(machine, driver="hyperv"))
    pid = drivers.boot(machine)
    assert vm_proc.is_owned(pid, LABEL) and drivers.running(machine)
    assert not drivers.running(replace(machine, driver="qemu-microvm"))  # QEMU: no monitor
    drivers.shutdown(machine, pid, timeout=0.2)
    assert not vm_proc.is_owned(pid, LABEL)


def test_a_machine_snapshot_pause_through_dispatch_is_refused_by_firecracker(
        stand_in: Path, cell_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """A machine snapshot pauses, then switches the workspace disk to a new layer:
    Firecracker's raw disks have no layers, so its pause says so instead of half-working."""
    monkeypatch.setenv(vm_firecracker.BINARY_ENV, str(stand_in))
    drivers = vm_drivers.Dispatch(accel_cache=tmp_path / "accel.json")
    machine = config(cell_dir)
    pid = drivers.boot(machine)
    try:
        with pytest.raises(CapabilityMissing, match="no layers"):
            drivers.pause(machine)
        assert drivers.running(machine)  # left as it was
    finally:
        drivers.shutdown(machine, pid, timeout=0.2)


def test_a_firecracker_devcell_did_not_label_is_never_touched(
        stand_in: Path, cell_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    foreign = subprocess.Popen([str(stand_in), "--api-sock", str(other / api.API_SOCKET),
                                "--id", "devcell-0123456789abcdef-cell-someoneelse"])
    try:
        with api.FirecrackerApi(other, timeout=1.0) as client:  # up, under its own name
            for _ in range(100):
                try:
                    client.state()
                    break
                except BackendUnavailable:
                    time.sleep(0.05)
        assert vm_proc.scan("devcell-0123456789abcdef-") == {
            "devcell-0123456789abcdef-cell_someoneelse": foreign.pid}
        (cell_dir / vm_proc.PIDFILE).write_text(f"{foreign.pid}\n")  # planted
        assert vm_proc.find(cell_dir, LABEL) is None
        driver = vm_firecracker.FirecrackerDriver(binary=str(stand_in))
        driver.shutdown(config(cell_dir), foreign.pid, timeout=0.2)
        vm_proc.kill(foreign.pid, LABEL)
        assert foreign.poll() is None  # still running: not DevCell's to end
    finally:
        foreign.kill()
        foreign.wait()
