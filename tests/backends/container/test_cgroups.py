"""A container's memory and CPU read from cgroup files: v2 (unified) and v1 (per-controller)
layouts from fixture files as the kernel writes them, found from the process's membership or,
without it, from the container id and the engine's CgroupParent."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from devcell.backends.container import cgroups

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cgroups"
CONTAINER = "4f1c0a9e2b7d4c3e8a6f5b1d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e"
PID = 4242


def _machine(tmp_path: Path, version: str) -> Path:
    """The fixture as a machine rooted at tmp_path: its /proc (this process's mountinfo
    naming the fixture's mounts under the root) and its /sys/fs/cgroup."""
    root = tmp_path / version
    shutil.copytree(FIXTURES / version, root)
    mountinfo = (FIXTURES / version / "mountinfo").read_text().replace("@ROOT@", str(root))
    (root / "proc" / str(os.getpid())).mkdir(parents=True)
    (root / "proc" / str(os.getpid()) / "mountinfo").write_text(mountinfo)
    return root


def test_v2_memory_and_cpu_from_the_unified_hierarchy(tmp_path: Path) -> None:
    root = _machine(tmp_path, "v2")
    found = cgroups.usage_of(pid=PID, container_id=CONTAINER, proc=root / "proc")
    assert found is not None and found.version == cgroups.V2
    assert found.memory_bytes == 7340032 - 1048576  # memory.current - inactive_file
    assert found.cpu_seconds == pytest.approx(2.5)  # usage_usec
    assert found.path.endswith(f"system.slice/docker-{CONTAINER}.scope")


def test_v2_found_from_the_container_id_under_systemd_without_the_process(
        tmp_path: Path) -> None:
    root = _machine(tmp_path, "v2")
    found = cgroups.usage_of(pid=None, container_id=CONTAINER, parent="", proc=root / "proc")
    assert found is not None and found.memory_bytes == 7340032 - 1048576


def test_v1_memory_and_cpu_from_their_own_hierarchies(tmp_path: Path) -> None:
    root = _machine(tmp_path, "v1")
    found = cgroups.usage_of(pid=PID, container_id=CONTAINER, proc=root / "proc")
    assert found is not None and found.version == cgroups.V1  # hybrid: v1 holds memory
    assert found.memory_bytes == 5242880 - 1572864  # usage_in_bytes - total_inactive_file
    assert found.cpu_seconds == pytest.approx(1.25)  # cpuacct.usage in ns
    without_pid = cgroups.usage_of(pid=None, container_id=CONTAINER, parent="/docker",
                                   proc=root / "proc")
    assert without_pid == found


def test_parsing_mountinfo_and_membership() -> None:
    mounts = cgroups.parse_mountinfo((FIXTURES / "v1" / "mountinfo").read_text())
    assert [(m.fstype, sorted(m.options - {"rw"})) for m in mounts] == [
        ("cgroup", ["cpu", "cpuacct"]), ("cgroup", ["memory"]), ("cgroup2", [])]
    groups = cgroups.parse_membership((FIXTURES / "v1" / "proc" / "4242" / "cgroup").read_text())
    assert groups["memory"] == groups["cpuacct"] == groups[""] == f"/docker/{CONTAINER}"


def test_a_group_outside_the_mounted_subtree_or_climbing_out_is_not_read() -> None:
    mount = cgroups.Mount("/sys/fs/cgroup", "/kubepods", "cgroup2", frozenset())
    assert cgroups.locate([mount], {"": "/docker/x"}) is None
    assert cgroups.locate([mount], {"": "/kubepods/../../etc"}) is None
    assert cgroups.guesses([mount], "not-an-id", "") == []
    assert cgroups.guesses([mount], CONTAINER, "../..") == []


def test_a_link_in_place_of_a_cgroup_file_is_not_followed(tmp_path: Path) -> None:
    root = _machine(tmp_path, "v2")
    group = root / "sys" / "fs" / "cgroup" / "system.slice" / f"docker-{CONTAINER}.scope"
    secret = tmp_path / "secret"
    secret.write_text("123456\n")
    (group / "memory.current").unlink()
    os.symlink(secret, group / "memory.current")
    assert cgroups.usage_of(pid=PID, container_id=CONTAINER, proc=root / "proc") is None


def test_reads_are_bounded(tmp_path: Path) -> None:
    huge = tmp_path / "memory.stat"
    with huge.open("wb") as out:
        out.truncate(1 << 30)  # sparse: a gigabyte of NULs
    text = cgroups.read_text(huge)
    assert text is not None and len(text) == cgroups.LIMIT
