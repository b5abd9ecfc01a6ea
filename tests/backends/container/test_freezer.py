"""The cgroup freezer, on a synthetic hierarchy (no engine): where a container's group is
found, how each version's state reads, and that a group which does not freeze in time is
thawed again and reported (the caller then asks the engine)."""

from __future__ import annotations

from pathlib import Path

from devcell.backends.container import freezer

CID = "ab" * 32


def _mountinfo(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def _v1(tmp_path: Path, group: str) -> tuple[Path, Path]:
    root = tmp_path / "freezer"
    directory = root / group.lstrip("/")
    directory.mkdir(parents=True)
    (directory / "freezer.state").write_text("THAWED\n")
    info = _mountinfo(tmp_path, f"30 25 0:27 / {root} rw,nosuid - cgroup cgroup rw,freezer")
    return info, directory


def test_v1_found_under_cgroupfs_and_frozen_and_thawed(tmp_path: Path) -> None:
    info, directory = _v1(tmp_path, f"/docker/{CID}")
    found = freezer.of_container(CID, mountinfo=info)
    assert found == freezer.Freezer("v1", directory)
    assert found.state() is freezer.State.THAWED
    assert found.freeze(timeout=0.5)  # a plain file reads back what was written: FROZEN
    assert found.state() is freezer.State.FROZEN
    assert found.thaw() and found.state() is freezer.State.THAWED


def test_v2_found_under_systemd_and_its_state_read_from_events(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    directory = root / f"system.slice/docker-{CID}.scope"
    directory.mkdir(parents=True)
    (directory / "cgroup.freeze").write_text("1\n")
    (directory / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    info = _mountinfo(tmp_path, f"30 25 0:27 / {root} rw - cgroup2 cgroup2 rw")
    found = freezer.of_container(CID, mountinfo=info)
    assert found == freezer.Freezer("v2", directory)
    assert found.state() is freezer.State.FROZEN
    (directory / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    assert found.state() is freezer.State.FREEZING  # asked, not yet frozen


def test_a_group_that_does_not_freeze_in_time_is_thawed_and_refused(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    directory = root / "docker" / CID
    directory.mkdir(parents=True)
    (directory / "cgroup.freeze").write_text("0\n")
    (directory / "cgroup.events").write_text("populated 1\nfrozen 0\n")  # never changes
    info = _mountinfo(tmp_path, f"30 25 0:27 / {root} rw - cgroup2 cgroup2 rw")
    found = freezer.of_container(CID, mountinfo=info)
    assert found is not None and not found.freeze(timeout=0.05)
    assert (directory / "cgroup.freeze").read_text() == "0"  # thawed again


def test_no_group_a_short_id_or_a_link_is_no_freezer(tmp_path: Path) -> None:
    info, directory = _v1(tmp_path, f"/docker/{CID}")
    assert freezer.of_container("ab" * 6, mountinfo=info) is None  # only a full id
    assert freezer.of_container("cd" * 32, mountinfo=info) is None
    (directory / "freezer.state").unlink()
    (directory / "freezer.state").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("THAWED\n")
    found = freezer.of_container(CID, mountinfo=info)
    assert found is None or (not found.freeze(timeout=0.05)
                             and (tmp_path / "elsewhere").read_text() == "THAWED\n")
