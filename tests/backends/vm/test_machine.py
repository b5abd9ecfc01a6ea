"""A vm cell's machine, as the backend drives it: boot, exec through the guest agent, a
filesystem-consistent disk checkpoint, and sleep as a memory snapshot that a wake resumes."""

from __future__ import annotations

import time

from devcell.backends.base import CellRef, Consistency
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.backend import VmBackend
from tests.backends.vm.conftest import run


def _counter(backend: VmBackend, ref: CellRef) -> int:
    code, out, err = run(backend, ref, "cat /tmp/counter")
    assert code == 0, err
    return int(out)


def test_boot_runs_the_image_with_its_disks_and_services(machine: tuple[VmBackend, CellRef]
                                                         ) -> None:
    backend, ref = machine
    code, out, _ = run(backend, ref, "hostname; mount; cat /etc/hostname")
    assert code == 0
    assert out.splitlines()[0] == "box"
    assert "/dev/vda on / type ext4" in out
    assert "/dev/vdb on /devcell type ext4 (ro" in out
    assert "/dev/vdc on /workspace type ext4" in out
    first = _counter(backend, ref)
    time.sleep(1)
    assert _counter(backend, ref) > first  # the supervised service runs
    observed = backend.observe(ref)
    assert observed.running and observed.runtime_hash == "hash-1"
    assert observed.detail["accel"] in ("kvm", "tcg")


def test_exec_passes_output_exit_status_environment_and_input(
        machine: tuple[VmBackend, CellRef]) -> None:
    backend, ref = machine
    assert run(backend, ref, "echo out; echo err >&2; exit 42") == (42, "out\n", "err\n")
    assert run(backend, ref, 'echo "$GREETING"; test "$TOKEN" = canary-vm-5e1d') == \
        (0, "hello vm\n", "")
    assert run(backend, ref, "tr a-z A-Z", stdin=b"piped in\n") == (0, "PIPED IN\n", "")


def test_disk_checkpoint_is_taken_frozen_and_forks_hold_its_files(
        machine: tuple[VmBackend, CellRef]) -> None:
    backend, ref = machine
    assert run(backend, ref, "echo before > /workspace/note.txt")[0] == 0
    info = backend.checkpoint(ref, "snap_vmtest01")
    assert info.consistency is Consistency.FILESYSTEM
    assert not backend.observe(ref).frozen  # thawed after the copy
    assert run(backend, ref, "echo after > /workspace/note.txt")[0] == 0
    tree = backend.checkpoint_files("snap_vmtest01")
    assert tree is not None and (tree / "note.txt").read_text() == "before\n"
    fork = CellRef("cell_vmtest0002", "fork", ref.spec, "vol_vmtest0002")
    backend.create_volume(fork, "vol_vmtest0002", from_checkpoint="snap_vmtest01")
    backend.create(fork, "hash-1")
    backend.start(fork)
    try:
        assert run(backend, fork, "cat /workspace/note.txt") == (0, "before\n", "")
    finally:
        backend.delete(fork)
    assert not backend.observe(fork).exists


def test_a_process_survives_sleep_and_wake_and_continues_from_its_value(
        machine: tuple[VmBackend, CellRef]) -> None:
    backend, ref = machine
    # (its output away from the agent's pipes, or exec would wait for it to end)
    run(backend, ref, "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleeper.pid")
    before = _counter(backend, ref)
    saved = backend.save_machine(ref, "sleep-vmtest-g1")
    assert saved.consistency is Consistency.MACHINE and saved.size_bytes > 0
    observed = backend.observe(ref)
    assert observed.exists and not observed.running  # asleep: kept, not running
    assert backend.save_machine(ref, "sleep-vmtest-g1") == saved  # idempotent
    time.sleep(2)
    outputs = backend.restore_machine(ref, "sleep-vmtest-g1")
    assert outputs["restored"] is True
    after = _counter(backend, ref)
    # It went on from its value: not restarted (1, 2, ...), not lost.
    assert before <= after < before + 20, (before, after)
    code, out, _ = run(backend, ref, "kill -0 $(cat /tmp/sleeper.pid) && echo alive")
    assert (code, out) == (0, "alive\n")
    assert backend.restore_machine(ref, "sleep-vmtest-g1") == {"restored": False}


def test_a_foreign_process_is_never_acted_on(machine: tuple[VmBackend, CellRef]) -> None:
    """A pidfile pointing at a process DevCell did not start (a recycled pid, a planted
    file) is not believed: the machine is found by its label, and the other process lives."""
    import subprocess

    backend, ref = machine
    foreign = subprocess.Popen(["sleep", "60"])
    try:
        assert not vm_proc.is_owned(foreign.pid, backend.layout.machine_name(ref.id))
        other = CellRef("cell_vmtest0003", "other", ref.spec)
        directory = backend.layout.cell(other.id)
        directory.mkdir(mode=0o700)
        (directory / vm_proc.PIDFILE).write_text(f"{foreign.pid}\n")
        assert backend.observe(other) == backend.observe(CellRef("cell_none", "x", {}))
        backend.stop(other)
        backend.delete(other)
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_a_machine_whose_directory_is_gone_is_still_found_and_ended(
        machine: tuple[VmBackend, CellRef]) -> None:
    """A crash mid-delete can leave a QEMU whose directory is gone: list_owned (the orphan
    sweep) still names it, by its label, and delete ends it."""
    import shutil

    backend, ref = machine
    lost = CellRef("cell_vmtest0004", "lost", ref.spec)
    backend.create(lost, "hash-1")
    backend.start(lost)
    shutil.rmtree(backend.layout.cell(lost.id))
    assert backend.observe(lost).exists
    assert any(o.id == lost.id for o in backend.list_owned())
    backend.delete(lost)
    assert not backend.observe(lost).exists
    assert lost.id not in vm_proc.scan(backend.layout.name_prefix)


def test_checkpoint_hooks_run_in_the_guest_and_a_failing_one_fails_the_quiesce(
        machine: tuple[VmBackend, CellRef]) -> None:
    import pytest

    from devcell.errors import BackendError

    backend, ref = machine
    hooked = CellRef(ref.id, ref.name, dict(ref.spec, hooks={
        "preCheckpoint": [["sh", "-c", "echo hooked > /workspace/hook.txt"]],
        "postCheckpoint": [["sh", "-c", "echo after > /workspace/post.txt"]]}), ref.volume_id)
    assert backend.quiesce(hooked)["hooks"] == 1
    assert backend.observe(hooked).frozen
    backend.checkpoint(hooked, "snap_vmhook01")
    backend.resume(hooked)
    assert not backend.observe(hooked).frozen
    tree = backend.checkpoint_files("snap_vmhook01")
    assert tree is not None and (tree / "hook.txt").read_text() == "hooked\n"
    assert not (tree / "post.txt").exists()
    assert run(backend, ref, "cat /workspace/post.txt") == (0, "after\n", "")
    failing = CellRef(ref.id, ref.name, dict(ref.spec, hooks={
        "preCheckpoint": [["sh", "-c", "echo $TOKEN; exit 3"]]}), ref.volume_id)
    with pytest.raises(BackendError, match="status 3") as caught:
        backend.quiesce(failing)
    assert "canary-vm-5e1d" not in str(caught.value)
    assert not backend.observe(ref).frozen
    assert run(backend, ref, "echo ok > /workspace/ok.txt")[0] == 0  # not frozen


def test_a_machine_left_paused_by_a_dead_save_is_seen_frozen_and_resumed(
        machine: tuple[VmBackend, CellRef]) -> None:
    """A save killed after QMP `stop` leaves QEMU alive and paused: observe says frozen (so
    the controller plans a resume) and resume lets it run on."""
    from devcell.backends.vm.drivers.qmp import Qmp

    backend, ref = machine
    with Qmp(backend.layout.cell(ref.id)) as qmp:
        qmp.command("stop")
    observed = backend.observe(ref)
    assert observed.running and observed.frozen
    assert backend.resume(ref) == {"resumed": True}
    assert not backend.observe(ref).frozen
    assert run(backend, ref, "true")[0] == 0
