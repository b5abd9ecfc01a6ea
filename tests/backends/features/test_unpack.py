"""A feature's tarball extracted refusing links, devices, absolute names and `..`."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from devcell.backends.features import unpack
from devcell.errors import ImageBuildFailed


def _tar(*members: tarfile.TarInfo, gz: bool = False) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz" if gz else "w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isreg() else None)
    out.seek(0)
    return out


def _file(name: str, size: int = 3, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, mode
    return info


def _special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_regular_files_and_directories_are_extracted(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    unpack.extract(_tar(_file("./install.sh", mode=0o700), _file("./lib/a.sh"), gz=True),
                   str(dest), "f")
    assert (dest / "lib" / "a.sh").read_bytes() == b"xxx"
    assert os.stat(dest / "install.sh").st_mode & 0o777 == 0o755


@pytest.mark.parametrize("member", [
    _special("./link", tarfile.SYMTYPE, "/etc/passwd"),
    _special("./hard", tarfile.LNKTYPE, "install.sh"),
    _special("./dev", tarfile.CHRTYPE),
    _special("./fifo", tarfile.FIFOTYPE),
    _file("/etc/evil"),
    _file("a/../../evil"),
])
def test_anything_else_is_refused_and_nothing_kept(tmp_path: Path,
                                                   member: tarfile.TarInfo) -> None:
    dest = tmp_path / "out"
    with pytest.raises(ImageBuildFailed, match="refused"):
        unpack.extract(_tar(_file("install.sh"), member), str(dest), "f")
    assert not dest.exists()
    assert not (tmp_path / "evil").exists()


def test_content_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(unpack, "MAX_BYTES", 4)
    with pytest.raises(ImageBuildFailed, match="more than"):
        unpack.extract(_tar(_file("a"), _file("b")), str(tmp_path / "out"), "f")


def test_not_a_tarball_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildFailed, match="cannot be read"):
        unpack.extract(io.BytesIO(b"not a tar" * 100), str(tmp_path / "out"), "f")
