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


def test_modes_are_the_same_under_a_narrow_umask(tmp_path: Path) -> None:
    """A user's umask of 077 (common on hardened machines) must not make a feature's files
    unreadable to the image's own users."""
    old = os.umask(0o077)
    try:
        unpack.extract(_tar(_file("./install.sh", mode=0o700), _file("./lib/sub/a.sh")),
                       str(tmp_path / "out"), "f")
    finally:
        os.umask(old)
    out = tmp_path / "out"
    assert {str(p.relative_to(out)): os.stat(p).st_mode & 0o777 for p in out.rglob("*")} == {
        "install.sh": 0o755, "lib": 0o755, "lib/sub": 0o755, "lib/sub/a.sh": 0o644}


def _dir(name: str, mode: int = 0o755) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    return info


@pytest.mark.parametrize("members", [
    (_file("a"), _dir("a")),
    (_file("a"), _dir("a/b")),
    (_file("a"), _file("a/b")),
    (_dir("a"), _file("a")),
    (_file("a"), _file("a")),
], ids=["file, dir", "file, dir under it", "file, file under it", "dir, file", "file, file"])
def test_a_name_given_as_a_file_and_again_is_refused(
        tmp_path: Path, members: tuple[tarfile.TarInfo, ...]) -> None:
    """A file then a directory of the same name was taken silently (the directory entry
    dropped), and a file under that name was "cannot be read ([Errno 20] Not a directory:
    /host/path)"."""
    dest = tmp_path / "out"
    with pytest.raises(ImageBuildFailed, match="^feature f: its tarball names one file twice; "
                       "refused$"):
        unpack.extract(_tar(_file("install.sh"), *members), str(dest), "f")
    assert not dest.exists()


def test_odd_modes_come_out_0755_or_0644_under_any_umask(tmp_path: Path) -> None:
    """setuid, world-writable, sticky and unreadable entries: only the execute bit is kept."""
    members = (_file("su", mode=0o4777), _file("none", mode=0o000), _dir("d", mode=0o000),
               _file("d/e", mode=0o2755), _dir("w", mode=0o1777), _file("s/t/u", mode=0o7666))
    for umask in (0o000, 0o077):
        out = tmp_path / f"out{umask}"
        old = os.umask(umask)
        try:
            unpack.extract(_tar(*members), str(out), "f")
        finally:
            os.umask(old)
        assert {str(p.relative_to(out)): os.stat(p).st_mode & 0o7777
                for p in out.rglob("*")} == {
            "su": 0o755, "none": 0o644, "d": 0o755, "d/e": 0o755, "w": 0o755, "s": 0o755,
            "s/t": 0o755, "s/t/u": 0o644}


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


def test_a_huge_header_from_a_small_gzip_is_refused_without_holding_it(tmp_path: Path) -> None:
    """A pax header 128 MiB long compresses to a few hundred KiB: tarfile reads a header
    whole, so the decompressed bytes must be bounded (MAX_STREAM) before it asks for them:
    at 64 MiB of gzip that header would be 64 GiB."""
    import gzip
    import tracemalloc

    header = bytearray(512)
    header[0:9] = b"PaxHeader"
    header[100:108] = b"0000644\0"
    header[124:136] = b"%011o\0" % (128 << 20)
    header[156:157] = b"x"
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as gz:
        gz.write(bytes(header))
        zeros = bytes(1 << 20)
        for _ in range(129):
            gz.write(zeros)
    raw.seek(0)
    tracemalloc.start()
    try:
        with pytest.raises(ImageBuildFailed, match="refused|cannot be read"):
            unpack.extract(raw, str(tmp_path / "out"), "f")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < unpack.MAX_STREAM + (16 << 20), f"held {peak >> 20} MiB"
    assert not (tmp_path / "out").exists()
