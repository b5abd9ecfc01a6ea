"""Freezing a container's processes through its cgroup freezer, as the engine's pause does.

`docker pause` is a round trip through dockerd, containerd and a `runc` process that writes
the same file: about 16 ms each way on this machine, against well under a millisecond to
write the file and see the group frozen. A checkpoint freezes the cell for its whole copy,
so the container backend freezes and thaws here and falls back to the engine's pause where
the group cannot be found (another cgroup driver or parent than the engine's defaults) or
does not freeze in time.

The engine does not know of this freeze: it still lists the container as running. So a
cell is only ever frozen here between `quiesce` and `resume`, with the backend's QUIESCED
marker written before the freeze; a process killed in between leaves the marker, the cell
is observed frozen, and the next reconcile resumes it (which thaws the group), as it does
for the engine's pause. Whatever stops, removes or starts the container thaws it first: a
frozen process cannot handle SIGTERM, and under cgroup v1 on older kernels cannot even die
of SIGKILL.

- v1: `freezer.state` in the freezer hierarchy: write FROZEN, read until FROZEN (FREEZING
  while tasks are still being stopped); THAWED to thaw.
- v2: `cgroup.freeze` (1 or 0) in the unified hierarchy; `cgroup.events` says `frozen 1`.
The group is found where the engine puts it by default (cgroupfs `/docker/<id>`, systemd
`/system.slice/docker-<id>.scope`), by the container's full id, under the mounts
`/proc/<pid>/mountinfo` lists. Files are opened without following links, regular or cgroup
files only (the hierarchies are the host's; a cell cannot write them).
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import time
from pathlib import Path

from devcell.backends.container import cgroups
from devcell.records import Record

FREEZE_SECONDS = 2.0
"""How long a freeze may take before the group is thawed again and the engine asked: tasks
in an uninterruptible sleep (a hung NFS read) keep a v1 group FREEZING."""


class State(enum.Enum):
    THAWED = "thawed"
    FREEZING = "freezing"
    FROZEN = "frozen"


class Freezer(Record):
    """One container's freezer: its group's directory and the hierarchy's version."""

    version: str
    directory: Path

    def state(self) -> State | None:
        """The group's state, None when it cannot be read (the container is gone)."""
        if self.version == cgroups.V1:
            text = (cgroups.read_text(self.directory / "freezer.state") or "").strip()
            return {"THAWED": State.THAWED, "FREEZING": State.FREEZING,
                    "FROZEN": State.FROZEN}.get(text)
        events = cgroups.read_text(self.directory / "cgroup.events")
        asked = (cgroups.read_text(self.directory / "cgroup.freeze") or "").strip()
        if events is None or asked not in ("0", "1"):
            return None
        frozen = "frozen 1" in events.splitlines()
        if asked == "0":
            return State.THAWED if not frozen else State.FREEZING
        return State.FROZEN if frozen else State.FREEZING

    def _write(self, value: str) -> None:
        name = "freezer.state" if self.version == cgroups.V1 else "cgroup.freeze"
        fd = os.open(self.directory / name, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def freeze(self, timeout: float = FREEZE_SECONDS) -> bool:
        """Freeze every process of the group; False (and thawed again) when it did not
        freeze within `timeout` or cannot be written."""
        with contextlib.suppress(OSError):  # not writable: thawed below, the engine asked
            self._write("FROZEN" if self.version == cgroups.V1 else "1")
            deadline = time.monotonic() + timeout
            while (now := self.state()) is not State.FROZEN:
                if now is None or time.monotonic() > deadline:
                    break
                time.sleep(0.0005)
            else:
                return True
        self.thaw()
        return False

    def thaw(self) -> bool:
        """Thaw the group; whether it could be written."""
        try:
            self._write("THAWED" if self.version == cgroups.V1 else "0")
        except OSError:
            return False
        return True


def of_container(container_id: str, *, mountinfo: Path | None = None) -> Freezer | None:
    """The freezer of the container with this full id, where the engine's defaults put its
    group; None when no such group is found."""
    if not re.fullmatch(r"[0-9a-f]{64}", container_id):
        return None
    where = mountinfo or Path("/proc") / str(os.getpid()) / "mountinfo"  # self is a link
    mounts = cgroups.parse_mountinfo(cgroups.read_text(where) or "")
    groups = (f"/docker/{container_id}", f"/system.slice/docker-{container_id}.scope")
    v1 = next((m for m in mounts if m.fstype == "cgroup" and "freezer" in m.options), None)
    v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
    for mount, version, probe in ((v1, cgroups.V1, "freezer.state"),
                                  (v2, cgroups.V2, "cgroup.freeze")):
        if mount is None:
            continue
        for group in groups:
            directory = cgroups.under(mount, group)
            if directory is not None and (directory / probe).is_file():
                return Freezer(version, directory)
    return None
