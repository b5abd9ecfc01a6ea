"""Which driver runs a cell's machine: chosen by `spec.vm.driver` at create, kept for life.

A cell's machine is always driven by the driver it was made with (recorded in its cell.json
and carried in every MachineConfig): a memory snapshot Firecracker wrote cannot be resumed by
QEMU, nor the reverse. `Dispatch` is the one MachineDriver the backend holds; it routes each
call to the right driver by `config.driver`. QEMU is the default. Firecracker is checked when
chosen (its binary, /dev/kvm), before any image work, so a host that cannot run it says so at
once instead of after exporting an image.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from devcell.backends.vm.drivers import firecracker as vm_firecracker
from devcell.backends.vm.drivers.driver import MachineConfig, MachineDriver, Saved
from devcell.backends.vm.drivers.qemu import QemuDriver
from devcell.backends.vm.drivers.qmp import Agent
from devcell.errors import BackendRefused, BackendUnavailable, CapabilityMissing

SPEC_NAMES = {"qemu": QemuDriver.name, "firecracker": vm_firecracker.FirecrackerDriver.name}
"""spec.vm.driver -> the driver's name as recorded."""
DEFAULT = QemuDriver.name
"""Cells made before drivers were recorded are QEMU's."""


def spec_driver(spec: dict[str, Any]) -> str:
    """The recorded name of the driver `spec` asks for (QEMU's when it names none)."""
    asked = (spec.get("vm") or {}).get("driver") or "qemu"
    if asked not in SPEC_NAMES:
        raise BackendRefused(f"unknown vm driver {asked!r}; one of: {', '.join(SPEC_NAMES)}")
    return SPEC_NAMES[asked]


class Dispatch:
    """Every call goes to the driver named by the config (probe: by `for_spec` first)."""

    name = "dispatch"
    nic = False
    """Never asked: a machine is made by the driver `for_spec` chose."""

    def __init__(self, *, accel_cache: Path) -> None:
        qemu = QemuDriver(accel_cache=accel_cache)
        firecracker = vm_firecracker.FirecrackerDriver(kvm_probe=_kvm_probe(qemu))
        self.drivers: dict[str, MachineDriver] = {qemu.name: qemu, firecracker.name: firecracker}

    def for_spec(self, spec: dict[str, Any]) -> MachineDriver:
        """The driver a new cell of `spec` gets; a clear error when this host cannot run it."""
        driver = self.drivers[spec_driver(spec)]
        if isinstance(driver, vm_firecracker.FirecrackerDriver):
            driver.preflight()
        return driver

    def of(self, config: MachineConfig) -> MachineDriver:
        try:
            return self.drivers[config.driver]
        except KeyError:
            raise CapabilityMissing(f"machine {config.name} was made with driver "
                                    f"{config.driver!r}, which this DevCell does not have"
                                    ) from None

    def probe(self, kernel: Path, initrd: Path) -> str:
        return self.drivers[QemuDriver.name].probe(kernel, initrd)

    def boot(self, config: MachineConfig) -> int:
        return self.of(config).boot(config)

    # Options (memory_in_file, keep, ...) pass through as given: the boundary's to define.
    def restore(self, config: MachineConfig, saved: Path, **options: Any) -> int:
        return self.of(config).restore(config, saved, **options)

    def save(self, config: MachineConfig, into: Path, **options: Any) -> Saved:
        return self.of(config).save(config, into, **options)

    def agent_held(self, config: MachineConfig) -> AbstractContextManager[None]:
        return self.of(config).agent_held(config)

    def running(self, config: MachineConfig) -> bool:
        return self.of(config).running(config)

    def paused(self, config: MachineConfig) -> bool:
        return self.of(config).paused(config)

    def pause(self, config: MachineConfig) -> bool:
        return self.of(config).pause(config)

    def unpause(self, config: MachineConfig) -> bool:
        return self.of(config).unpause(config)

    def shutdown(self, config: MachineConfig, pid: int, *, timeout: float) -> None:
        self.of(config).shutdown(config, pid, timeout=timeout)

    def console(self, config: MachineConfig) -> bytes:
        return self.of(config).console(config)

    def agent(self, config: MachineConfig, *, timeout: float,
              alive: Callable[[], bool] | None = None) -> Agent:
        return self.of(config).agent(config, timeout=timeout, alive=alive)

    def snapshot_disk(self, config: MachineConfig, disk: int, overlay: Path) -> None:
        self.of(config).snapshot_disk(config, disk, overlay)

    def flatten_disk(self, config: MachineConfig, disk: int) -> None:
        self.of(config).flatten_disk(config, disk)


def _kvm_probe(qemu: QemuDriver) -> Callable[[Path, Path], str]:
    """Whether guests run under KVM here, by QEMU's probe (a boot under KVM, once per host
    boot) when QEMU is installed; else /dev/kvm opening is all that is known."""
    def probe(kernel: Path, initrd: Path) -> str:
        try:
            return qemu.probe(kernel, initrd)
        except BackendUnavailable:  # no QEMU on a Firecracker host: nothing better to go on
            return "kvm"
    return probe
