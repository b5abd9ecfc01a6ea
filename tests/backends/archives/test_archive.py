"""Snapshot archives: a round trip keeps the tree exactly; a damaged, altered or hostile
archive is refused and writes nothing outside its destination."""

from __future__ import annotations

import io
import itertools
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import pytest

from devcell.backends.archives import format as fmt
from devcell.backends.archives import read as archive_read
from devcell.backends.archives import write as archive_write
from devcell.backends.archives.format import Limits
from devcell.errors import ArchiveRefused, BackendError
from tests.backends.archive_support import (
    HEADER,
    ROOT,
    craft,
    make_tree,
    member,
    tree_state,
)


def export(tree: Path | None) -> bytes:
    out = io.BytesIO()
    archive_write.write(out, HEADER, tree)
    return out.getvalue()


def unpack(data: bytes, dest: Path, limits: Limits = archive_read.DEFAULT_LIMITS
           ) -> archive_read.Read:
    return archive_read.read(io.BytesIO(data), dest, limits=limits)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "checkpoint"
    root.mkdir()
    make_tree(root)
    return root


def test_round_trip_keeps_contents_modes_links_and_times(tree: Path, tmp_path: Path) -> None:
    os.mkfifo(tree / "fifo")  # no special file travels: skipped on export
    expected = tree_state(tree, strip_setuid=True)
    del expected["fifo"]
    result = unpack(export(tree), tmp_path / "restored")
    assert tree_state(tmp_path / "restored") == expected
    assert result.header.name == "moved" and result.files == 7
    assert tree_state(tmp_path / "restored")["run.sh"]["mode"] == 0o755


def test_archive_is_readable_by_tar(tree: Path, tmp_path: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(export(tree))) as tar:
        names = tar.getnames()
    assert names[0] == fmt.HEADER and names[-1] == fmt.TRAILER
    assert "workspace/src/main.py" in names


def test_export_of_a_backend_without_files_carries_no_tree(tmp_path: Path) -> None:
    header = HEADER.replace(b'"tree": true', b'"tree": false')
    out = io.BytesIO()
    archive_write.write(out, header, None)
    result = archive_read.read(io.BytesIO(out.getvalue()), None)
    assert result.entries == 0 and not result.header.has_tree


def _offsets(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def _refused(data: bytes, dest: Path, match: str) -> None:
    with pytest.raises(ArchiveRefused, match=match):
        unpack(data, dest)


def test_a_flipped_byte_in_a_file_is_refused(tree: Path, tmp_path: Path) -> None:
    data = bytearray(export(tree))
    at = _offsets(bytes(data))["workspace/src/pkg/data.bin"].offset_data + 1234
    data[at] ^= 0x01
    _refused(bytes(data), tmp_path / "dest", "checksum mismatch")


@pytest.mark.parametrize("where", ["in a file", "before the trailer", "in the trailer"])
def test_a_truncated_archive_is_refused(tree: Path, tmp_path: Path, where: str) -> None:
    data = export(tree)
    members = _offsets(data)
    cut = {"in a file": members["workspace/src/pkg/data.bin"].offset_data + 1000,
           "before the trailer": members[fmt.TRAILER].offset,
           "in the trailer": members[fmt.TRAILER].offset_data + 10}[where]
    _refused(data[:cut], tmp_path / "dest", "truncated|cut short|damaged")


def _trailer(data: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        found = tar.extractfile(fmt.TRAILER)
        assert found is not None
        return found.read()


def test_altered_metadata_is_refused(tmp_path: Path) -> None:
    honest = [ROOT, member("workspace/tool", data=b"#!/bin/sh\n", mode=0o644)]
    altered = [ROOT, member("workspace/tool", data=b"#!/bin/sh\n", mode=0o755)]
    assert unpack(craft(honest), tmp_path / "ok").files == 1
    _refused(craft(altered, trailer=_trailer(craft(honest))), tmp_path / "dest",
             "checksum mismatch")


def test_a_wrong_checksum_is_refused(tmp_path: Path) -> None:
    wrong = json.dumps({"sha256": "0" * 64, "entries": 1, "bytes": 0}).encode()
    _refused(craft([ROOT], trailer=wrong), tmp_path / "dest", "checksum mismatch")


def test_an_unknown_format_version_is_refused(tmp_path: Path) -> None:
    header = HEADER.replace(b'"formatVersion": 1', b'"formatVersion": 2')
    _refused(craft([ROOT], header=header), tmp_path / "dest", "format version 2")


def test_an_archive_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo("etc/passwd")
        tar.addfile(info, io.BytesIO(b""))
    _refused(out.getvalue(), tmp_path / "dest", "first member")
    _refused(b"\x1f\x8b not a tar at all" * 50, tmp_path / "dest", "damaged|first member")


OUTSIDE = "outside"


def _hostile(tmp_path: Path) -> dict[str, list[tuple[tarfile.TarInfo, bytes]]]:
    out = str(tmp_path / OUTSIDE)
    return {
        "dot-dot": [ROOT, member("workspace/../escaped", data=b"x")],
        "dot-dot-deep": [ROOT, member("workspace/a/../../escaped", data=b"x")],
        "absolute": [ROOT, member(out + "/escaped", data=b"x")],
        "not under workspace": [ROOT, member("escaped", data=b"x")],
        "through a symlink": [ROOT, member("workspace/l", tarfile.SYMTYPE, link=out),
                              member("workspace/l/escaped", data=b"x")],
        "through a symlink to a dir member": [
            ROOT, member("workspace/l", tarfile.SYMTYPE, link="../.."),
            member("workspace/l/escaped", tarfile.DIRTYPE)],
        "hard link to /etc/passwd": [ROOT, member("workspace/p", tarfile.LNKTYPE,
                                                  link="/etc/passwd")],
        "hard link climbing out": [ROOT, member("workspace/p", tarfile.LNKTYPE,
                                                link="workspace/../../../etc/passwd")],
        "hard link to a symlink": [ROOT, member("workspace/l", tarfile.SYMTYPE,
                                                link="/etc/passwd"),
                                   member("workspace/p", tarfile.LNKTYPE, link="workspace/l")],
        "character device": [ROOT, member("workspace/null", tarfile.CHRTYPE)],
        "block device": [ROOT, member("workspace/sda", tarfile.BLKTYPE)],
        "fifo": [ROOT, member("workspace/pipe", tarfile.FIFOTYPE)],
        "duplicate": [ROOT, member("workspace/f", data=b"one"),
                      member("workspace/f", data=b"two")],
        "duplicate dir": [ROOT, member("workspace/d", tarfile.DIRTYPE),
                          member("workspace/d", tarfile.DIRTYPE)],
        "parent is a file": [ROOT, member("workspace/f", data=b"x"),
                             member("workspace/f/child", data=b"x")],
        "parent never made": [ROOT, member("workspace/nowhere/child", data=b"x")],
        "long component": [ROOT, member("workspace/" + "n" * 300, data=b"x")],
        "long name": [ROOT, member("workspace/" + "/".join(["d" * 200] * 100), data=b"x")],
        "nul in link": [ROOT, member("workspace/l", tarfile.SYMTYPE, link="a\0b")],
        "no root": [member("workspace/f", data=b"x")],
    }


def _listing(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("case", sorted(_hostile(Path("/x"))))
def test_hostile_members_are_refused_and_nothing_is_written_outside(
        tmp_path: Path, case: str) -> None:
    (tmp_path / OUTSIDE).mkdir()
    passwd = os.stat("/etc/passwd")
    before = _listing(tmp_path)
    data = craft(_hostile(tmp_path)[case])
    with pytest.raises(ArchiveRefused):
        unpack(data, tmp_path / "dest" / "workspace")
    after = [p for p in _listing(tmp_path) if not p.startswith("dest")]
    assert after == before
    assert not any((tmp_path / "dest").rglob("escaped"))
    now = os.stat("/etc/passwd")
    assert (now.st_nlink, now.st_mtime_ns) == (passwd.st_nlink, passwd.st_mtime_ns)


def test_setuid_and_setgid_are_stripped(tmp_path: Path) -> None:
    data = craft([ROOT, member("workspace/su", data=b"x", mode=0o6755),
                  member("workspace/sticky", tarfile.DIRTYPE, mode=0o1777)])
    unpack(data, tmp_path / "dest")
    assert os.stat(tmp_path / "dest" / "su").st_mode & 0o7777 == 0o755
    assert os.stat(tmp_path / "dest" / "sticky").st_mode & 0o7777 == 0o1777


def _claim(size: int) -> bytes:
    """An archive whose member claims `size` bytes, with none of them behind its header."""
    info, _ = member("workspace/huge", size=size)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = tarfile.TarInfo(fmt.HEADER)
        head.size = len(HEADER)
        tar.addfile(head, io.BytesIO(HEADER))
        tar.addfile(ROOT[0])
        out.write(info.tobuf(tarfile.PAX_FORMAT, fmt.ENCODING, fmt.ERRORS))
    return out.getvalue()


def test_a_huge_size_claim_with_nothing_behind_it_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRefused, match="damaged|truncated|cut short"):
        unpack(_claim(10 * 2**30), tmp_path / "dest")
    small = craft([ROOT, member("workspace/f", data=b"x" * 5000)])
    with pytest.raises(ArchiveRefused, match="claims 5000 bytes"):
        unpack(small, tmp_path / "dest2", Limits(total_bytes=4096))
    assert not (tmp_path / "dest2" / "f").exists()


def test_a_claim_beyond_the_free_space_is_refused_before_a_byte_is_written(
        tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with pytest.raises(ArchiveRefused, match="claims"):
        unpack(_claim(free), tmp_path / "dest")
    assert not (tmp_path / "dest" / "huge").exists()


class _Lazy(io.RawIOBase):
    """An archive of `count` tiny members, made as it is read: a reader that stops at its
    limit never even asks for the rest."""

    def __init__(self, count: int) -> None:
        self.asked = 0
        self.chunks = self._chunks(count)
        self.pending = b""

    def _chunks(self, count: int) -> Iterator[bytes]:
        head = tarfile.TarInfo(fmt.HEADER)
        head.size = len(HEADER)
        yield head.tobuf(tarfile.PAX_FORMAT) + HEADER + b"\0" * (512 - len(HEADER) % 512)
        yield ROOT[0].tobuf(tarfile.PAX_FORMAT, fmt.ENCODING, fmt.ERRORS)
        for i in range(count):
            self.asked += 1
            info, _ = member(f"workspace/f{i}")
            yield info.tobuf(tarfile.PAX_FORMAT, fmt.ENCODING, fmt.ERRORS)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while len(self.pending) < len(buffer):
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.pending += chunk
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def test_many_tiny_members_are_bounded(tmp_path: Path) -> None:
    stream = _Lazy(100_000)
    with pytest.raises(ArchiveRefused, match="more than 2000 members"):
        archive_read.read(cast(BinaryIO, stream), tmp_path / "dest",
                          limits=Limits(entries=2000))
    assert stream.asked < 2100
    assert len(list((tmp_path / "dest").iterdir())) < 2000


def test_thousands_of_members_within_the_limits_are_imported(tmp_path: Path) -> None:
    many = [ROOT, *(member(f"workspace/f{i}", data=b"%d" % i) for i in range(5000))]
    assert unpack(craft(many), tmp_path / "ok").files == 5000
    assert (tmp_path / "ok" / "f4321").read_bytes() == b"4321"


def test_export_and_import_hold_little_memory_whatever_the_file_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracemalloc

    monkeypatch.setattr(archive_write, "SPARSE_ABOVE", 1 << 40)  # streaming is measured here

    tree = tmp_path / "tree"
    tree.mkdir()
    with open(tree / "big", "wb") as f:
        f.truncate(256 * 2**20)  # sparse: 256 MiB read back as zeros
    archive = tmp_path / "big.tar"
    tracemalloc.start()
    try:
        with archive.open("wb") as out:
            archive_write.write(out, HEADER, tree)
        exported = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        with archive.open("rb") as source:
            archive_read.read(source, tmp_path / "dest")
        imported = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (tmp_path / "dest" / "big").stat().st_size == 256 * 2**20
    assert exported < 8 * 2**20 and imported < 8 * 2**20, (exported, imported)


class _Endless(io.RawIOBase):
    """`head` then `filler` bytes without end: what a hostile sender can stream."""

    def __init__(self, head: bytes, filler: bytes = b"0\n" * 256) -> None:
        self.head, self.filler, self.given = head, filler, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.head[:len(buffer)]
        self.head = self.head[len(data):]
        missing = len(buffer) - len(data)
        if missing:
            data += (self.filler * (missing // len(self.filler) + 1))[:missing]
        buffer[:len(data)] = data
        self.given += len(data)
        if self.given > 512 * 2**20:
            raise AssertionError("the reader kept reading a claim it should have refused")
        return len(data)


def _prefix() -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        head = tarfile.TarInfo(fmt.HEADER)
        head.size = len(HEADER)
        tar.addfile(head, io.BytesIO(HEADER))
        tar.addfile(ROOT[0])
    return out.getvalue()[:-1024 * 9]  # without tar's end-of-archive blocks


def _metadata_claim(kind: bytes) -> bytes:
    info = tarfile.TarInfo("claim")
    info.type, info.size = kind, 256 * 2**20
    return info.tobuf(tarfile.GNU_FORMAT, fmt.ENCODING, fmt.ERRORS)


def _sparse_claim() -> bytes:
    info = tarfile.TarInfo("GNUSparseFile.0/s")
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                        "GNU.sparse.name": "workspace/s", "GNU.sparse.realsize": "1"}
    info.size = 512
    return info.tobuf(tarfile.PAX_FORMAT, fmt.ENCODING, fmt.ERRORS) + b"99999999999\n"


@pytest.mark.parametrize("claim", ["pax header", "GNU long name", "GNU long link",
                                   "sparse map"])
def test_metadata_claims_are_refused_before_tarfile_holds_them(tmp_path: Path,
                                                               claim: str) -> None:
    import tracemalloc

    head = _prefix() + {"pax header": lambda: _metadata_claim(tarfile.XHDTYPE),
                        "GNU long name": lambda: _metadata_claim(tarfile.GNUTYPE_LONGNAME),
                        "GNU long link": lambda: _metadata_claim(tarfile.GNUTYPE_LONGLINK),
                        "sparse map": _sparse_claim}[claim]()
    stream = _Endless(head)
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveRefused):
            archive_read.read(cast(BinaryIO, stream), tmp_path / "dest")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


def test_a_sparse_bomb_in_the_checkpoint_is_refused_not_exported(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok").write_bytes(b"x" * 4096)
    with open(tree / "sparse", "wb") as f:
        f.truncate(64 * 2**30)  # 64 GiB of nothing, as a hostile cell plants it
    out = io.BytesIO()
    with pytest.raises(BackendError, match="sparse file"):
        archive_write.write(out, HEADER, tree)
    assert len(out.getvalue()) < 2**20


class _Members(io.RawIOBase):
    """`head`, then the members `make(i)` builds one at a time, then tar's end blocks: a
    large stream made lazily (the test holds one member at a time, as the reader should)."""

    def __init__(self, head: bytes, make: Any, times: int) -> None:
        self.parts = itertools.chain([head], (make(i) for i in range(times)), [b"\0" * 10240])
        self.current = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.current:
            self.current = next(self.parts, b"")
            if not self.current:
                return 0
        data = self.current[:len(buffer)]
        self.current = self.current[len(data):]
        buffer[:len(data)] = data
        return len(data)


def test_members_with_large_pax_headers_are_not_held_together(tmp_path: Path) -> None:
    """100 members each carrying a PAX record just under the per-record bound: tarfile kept
    every member it had read (600 of them held 623 MB); memory is now that of one member."""
    import tracemalloc

    def make(i: int) -> bytes:
        info, _ = member(f"workspace/f{i:04d}")
        info.pax_headers["comment"] = "x" * (archive_read.METADATA_MAX - 4096)
        return info.tobuf(tarfile.PAX_FORMAT, fmt.ENCODING, fmt.ERRORS)

    out = io.BytesIO()
    tar = tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT)
    head = tarfile.TarInfo(fmt.HEADER)
    head.size = len(HEADER)
    tar.addfile(head, io.BytesIO(HEADER))
    tar.addfile(ROOT[0])
    prefix = out.getvalue()[:tar.offset]  # the members so far, no end blocks
    stream = _Members(prefix, make, 100)
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveRefused) as refused:
            archive_read.read(cast(BinaryIO, stream), tmp_path / "dest")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "f0599" in str(refused.value) or "checksum" in str(refused.value) or \
        "trailer" in str(refused.value) or "ends" in str(refused.value), refused.value
    assert peak < 16 * 2**20, peak
