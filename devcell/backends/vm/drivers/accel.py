"""How this machine's vm guests run, KVM or TCG, and why: the QEMU driver's boot probe's
answer, kept with its reason, and read back without booting anything.

Whether /dev/kvm opens says little: it opens on hosts whose nested KVM guests hang, where every
vm cell then runs under TCG. Only a boot under KVM tells (qemu.py's probe, once per host boot);
its answer and the reason for it are cached in `<state>/vm/accel.json`, so `devcell version`
says what the probe found (or that no guest was probed yet on this boot) instead of an access
check. This module imports no driver: `devcell version` stays quick.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path

FORCE_VARIABLE = "DEVCELL_VM_ACCEL"
"""kvm or tcg: the choice made by the user, never probed."""


@dataclass(frozen=True)
class Finding:
    """How guests run here (`accel` kvm or tcg; None: not probed yet on this boot), and why."""

    accel: str | None
    reason: str

    def said(self) -> str:
        """The finding as `devcell version` says it."""
        if self.accel == "kvm":
            return f"guests run under KVM: {self.reason}"
        if self.accel == "tcg":
            return f"guests run under TCG, emulated (slower than KVM): {self.reason}"
        return f"KVM or TCG not decided yet: {self.reason}"


def boot_id() -> str:
    """This host boot's id: a probe's answer holds for one boot only (KVM may work after a
    reboot, or no longer)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def forced() -> str | None:
    value = os.environ.get(FORCE_VARIABLE)
    return value if value in ("kvm", "tcg") else None


def read(cache: Path | None) -> Finding | None:
    """This boot's probe answer from `cache`, or None (no cache, another boot's, unreadable)."""
    if cache is None:
        return None
    try:
        found = json.loads(cache.read_text())
        if found.get("boot_id") != boot_id() or found.get("accel") not in ("kvm", "tcg"):
            return None
        reason = found.get("reason")
        return Finding(str(found["accel"]), str(reason) if isinstance(reason, str) else
                       "chosen by this boot's probe (recorded without its reason)")
    except (OSError, ValueError, AttributeError):
        return None


def write(cache: Path, found: Finding) -> None:
    cache.write_text(json.dumps({"boot_id": boot_id(), "accel": found.accel,
                                 "reason": found.reason}))


_DEVICE_FIXES = {
    errno.ENOENT: "no /dev/kvm: the kvm module is not loaded, or this machine offers no "
                  "hardware virtualisation",
    errno.EACCES: "/dev/kvm is not open to this user: add it to the device's group "
                  "(usually kvm) and log in again",
    errno.EPERM: "/dev/kvm is not open to this user: add it to the device's group "
                 "(usually kvm) and log in again",
}


def device_problem() -> str | None:
    """Why /dev/kvm cannot be opened read-write (the fix with it), or None when it opens."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return _DEVICE_FIXES.get(exc.errno or 0, f"/dev/kvm cannot be opened ({exc.strerror})")
    os.close(fd)
    return None


def cpu_hint() -> str:
    """What /proc/cpuinfo says about KVM's chances: a virtual machine whose CPU shows no vmx
    or svm flag has nested virtualisation off. Empty when it says nothing of the kind."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            flags = next((line for line in info if line.startswith("flags")), "").split()
    except OSError:
        return ""
    if "hypervisor" in flags and not {"vmx", "svm"} & set(flags):
        return ("this machine is itself a virtual machine whose CPU shows no vmx or svm flag: "
                "nested virtualisation is off")
    return ""


def finding(cache: Path | None) -> Finding:
    """How guests run here and why, without booting: forced, /dev/kvm's fault, this boot's
    probe, or not probed yet."""
    chosen = forced()
    if chosen is not None:
        return Finding(chosen, f"forced by {FORCE_VARIABLE}={chosen}")
    problem = device_problem()
    if problem is not None:
        return Finding("tcg", problem)
    probed = read(cache)
    if probed is not None:
        return probed
    hint = cpu_hint()
    return Finding(None, "/dev/kvm opens, and no vm guest was probed on this boot: the first "
                         "vm cell boots one under KVM and runs under TCG if it does not answer"
                   + (f" ({hint})" if hint else ""))
