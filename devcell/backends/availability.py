"""Which backends this machine can run, and why not: what `devcell version` reports.

Checked without importing any backend's SDK (the container backend's engine is asked over its
socket with the standard library), quickly (a short timeout), and read-only: nothing is
created, pulled or started.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

from devcell import backend_registry
from devcell.errors import BackendUnavailable


class Availability(NamedTuple):
    """One backend on this machine: usable or not, and a sentence saying why."""

    name: str
    available: bool
    reason: str
    version: str | None = None
    """The runtime's own version where there is one (the Docker engine's)."""


QEMU_BINARIES = ("qemu-system-x86_64", "qemu-system-aarch64", "qemu-kvm")


def fake(state_dir: Path) -> Availability:
    return Availability("fake", True, "built in: records state only, runs nothing (tests, demos)")


def container(state_dir: Path) -> Availability:
    from devcell.backends.container import observe as container_observe

    try:
        found = container_observe.engine_version()
    except BackendUnavailable as exc:
        return Availability("container", False, str(exc))
    version = str(found.get("Version", "?"))
    api = str(found.get("ApiVersion", "?"))
    address = container_observe.engine_address()
    return Availability("container", True, f"Docker engine {version} (API {api}) reachable at "
                                           f"{address}", version)


def vm(state_dir: Path) -> Availability:
    """QEMU on PATH, and how guests run here, KVM or TCG, as the boot probe found it (cached
    in the state directory for this boot; never probed here)."""
    from devcell.backends.vm.drivers import accel
    from devcell.backends.vm.layout import VmLayout

    qemu = next((path for path in map(shutil.which, QEMU_BINARIES) if path), None)
    machine = (f"QEMU found at {qemu}" if qemu else "QEMU not found (no "
               + ", ".join(QEMU_BINARIES) + " on PATH)")
    machine += "; " + accel.finding(VmLayout(state_dir).root / "accel.json").said()
    return Availability("vm", bool(qemu), machine)


def check_all(state_dir: Path) -> list[Availability]:
    """Every backend DevCell knows (registered or planned), in registry order: each runs the
    check its registry entry names, for `state_dir` (where a backend keeps what it found)."""
    import importlib

    out = []
    for entry in backend_registry.BACKENDS:
        module, _, function = entry.availability.partition(":")
        out.append(getattr(importlib.import_module(module), function)(state_dir))
    for name, what in backend_registry.PLANNED.items():
        if backend_registry.get(name) is None:
            out.append(Availability(name, False, f"not in this version of DevCell (planned: "
                                                 f"{what})"))
    return out
