"""Which backends this machine can run, and why not: what `devcell version` reports.

Checked without importing any backend's SDK (the container backend's engine is asked over its
socket with the standard library), quickly (a short timeout), and read-only: nothing is
created, pulled or started.
"""

from __future__ import annotations

import os
import shutil
from typing import NamedTuple

from devcell import backends
from devcell.errors import BackendUnavailable


class Availability(NamedTuple):
    """One backend on this machine: usable or not, and a sentence saying why."""

    name: str
    available: bool
    reason: str
    version: str | None = None
    """The runtime's own version where there is one (the Docker engine's)."""


QEMU_BINARIES = ("qemu-system-x86_64", "qemu-system-aarch64", "qemu-kvm")


def _fake() -> Availability:
    return Availability("fake", True, "built in: records state only, runs nothing (tests, demos)")


def _container() -> Availability:
    from devcell.backends import container_observe

    try:
        found = container_observe.engine_version()
    except BackendUnavailable as exc:
        return Availability("container", False, str(exc))
    version = str(found.get("Version", "?"))
    api = str(found.get("ApiVersion", "?"))
    address = container_observe.engine_address()
    return Availability("container", True, f"Docker engine {version} (API {api}) reachable at "
                                           f"{address}", version)


def _vm() -> Availability:
    qemu = next((path for path in map(shutil.which, QEMU_BINARIES) if path), None)
    kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
    machine = (f"QEMU found at {qemu}" if qemu else "QEMU not found (no "
               + ", ".join(QEMU_BINARIES) + " on PATH)")
    machine += "; /dev/kvm usable" if kvm else "; /dev/kvm missing or not accessible"
    if "vm" not in backends.REGISTRY:
        planned = backends.PLANNED.get("vm", "virtual machines")
        return Availability("vm", False, f"not in this version of DevCell (planned: {planned}); "
                                         f"{machine}")
    return Availability("vm", bool(qemu), machine)


CHECKS = {"fake": _fake, "container": _container, "vm": _vm}


def check_all() -> list[Availability]:
    """Every backend DevCell knows (registered or planned), in registry order."""
    names = [*backends.REGISTRY, *(n for n in backends.PLANNED if n not in backends.REGISTRY)]
    out = []
    for name in names:
        check = CHECKS.get(name)
        out.append(check() if check else Availability(name, False, "no availability check"))
    return out
