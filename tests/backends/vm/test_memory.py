"""The memory side of a vm cell's machine: RAM as a file (sleep writes device state only,
wake maps the file), machine snapshots, and forks of one that resume its processes as new
machines (hostname, machine-id, MAC, random generator). Real QEMU (TCG here), no mocks."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.base import CellRef, Consistency
from devcell.backends.vm import memory as vm_memory
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.backend import RAM_FILE, WORKSPACE_DISK, VmBackend
from devcell.backends.vm.drivers.qmp import Qmp
from devcell.errors import BackendRefused
from tests.backends.vm.conftest import SPEC, booted_cell, run


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path
           ) -> Iterator[tuple[VmBackend, CellRef]]:
    ref = CellRef("cell_vmmem00001", "parent", SPEC, "vol_vmmem00001")
    with booted_cell(tmp_path_factory.mktemp("vmmem") / "state", vm_cache, ref) as backend:
        yield backend, ref


def _counter(backend: VmBackend, ref: CellRef) -> int:
    code, out, err = run(backend, ref, "cat /tmp/counter")
    assert code == 0, err
    return int(out)


def _mac(backend: VmBackend, ref: CellRef) -> str:
    """The MAC of the machine's one NIC, as its guest sees it."""
    code, out, err = run(backend, ref, "ls /sys/class/net; cat /sys/class/net/eth0/address")
    assert code == 0 and out.split()[:2] == ["eth0", "lo"], (out, err)
    return out.split()[2]


def test_sleep_writes_device_state_only_and_wake_maps_the_ram_file(
        parent: tuple[VmBackend, CellRef]) -> None:
    backend, ref = parent
    ram = backend.layout.cell(ref.id) / RAM_FILE
    assert ram.is_file() and os.stat(ram).st_mode & 0o777 == 0o600
    assert b"-kernel" in _qemu_argv(backend, ref)  # booted: QEMU's default TCG buffer
    assert all(not a.startswith(b"tcg,tb-size") for a in _qemu_argv(backend, ref))
    # A page the guest wrote is in the file: the RAM *is* the file.
    assert run(backend, ref, "echo ram-marker-5c1e > /dev/shm/m; sync")[0] == 0
    before = _counter(backend, ref)
    saved = backend.save_machine(ref, "sleep-vmmem-g1")
    state = backend.layout.checkpoint("sleep-vmmem-g1") / "memory.bin"
    assert state.stat().st_size < 4 << 20  # device state, not the guest's pages
    assert b"ram-marker-5c1e" in ram.read_bytes()
    assert saved.size_bytes >= os.stat(ram).st_blocks * 512
    time.sleep(5)
    outputs = backend.restore_machine(ref, "sleep-vmmem-g1")
    # ... by the guest's own clock program (no process started for it: vm/clock.py)
    assert outputs["restored"] is True and outputs["clock"] == "clock-program", outputs
    after = _counter(backend, ref)
    assert before <= after < before + 20, (before, after)
    assert run(backend, ref, "cat /dev/shm/m") == (0, "ram-marker-5c1e\n", "")
    # The guest's clock was set on wake (it stood still for the 5 s asleep): between the
    # host's clock before and after asking (an exec under TCG on a busy host takes seconds),
    # with a second for `date +%s` rounding down and a second of slack.
    asked = time.time()
    guest = int(run(backend, ref, "date +%s")[1])
    answered = time.time()
    assert asked - 2 <= guest <= answered + 1, (asked, guest, answered)
    # The guest resets its NIC after the resume (driver unbound and bound again): QEMU runs
    # on (with `announce-rounds` 0 on the migration it crashed here: a NULL announce timer).
    code, _, err = run(backend, ref, "d=$(basename $(readlink /sys/class/net/eth0/device)); "
                                     "echo $d > /sys/bus/virtio/drivers/virtio_net/unbind && "
                                     "echo $d > /sys/bus/virtio/drivers/virtio_net/bind")
    assert code == 0, err
    assert backend.observe(ref).running and _mac(backend, ref)


def _qemu_argv(backend: VmBackend, ref: CellRef) -> list[bytes]:
    pid = vm_proc.find(backend.layout.cell(ref.id), backend.layout.machine_name(ref.id))
    assert pid is not None
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def _fork(backend: VmBackend, snapshot: str, n: int) -> CellRef:
    fork = CellRef(f"cell_vmmemfork{n}", f"fork-{n}", SPEC, f"vol_vmmemfork{n}")
    backend.create_volume(fork, fork.volume_id or "", from_checkpoint=snapshot)
    assert backend.create(fork, "hash-1")["machine_from"] == snapshot
    return fork


def test_a_fork_of_a_machine_snapshot_resumes_its_processes_as_a_new_machine(
        parent: tuple[VmBackend, CellRef]) -> None:
    backend, ref = parent
    run(backend, ref, "sleep 600 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleeper.pid; "
                      "echo in-memory > /dev/shm/note; echo on-disk > /workspace/note")
    info = backend.snapshot_machine(ref, "snap_vmmem01")
    assert info.consistency is Consistency.MACHINE and info.size_bytes > 0
    assert backend.find_checkpoint("snap_vmmem01") == info
    assert backend.snapshot_machine(ref, "snap_vmmem01") == info  # taken once
    part = backend.machines.path("snap_vmmem01")
    assert (part / vm_memory.STATE).stat().st_size < 4 << 20
    # The snapshot's disk is a layer the parent no longer writes: it was switched to a new
    # top over it while paused, before the memory was saved.
    frozen = backend.disks.checkpoint_layer("snap_vmmem01")
    assert backend.disks.top(ref.volume_id or "") != frozen
    top = backend.disks.top(ref.volume_id or "") or ""
    assert top != frozen and backend.disks.layers.chain(top)[1] == frozen
    with Qmp(backend._running_config(ref).directory) as qmp:  # what QEMU really writes
        (block,) = [b for b in qmp.command("query-block") or []
                    if b.get("device") == f"d{WORKSPACE_DISK}"]
    assert block["inserted"]["file"] == str(backend.disks.layers.path(top))
    # The parent runs on, and what it does now is not in the snapshot.
    assert not backend.observe(ref).frozen
    at_snapshot = _counter(backend, ref)
    assert run(backend, ref, "echo later > /workspace/note; echo later > /dev/shm/note")[0] == 0

    forks = [_fork(backend, "snap_vmmem01", n) for n in (1, 2)]
    time.sleep(5)  # the snapshot's clock falls behind the host's
    try:
        randoms = []
        for fork in forks:
            outputs = backend.start(fork)
            assert outputs["resumed_from"] == "snap_vmmem01" and outputs["reseeded"] is True
            # Right after the resume, before anything else draws from it.
            code, out, _ = run(backend, fork, "head -c16 /dev/urandom | od -An -tx1")
            assert code == 0
            randoms.append(out)
            # Its clock was set with its identity: the host's, not the snapshot's.
            before = time.time()
            guest = int(run(backend, fork, "date +%s")[1])
            assert before - 2 <= guest <= time.time() + 1, (before, guest)
            # A resumed machine's QEMU keeps no kernel and, under TCG, a small code buffer.
            argv = _qemu_argv(backend, fork)
            assert b"-kernel" not in argv and b"-initrd" not in argv
            assert argv[argv.index(b"-accel") + 1] in (b"kvm", b"tcg,tb-size=16")
        parent_id = run(backend, ref, "cat /etc/machine-id 2>/dev/null; hostname")[1]
        seen = {parent_id}
        macs = {_mac(backend, ref)}
        for fork in forks:
            # The parent's processes and memory, as at the snapshot.
            code, out, _ = run(backend, fork, "kill -0 $(cat /tmp/sleeper.pid) && echo alive; "
                                              "cat /dev/shm/note /workspace/note")
            assert (code, out) == (0, "alive\nin-memory\non-disk\n")
            counted = _counter(backend, fork)
            assert at_snapshot - 5 <= counted < at_snapshot + 60, (at_snapshot, counted)
            # ... as a machine of its own.
            code, out, _ = run(backend, fork, "cat /etc/machine-id; hostname")
            assert code == 0 and out.splitlines()[1] == fork.name
            seen.add(out)
            # Its NIC (connected to nothing) has the fork's own MAC, in the guest and in QEMU.
            mac = _mac(backend, fork)
            assert mac == backend._config(fork.id, backend._require(fork)).mac, mac
            with Qmp(backend.layout.cell(fork.id), timeout=10.0) as qmp:
                assert mac in qmp.command("human-monitor-command", **{
                    "command-line": "info network"})
            macs.add(mac)
            observed = backend.observe(fork)
            assert observed.running and not observed.frozen
        assert len(seen) == 3  # parent and both forks: distinct machine-id and hostname
        assert len(macs) == 3, macs  # ... and MAC
        assert randoms[0] != randoms[1], randoms
        assert run(backend, ref, "cat /dev/shm/note")[1] == "later\n"
        # The snapshot's RAM is never written by its forks (copy-on-write).
        assert os.stat(part / vm_memory.RAM).st_mode & 0o222 == 0
        # A fork sleeps and wakes like any cell (its private RAM is saved whole).
        before = _counter(backend, forks[0])
        backend.save_machine(forks[0], "sleep-vmmemfork-g1")
        backend.restore_machine(forks[0], "sleep-vmmemfork-g1")
        assert _counter(backend, forks[0]) >= before
        assert run(backend, forks[0], "hostname")[1] == "fork-1\n"
    finally:
        for fork in forks:
            backend.delete(fork)
    assert not any(f.id in name for f in forks for name in
                   vm_proc.scan(backend.layout.name_prefix))
    assert backend.delete_checkpoint("snap_vmmem01") == {"deleted": True}
    assert not part.exists()


def test_a_fork_left_without_its_identity_by_a_crash_is_seen_frozen_and_resume_gives_it(
        parent: tuple[VmBackend, CellRef]) -> None:
    backend, ref = parent
    backend.snapshot_machine(ref, "snap_vmmem02")
    fork = _fork(backend, "snap_vmmem02", 3)
    try:
        backend.start(fork)
        # As if the start died between the resume and the identity.
        backend._update(fork.id, identity_pending=True)
        assert backend.observe(fork).frozen
        outputs = backend.resume(fork)
        assert outputs["resumed"] is True and outputs["reseeded"] is True
        assert not backend.observe(fork).frozen
    finally:
        backend.delete(fork)
        backend.delete_checkpoint("snap_vmmem02")


def test_a_machine_part_without_its_disk_checkpoint_is_owned_and_swept(
        parent: tuple[VmBackend, CellRef]) -> None:
    """A crash between the machine part and the disk checkpoint: not a snapshot (find says
    none, so it is retaken), listed for the orphan sweep, and removed by delete."""
    backend, _ = parent
    backend.machines.take("snap_vmmem03", lambda tmp: {"cell_id": "cell_vmmem00001"})
    assert backend.find_checkpoint("snap_vmmem03") is None
    assert any(o.id == "snap_vmmem03" for o in backend.list_owned())
    backend.delete_checkpoint("snap_vmmem03")
    assert backend.machines.meta("snap_vmmem03") is None


def test_a_disk_half_left_by_a_crash_before_the_memory_is_retaken_whole(
        parent: tuple[VmBackend, CellRef]) -> None:
    """A crash after the disk switch but before the memory: the retry takes both again (the
    machine ran on since); a disk checkpoint taken as one stays refused as a machine one."""
    backend, ref = parent
    config = backend._running_config(ref)

    def switch(overlay: Path) -> None:
        backend.driver.snapshot_disk(config, WORKSPACE_DISK, overlay)

    backend.disks.checkpoint_disk(ref.volume_id or "", "snap_vmmem04", cell_id=ref.id,
                                  cell_name=ref.name, switch=switch, for_machine=True)
    half = backend.disks.checkpoint_layer("snap_vmmem04")
    # Not a snapshot yet (the controller retakes it, it does not adopt it), still held.
    assert backend.find_checkpoint("snap_vmmem04") is None
    assert backend.checkpoint_exists("snap_vmmem04")
    info = backend.snapshot_machine(ref, "snap_vmmem04")
    assert info.consistency is Consistency.MACHINE
    assert backend.disks.checkpoint_layer("snap_vmmem04") != half
    assert backend.driver.running(config)
    backend.checkpoint(ref, "snap_vmmem05")
    with pytest.raises(BackendRefused, match="exists without memory"):
        backend.snapshot_machine(ref, "snap_vmmem05")
    for name in ("snap_vmmem04", "snap_vmmem05"):
        backend.delete_checkpoint(name)


def test_a_guest_that_breaks_its_clock_program_or_nic_is_not_reported_as_set(
        parent: tuple[VmBackend, CellRef]) -> None:
    """Root in the guest kills its clock program (and the loop restarting it) and unbinds its
    NIC's driver (hostile review): a wake checks the clock and sets it with `date -s` after
    all, and a fork of a snapshot taken then claims no MAC it could not give. Last in the
    module: the parent is left without both."""
    backend, ref = parent
    code, _, err = run(backend, ref, (
        "c=$(pidof clock); kill $(sed -n 's/^PPid:\t*//p' /proc/$c/status) $c; "
        "d=$(basename $(readlink /sys/class/net/eth0/device)); "
        "echo $d > /sys/bus/virtio/drivers/virtio_net/unbind; date -s '2001-01-01 00:00:00'"))
    assert code == 0, err
    # A regular file where the FIFO was, holding a timespec: the program ends at once rather
    # than read it back and set that time again and again (it spun, the clock stood still).
    code, out, err = run(backend, ref, (
        "rm /run/devcell-clock && printf '\\200\\310\\117\\072\\0\\0\\0\\0\\0\\0\\0\\0"
        "\\0\\0\\0\\0' > /run/devcell-clock && /.devcell-guest/busybox timeout 5 "
        "/.devcell-guest/clock; echo $?"))
    assert out.split()[-1:] == ["1"], (code, out, err)
    backend.save_machine(ref, "sleep-vmmem-g9")
    outputs = backend.restore_machine(ref, "sleep-vmmem-g9")
    assert outputs["clock"] == "date", outputs
    guest = int(run(backend, ref, "date +%s")[1])
    assert abs(guest - time.time()) < 30, guest
    backend.snapshot_machine(ref, "snap_vmmem09")
    fork = _fork(backend, "snap_vmmem09", 9)
    try:
        started = backend.start(fork)
        assert started["resumed_from"] == "snap_vmmem09" and "mac" not in started, started
        assert run(backend, fork, "ls /sys/class/net")[1].split() == ["lo"]
        # Its machine dies and it boots cold: its own hostname, not its parent's (its config
        # disk is the parent's copy; the name comes on the kernel's command line).
        backend.stop(fork)
        assert backend.start(fork)["started"] is True
        assert run(backend, fork, "hostname")[1] == "fork-9\n"
    finally:
        backend.delete(fork)
    backend.delete_checkpoint("snap_vmmem09")
