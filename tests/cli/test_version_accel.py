"""`devcell version` says how vm guests run here and why, from what the QEMU driver's boot
probe found (issue 31 item 5): an access check alone said "/dev/kvm usable" on a host whose
nested KVM guests hang, where every vm cell then ran under TCG. The probe records its reason
with its answer; version reads it back without booting anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from devcell.backends.host import children
from devcell.backends.vm.drivers import accel, kvm
from devcell.backends.vm.drivers import qemu as vm_qemu
from devcell.backends.vm.drivers.qemu import QemuDriver
from tests.conftest import Cli


def _vm_line(cli: Cli, env: dict[str, str] | None = None) -> str:
    done = cli("version", env=env)
    assert done.returncode == 0, done
    return next(line for line in done.stdout.splitlines() if line.startswith("  vm: "))


def _record(state_dir: Path, found: dict[str, str]) -> None:
    (state_dir / "vm").mkdir(parents=True)
    (state_dir / "vm" / "accel.json").write_text(json.dumps(found))


needs_kvm_device = pytest.mark.skipif(not kvm.device_usable(), reason="/dev/kvm does not open")


@needs_kvm_device
def test_version_says_what_this_boots_probe_found(cli: Cli, state_dir: Path) -> None:
    _record(state_dir, {"boot_id": accel.boot_id(), "accel": "tcg",
                        "reason": "a guest under KVM gave no answer in 4s"})
    line = _vm_line(cli, {"DEVCELL_VM_ACCEL": ""})
    assert "/dev/kvm usable" not in line
    assert line.endswith("; guests run under TCG, emulated (slower than KVM): a guest under KVM "
                         "gave no answer in 4s"), line


@needs_kvm_device
def test_a_probe_from_another_boot_is_not_believed(cli: Cli, state_dir: Path) -> None:
    _record(state_dir, {"boot_id": "another-boot", "accel": "kvm", "reason": "answered"})
    line = _vm_line(cli, {"DEVCELL_VM_ACCEL": ""})
    assert "; KVM or TCG not decided yet: /dev/kvm opens, and no vm guest was probed on this " \
           "boot" in line, line


@pytest.mark.parametrize(("forced", "said"), [("tcg", "TCG, emulated (slower than KVM)"),
                                              ("kvm", "KVM")])
def test_a_forced_choice_is_said_as_forced(cli: Cli, forced: str, said: str) -> None:
    line = _vm_line(cli, {"DEVCELL_VM_ACCEL": forced})
    assert line.endswith(f"; guests run under {said}: forced by DEVCELL_VM_ACCEL={forced}"), line


def _probe_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, answer: object) -> accel.Finding:
    """The probe, its QEMU replaced by `answer` (a finished process, or an exception)."""
    def run_bytes(argv: list[str], **_: object) -> subprocess.CompletedProcess[bytes]:
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, subprocess.CompletedProcess)
        return answer

    monkeypatch.delenv("DEVCELL_VM_ACCEL", raising=False)
    monkeypatch.setattr(kvm, "device_usable", lambda: True)
    monkeypatch.setattr(vm_qemu, "qemu_binary", lambda: "qemu-system-x86_64")
    monkeypatch.setattr(children, "run_bytes", run_bytes)
    cache = tmp_path / "accel.json"
    chosen = QemuDriver(accel_cache=cache).probe(Path("kernel"), Path("initrd"))
    found = accel.read(cache)
    assert found is not None and found.accel == chosen
    return found


def test_the_probe_records_why_a_hang_means_tcg(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    found = _probe_with(monkeypatch, tmp_path, children.TimeoutExpired(["qemu"], 4.0))
    assert found.accel == "tcg"
    assert found.reason.startswith(f"a guest under KVM gave no answer in "
                                   f"{vm_qemu.PROBE_SECONDS:g}s (nested KVM that hangs"), found


def test_the_probe_records_why_a_failed_kvm_start_means_tcg(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    failed = subprocess.CompletedProcess(["qemu"], 1, b"", b"warning: x\nqemu-system-x86_64: "
                                         b"failed to initialize kvm: No such device\n")
    found = _probe_with(monkeypatch, tmp_path, failed)
    assert (found.accel, found.reason) == (
        "tcg", "a guest under KVM stopped without answering (QEMU exit status 1: "
               "qemu-system-x86_64: failed to initialize kvm: No such device)")


def test_the_probe_records_a_kvm_guest_that_answered(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    answered = subprocess.CompletedProcess(["qemu"], 0, vm_qemu.PROBE_MARK.encode(), b"")
    found = _probe_with(monkeypatch, tmp_path, answered)
    assert found.accel == "kvm" and found.reason.startswith("a guest booted under KVM answered in")
