"""Real QEMU for the vm backend's tests: present (with the kernel, the guest agent and the
Docker engine the image comes from), or a loud failure in CI and a clear skip elsewhere.

No test mocks QEMU. Every machine a test starts carries the -name label of its private state
directory; `kill_machines` ends exactly those (never another QEMU on the host), and the images
a state directory needs are seeded from one built per test session, so each test does not
export and format the image again.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

from devcell.backends.vm import image as vm_image
from devcell.backends.vm import proc as vm_proc
from devcell.backends.vm.drivers.qemu import QemuDriver
from devcell.backends.vm.layout import VmLayout
from tests.backends.engine import IMAGE, engine_available, in_ci, require_engine


@functools.cache
def _problem() -> str | None:
    if shutil.which("qemu-system-x86_64") is None or shutil.which("qemu-img") is None:
        return "QEMU is not installed"
    try:
        vm_image.find_kernel()
    except Exception as exc:
        return str(exc)
    if not vm_image.AGENT.is_file():
        return "qemu-guest-agent is not installed"
    if not engine_available():
        return "the Docker engine (where images come from) is not reachable"
    return None


def require_qemu() -> None:
    problem = _problem()
    if problem is None:
        require_engine()
        return
    if in_ci():
        pytest.fail(f"CI needs QEMU for the vm backend: {problem}; scripts/test installs it "
                    f"({vm_image.INSTALL})", pytrace=False)
    pytest.skip(f"no QEMU here: {problem}; install it: {vm_image.INSTALL}")


_SEED: dict[str, Path] = {}


def seed_images(state_dir: Path, cache: Path) -> None:
    """Give `state_dir` the base image's root disk and the initrd, built once in `cache`."""
    if "root" not in _SEED:
        layout = VmLayout(cache)
        _, rootfs = vm_image.rootfs(layout, IMAGE)
        _SEED["root"] = rootfs.parent
        kernel = vm_image.find_kernel()
        _SEED["boot"] = vm_image.initrd(layout, kernel).parent
        QemuDriver(accel_cache=layout.root / "accel.json").probe(
            kernel.path, _SEED["boot"] / "initrd.cpio")
        _SEED["accel"] = layout.root / "accel.json"
    target = VmLayout(state_dir)
    for key, parent in (("root", target.images), ("boot", target.boot)):
        source = _SEED[key]
        destination = parent / source.name
        if destination.exists():
            continue
        destination.mkdir(mode=0o700, parents=True)
        for item in source.iterdir():
            os.link(item, destination / item.name)
    if _SEED["accel"].exists() and not (target.root / "accel.json").exists():
        shutil.copyfile(_SEED["accel"], target.root / "accel.json")


def kill_machines(state_dir: Path) -> int:
    """SIGKILL every QEMU labelled for `state_dir` (found by its -name only)."""
    prefix = VmLayout(state_dir).name_prefix
    found = vm_proc.scan(prefix)
    for name, pid in found.items():
        vm_proc.kill(pid, name)
    return len(found)
