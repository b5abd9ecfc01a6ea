"""How guests run here (the QEMU driver's KVM probe), on real QEMU and the real kernel: KVM only
when a boot under it answers within the probe's short timeout, TCG otherwise (no usable
/dev/kvm, or nested KVM that hangs, as on this machine); decided once per host boot (cached,
never believed from another boot); the probe's QEMU never outlives it. `describe` showing the
choice is checked by test_cli.py."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from devcell.backends.vm import image as vm_image
from devcell.backends.vm.drivers import accel as accel_finding
from devcell.backends.vm.drivers import kvm
from devcell.backends.vm.drivers import qemu as vm_qemu
from devcell.backends.vm.drivers.qemu import QemuDriver
from devcell.backends.vm.layout import VmLayout
from tests.backends.vm.conftest import make_state

KVM_USABLE = kvm.device_usable()


def _qemus_with(marker: str) -> list[int]:
    """Pids of processes whose command line names `marker` (this test's own initrd copy)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


@pytest.fixture
def boot(tmp_path: Path, vm_cache: Path) -> tuple[Path, Path]:
    """The real kernel and DevCell's initrd, copied under a name only this test uses, so its
    probe's QEMU is found by that name and no other engineer's is ever looked at."""
    state = make_state(tmp_path / "state", vm_cache)
    kernel = vm_image.find_kernel()
    initrd = tmp_path / f"probe-{uuid.uuid4().hex}.cpio"
    shutil.copyfile(vm_image.initrd(VmLayout(state), kernel), initrd)
    return kernel.path, initrd


def _never_boot() -> str:
    raise AssertionError("a decided probe must not boot QEMU again")


def test_the_probe_decides_once_per_boot_and_leaves_no_qemu(
        boot: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVCELL_VM_ACCEL", raising=False)
    kernel, initrd = boot
    cache = tmp_path / "accel.json"
    accel = QemuDriver(accel_cache=cache).probe(kernel, initrd)
    assert accel in ("kvm", "tcg")
    assert _qemus_with(initrd.name) == [], "the probe's QEMU outlived the probe"
    if not KVM_USABLE:
        assert accel == "tcg" and not cache.exists()  # nothing to try: no boot, no cache
        return
    recorded = json.loads(cache.read_text())
    assert (recorded["boot_id"], recorded["accel"]) == (accel_finding.boot_id(), accel)
    assert recorded["reason"]  # what `devcell version` says of it (tests/cli/test_version_accel.py)
    # Decided: later drivers answer from the cache without booting anything.
    monkeypatch.setattr(vm_qemu, "qemu_binary", _never_boot)
    assert QemuDriver(accel_cache=cache).probe(kernel, initrd) == accel
    assert QemuDriver(accel_cache=cache).accel() == accel
    # A decision from another host boot is not believed (KVM may work now, or no longer).
    cache.write_text(json.dumps({"boot_id": "another-boot", "accel": "kvm"}))
    assert QemuDriver(accel_cache=cache).accel() == "tcg"


@pytest.mark.skipif(not KVM_USABLE, reason="no usable /dev/kvm here: TCG without a probe")
def test_a_kvm_boot_that_does_not_answer_in_time_means_tcg_and_is_killed(
        boot: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kernel reaches its initrd in 50 ms: the real QEMU under KVM stands for a nested
    KVM that hangs; the probe gives up at its timeout, kills it, and chooses TCG."""
    monkeypatch.delenv("DEVCELL_VM_ACCEL", raising=False)
    monkeypatch.setattr(vm_qemu, "PROBE_SECONDS", 0.05)
    kernel, initrd = boot
    cache = tmp_path / "accel.json"
    assert QemuDriver(accel_cache=cache).probe(kernel, initrd) == "tcg"
    assert _qemus_with(initrd.name) == []
    assert json.loads(cache.read_text())["accel"] == "tcg"


@pytest.mark.parametrize("forced", ["kvm", "tcg"])
def test_devcell_vm_accel_forces_the_choice_without_a_probe(
        forced: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_VM_ACCEL", forced)
    monkeypatch.setattr(vm_qemu, "qemu_binary", _never_boot)
    cache = tmp_path / "accel.json"
    driver = QemuDriver(accel_cache=cache)
    assert driver.probe(Path("/no/kernel"), Path("/no/initrd")) == forced
    assert driver.accel() == forced and not cache.exists()
