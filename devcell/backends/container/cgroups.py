"""A container's memory and CPU, read from its control group's files (cgroup v1 and v2).

The engine's own stats call samples for a second or more per container; the kernel's files
answer at once and are what the engine reads too. The container's cgroup is found from its
main process (`/proc/<pid>/cgroup`, which names the group in each hierarchy) and the mounts
of the hierarchies (`/proc/self/mountinfo`); when the process cannot be read, from what the
engine reports (the container id under its CgroupParent, cgroupfs or systemd layout).

- v1 (a hierarchy per controller; this machine): memory = `memory.usage_in_bytes` minus
  `total_inactive_file` of `memory.stat`; CPU = `cpuacct.usage` (ns).
- v2 (the unified hierarchy): memory = `memory.current` minus `inactive_file` of
  `memory.stat`; CPU = `usage_usec` of `cpu.stat`.

Memory is computed as `docker stats` shows it (the page cache the kernel can drop at once is
not counted). Every file is read through safeio (no link followed, regular files only,
bounded): a process inside the container should not be able to point the host elsewhere.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from devcell import safeio
from devcell.records import Record

LIMIT = 64 * 1024
"""Bytes read of any cgroup or proc file (memory.stat is ~1 KiB; mountinfo a few KiB)."""
V1, V2 = "v1", "v2"


class Mount(Record):
    """A cgroup hierarchy mounted on this host (/proc/self/mountinfo)."""

    point: str
    root: str
    """The directory of the hierarchy mounted there (`/` unless a subtree is)."""
    fstype: str
    options: frozenset[str]
    """Super options: the v1 controllers (`memory`, `cpuacct`, ...)."""


class CgroupUsage(Record):
    """A container's memory and CPU as its cgroup's files report them."""

    version: str
    memory_bytes: int | None
    cpu_seconds: float | None
    path: str
    """The memory group's directory read (for describe and errors)."""


def read_text(path: Path) -> str | None:
    """The file's first LIMIT bytes as text, None when it is missing or not a regular file."""
    try:
        fd = safeio.open_regular(path.parent, path.name)
    except (OSError, safeio.UnsafeFile):
        return None
    try:
        return safeio.read_some(fd, LIMIT).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts in a mountinfo file."""
    found = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(" "), right.split(" ")
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        found.append(Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0],
                           frozenset(tail[2].split(","))))
    return found


def parse_membership(text: str) -> dict[str, str]:
    """`/proc/<pid>/cgroup`: controller -> group path; the unified hierarchy under ''."""
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            groups[""] = path
        for name in controllers.split(","):
            if name:
                groups[name] = path
    return groups


def under(mount: Mount, group: str) -> Path | None:
    """The directory of `group` (a path in the hierarchy) where `mount` shows it."""
    root = mount.root.rstrip("/")
    if group != root and not group.startswith(root + "/"):
        return None
    rel = group[len(root):].lstrip("/")
    if ".." in rel.split("/"):
        return None
    return Path(mount.point) / rel if rel else Path(mount.point)


def _v1_mount(mounts: list[Mount], controller: str) -> Mount | None:
    return next((m for m in mounts if m.fstype == "cgroup" and controller in m.options), None)


def _v2_mount(mounts: list[Mount]) -> Mount | None:
    return next((m for m in mounts if m.fstype == "cgroup2"), None)


def locate(mounts: list[Mount], groups: dict[str, str]) -> tuple[str, Path, Path] | None:
    """(version, memory directory, cpu directory) of a process in `groups`: v1 when a v1
    memory hierarchy holds it (hybrid machines keep the controllers there), else v2."""
    memory, cpuacct = _v1_mount(mounts, "memory"), _v1_mount(mounts, "cpuacct")
    if memory is not None and cpuacct is not None and "memory" in groups \
            and "cpuacct" in groups:
        mem_dir, cpu_dir = under(memory, groups["memory"]), under(cpuacct, groups["cpuacct"])
        if mem_dir is not None and cpu_dir is not None:
            return V1, mem_dir, cpu_dir
    unified = _v2_mount(mounts)
    if unified is not None and "" in groups:
        directory = under(unified, groups[""])
        if directory is not None:
            return V2, directory, directory
    return None


def guesses(mounts: list[Mount], container_id: str, parent: str) -> list[tuple[str, Path, Path]]:
    """Where the engine puts a container's group, from its id and CgroupParent (cgroupfs:
    <parent or /docker>/<id>; systemd: <parent or system.slice>/docker-<id>.scope)."""
    if not re.fullmatch(r"[0-9a-f]{12,64}", container_id) or ".." in parent.split("/"):
        return []
    groups = [f"/{parent.strip('/') or 'docker'}/{container_id}",
              f"/{parent.strip('/') or 'system.slice'}/docker-{container_id}.scope"]
    found = []
    for group in groups:
        for where in (locate(mounts, {"memory": group, "cpuacct": group}),
                      locate(mounts, {"": group})):
            if where is not None:
                found.append(where)
    return found


def _stat_value(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


def _number(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isdigit() else None


def read_v1(memory_dir: Path, cpu_dir: Path) -> CgroupUsage | None:
    usage = _number(read_text(memory_dir / "memory.usage_in_bytes"))
    if usage is None:
        return None
    inactive = _stat_value(read_text(memory_dir / "memory.stat"), "total_inactive_file") or 0
    cpu_ns = _number(read_text(cpu_dir / "cpuacct.usage"))
    return CgroupUsage(V1, max(usage - inactive, 0),
                       None if cpu_ns is None else cpu_ns / 1e9, str(memory_dir))


def read_v2(directory: Path) -> CgroupUsage | None:
    usage = _number(read_text(directory / "memory.current"))
    if usage is None:
        return None
    inactive = _stat_value(read_text(directory / "memory.stat"), "inactive_file") or 0
    cpu_us = _stat_value(read_text(directory / "cpu.stat"), "usage_usec")
    return CgroupUsage(V2, max(usage - inactive, 0),
                       None if cpu_us is None else cpu_us / 1e6, str(directory))


def read(where: tuple[str, Path, Path]) -> CgroupUsage | None:
    version, memory_dir, cpu_dir = where
    return read_v1(memory_dir, cpu_dir) if version == V1 else read_v2(memory_dir)


def usage_of(*, pid: int | None, container_id: str, parent: str = "",
             proc: Path = Path("/proc")) -> CgroupUsage | None:
    """The container's memory and CPU, or None when no group of it can be read (stopped,
    or the hierarchies are not visible from here)."""
    mounts = parse_mountinfo(read_text(proc / str(os.getpid()) / "mountinfo") or "")
    candidates: list[tuple[str, Path, Path]] = []
    if pid:
        where = locate(mounts, parse_membership(read_text(proc / str(pid) / "cgroup") or ""))
        if where is not None:
            candidates.append(where)
    candidates += guesses(mounts, container_id, parent)
    for where in candidates:
        found = read(where)
        if found is not None:
            return found
    return None
