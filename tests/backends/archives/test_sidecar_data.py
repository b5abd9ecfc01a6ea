"""Snapshot archives of a cell with sidecars: each sidecar's data travels under
`sidecars/<name>/` beside the workspace, exactly, and an archive that plants anything else
there (a name its header does not list, a link across trees, a file in place of a sidecar's
directory) is refused with nothing written outside its destinations."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from devcell.backends.archives import format as fmt
from devcell.backends.archives import read as archive_read
from devcell.backends.archives import write as archive_write
from devcell.errors import ArchiveRefused
from tests.backends.archive_support import HEADER, ROOT, craft, make_tree, member, tree_state

WITH_DB = fmt.header_bytes(
    name="moved", snapshot_id="snap_source01", labels={}, annotations={}, cell="api",
    cell_id="cell_source01", parent_snapshot_id=None, consistency="filesystem",
    backend="container", taken_at=None, exported_at="2026-01-02T00:00:00Z",
    devcell_version="0.1.0", schema_version=4, has_tree=True, sidecars=("db",))
SIDECARS = member("sidecars", tarfile.DIRTYPE, mode=0o700)
DB = member("sidecars/db", tarfile.DIRTYPE, mode=0o755)


def _checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    tree, sidecars = tmp_path / "cp" / "workspace", tmp_path / "cp" / "sidecars"
    tree.mkdir(parents=True)
    (tree / "app.py").write_text("print(1)\n")
    (sidecars / "db").mkdir(parents=True)
    make_tree(sidecars / "db")
    (sidecars / "cache").mkdir()
    (sidecars / "cache" / "hits").write_text("3\n")
    os.symlink("/etc", sidecars / "planted")  # a link is never a sidecar's data
    (sidecars / "Not-Safe").mkdir()  # nor a name no sidecar can have
    return tree, sidecars


def _export(tree: Path, sidecars: Path) -> bytes:
    names = archive_write.sidecar_names(sidecars)
    header = fmt.header_bytes(
        name="moved", snapshot_id="snap_source01", labels={}, annotations={}, cell="api",
        cell_id="cell_source01", parent_snapshot_id=None, consistency="filesystem",
        backend="container", taken_at=None, exported_at="2026-01-02T00:00:00Z",
        devcell_version="0.1.0", schema_version=4, has_tree=True, sidecars=names)
    out = io.BytesIO()
    archive_write.write(out, header, tree, sidecars, names)
    return out.getvalue()


def test_sidecars_data_round_trips_beside_the_workspace(tmp_path: Path) -> None:
    tree, sidecars = _checkpoint(tmp_path)
    assert archive_write.sidecar_names(sidecars) == ("cache", "db")
    data = _export(tree, sidecars)
    dest = tmp_path / "new"
    dest.mkdir()
    read = archive_read.Archive(io.BytesIO(data)).extract(dest / "workspace",
                                                          dest / "sidecars")
    assert read.header.sidecars == ("cache", "db")
    assert sorted(os.listdir(dest / "sidecars")) == ["cache", "db"]
    assert tree_state(dest / "sidecars" / "db") == tree_state(sidecars / "db",
                                                              strip_setuid=True)
    assert (dest / "sidecars" / "cache" / "hits").read_text() == "3\n"
    assert (dest / "workspace" / "app.py").read_text() == "print(1)\n"
    # a backend that keeps no sidecars checks them all the same, and writes none
    other = tmp_path / "other"
    other.mkdir()
    archive_read.Archive(io.BytesIO(data)).extract(other / "workspace")
    assert os.listdir(other) == ["workspace"]


def test_an_archive_without_sidecars_is_what_it_was() -> None:
    assert b"sidecars" not in HEADER
    assert fmt.parse_header(HEADER).sidecars == ()


def test_a_damaged_sidecar_file_is_refused(tmp_path: Path) -> None:
    tree, sidecars = _checkpoint(tmp_path)
    data = bytearray(_export(tree, sidecars))
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        at = tar.getmember("sidecars/db/src/pkg/data.bin").offset_data + 99
    data[at] ^= 0x01
    (tmp_path / "d").mkdir()
    with pytest.raises(ArchiveRefused, match="checksum mismatch"):
        archive_read.Archive(io.BytesIO(bytes(data))).extract(tmp_path / "d" / "w",
                                                              tmp_path / "d" / "s")


def _hostile() -> dict[str, tuple[bytes, list[tuple[tarfile.TarInfo, bytes]]]]:
    return {
        "sidecars the header does not list": (HEADER, [ROOT, SIDECARS, DB]),
        "a sidecar the header does not list": (WITH_DB, [ROOT, SIDECARS, DB, member(
            "sidecars/other", tarfile.DIRTYPE)]),
        "a listed sidecar missing": (WITH_DB, [ROOT, SIDECARS]),
        "a file for a sidecar": (WITH_DB, [ROOT, SIDECARS, member("sidecars/db", data=b"x")]),
        "a link for a sidecar": (WITH_DB, [ROOT, SIDECARS, member(
            "sidecars/db", tarfile.SYMTYPE, link="/etc")]),
        "a file for the sidecars": (WITH_DB, [ROOT, member("sidecars", data=b"x")]),
        "dot-dot": (WITH_DB, [ROOT, SIDECARS, DB, member("sidecars/db/../../escaped",
                                                         data=b"x")]),
        "through a planted link": (WITH_DB, [ROOT, SIDECARS, DB, member(
            "sidecars/db/l", tarfile.SYMTYPE, link="/tmp"), member("sidecars/db/l/escaped",
                                                                     data=b"x")]),
        "a hard link across trees": (WITH_DB, [ROOT, member("workspace/f", data=b"x"),
                                               SIDECARS, DB, member(
            "sidecars/db/f", tarfile.LNKTYPE, link="workspace/f")]),
        "a device": (WITH_DB, [ROOT, SIDECARS, DB, member("sidecars/db/null",
                                                          tarfile.CHRTYPE)]),
    }


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_hostile_sidecar_members_are_refused(tmp_path: Path, case: str) -> None:
    header, members = _hostile()[case]
    (tmp_path / "dest").mkdir()
    with pytest.raises(ArchiveRefused):
        archive_read.Archive(io.BytesIO(craft(members, header=header))).extract(
            tmp_path / "dest" / "workspace", tmp_path / "dest" / "sidecars")
    assert not any(tmp_path.rglob("escaped"))
    assert sorted(os.listdir(tmp_path)) == ["dest"]


@pytest.mark.parametrize("value", ['["../x"]', '["db", "db"]', '"db"', '[1]',
                                   '["' + "a" * 64 + '"]'])
def test_a_bad_sidecars_header_field_is_refused(value: str) -> None:
    raw = WITH_DB.replace(b'"sidecars": [\n  "db"\n ]', f'"sidecars": {value}'.encode())
    assert raw != WITH_DB
    with pytest.raises(ArchiveRefused, match="header field sidecars"):
        fmt.parse_header(raw)
