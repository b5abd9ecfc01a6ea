"""Which hypervisor processes are DevCell's: found by pidfile, proven by their label.

A pid read from a pidfile may have been recycled by an unrelated process, and a process that
merely looks like QEMU may be someone else's. DevCell acts on a process only when its command
line is a QEMU whose `-name` (or a Firecracker whose `--id`) is exactly the label DevCell gave
it (devcell-<state-hash>-<cell>), the vm equivalent of the container backend's labels. The
orphan sweep and crash recovery find machines whose directory is gone by scanning /proc for
that label. Standard library only (observe_all imports this on the fast path).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from devcell import safeio

PIDFILE = "qemu.pid"


EXEC_RETRIES = 25
"""Reads of an empty command line (~50 ms at most) before it counts as none."""


def _argv(pid: int, *, settle: bool = False) -> list[str]:
    """The command line of `pid`. A process in the middle of its exec (a machine started a
    moment ago) reads as an empty command line for a few milliseconds: with `settle`, asked
    again briefly, so a just-started machine is not taken for someone else's process. A scan
    of every process does not settle, nor wait at all (each kernel thread or zombie would
    cost a wait: a 2 ms sleep after each one's single read made a scan 0.14 s, which every
    wake paid, its pidfile gone with the QEMU that slept; bench/vm_wake.py)."""
    tries = EXEC_RETRIES if settle else 1
    for attempt in range(tries):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                raw = f.read(1 << 16)
        except OSError:
            return []
        if raw:
            return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if attempt + 1 < tries:
            time.sleep(0.002)
    return []  # a kernel thread, or a zombie: no command line


def machine_name(argv: list[str]) -> str | None:
    """The label a hypervisor was started with: QEMU's -name, or Firecracker's --id turned
    back into the label (firecracker_id); None when argv is neither."""
    program = os.path.basename(argv[0]) if argv else ""
    if program.startswith("qemu-system-"):
        for flag, value in zip(argv, argv[1:], strict=False):
            if flag == "-name":
                return value.split(",")[0].removeprefix("guest=")
    elif program == "firecracker":
        for flag, value in zip(argv, argv[1:], strict=False):
            if flag == "--id":
                return label_of_firecracker_id(value)
    return None


_CELL_PREFIX = ("cell_", "cell-")


def firecracker_id(label: str) -> str:
    """The label as a Firecracker --id (letters, digits and '-' only): the '_' of the cell
    id's prefix becomes '-'. The driver refuses a label that does not come back unchanged."""
    return label.replace("_", "-")


def label_of_firecracker_id(value: str) -> str:
    head, sep, rest = value.partition("-")
    digest, sep2, cell = rest.partition("-")
    if not (sep and sep2) or not cell.startswith(_CELL_PREFIX[1]):
        return value
    return f"{head}-{digest}-{_CELL_PREFIX[0]}{cell.removeprefix(_CELL_PREFIX[1])}"


def is_owned(pid: int, name: str) -> bool:
    """Whether `pid` is alive and is the QEMU labelled `name`."""
    if pid <= 1:
        return False
    return machine_name(_argv(pid, settle=True)) == name and _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read(512).rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state != [b"Z"]


def read_pidfile(directory: Path) -> int | None:
    try:
        fd = safeio.open_regular(directory, PIDFILE)
    except (FileNotFoundError, NotADirectoryError, safeio.UnsafeFile):
        return None
    try:
        text = safeio.read_some(fd, 32).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    return int(text) if text.isdigit() else None


def find(directory: Path, name: str) -> int | None:
    """The pid of the machine labelled `name`: its pidfile's when that is it, else a scan."""
    pid = read_pidfile(directory)
    if pid is not None and is_owned(pid, name):
        return pid
    return scan(name).get(name)


def scan(prefix: str) -> dict[str, int]:
    """Every live QEMU whose -name starts with `prefix`, by name."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            name = machine_name(_argv(int(entry)))
            if name is not None and name.startswith(prefix) and _alive(int(entry)):
                found[name] = int(entry)
    return found


def kill(pid: int, name: str, *, timeout: float = 5.0) -> None:
    """SIGKILL the machine `name` (checked again first) and wait for it to be gone.

    The signal goes through a pidfd opened before the check: if the machine ends and its
    pid is recycled between the check and the kill, the signal fails (ESRCH) instead of
    reaching the process that took the pid."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        if not is_owned(pid, name):
            return
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        return
    finally:
        os.close(pidfd)
    wait_gone(pid, name, timeout)


def wait_gone(pid: int, name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_owned(pid, name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
