"""`snapshot export` / `snapshot import` as library calls, on the fake backend: a snapshot moves
to another state directory, is Ready there and can be forked; a refused archive changes
nothing; both verbs are recorded as operations."""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as apply_api
from devcell.api import cells, transfer
from devcell.backends.archives import format as fmt
from devcell.errors import ArchiveRefused, Conflict
from devcell.store import objects
from devcell.store.db import open_database

CELL = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
        "metadata": {"name": "api", "labels": {"team": "core"}},
        "spec": {"backend": "fake", "image": "devcell/busybox:latest"}}


def fork_of(snapshot: str, name: str = "moved") -> dict[str, Any]:
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
            "spec": {"backend": "fake", "image": "devcell/busybox:latest",
                     "workspace": {"from": {"snapshot": snapshot}}}}


@pytest.fixture
def archive(tmp_path: Path, write: Any) -> Path:
    source = tmp_path / "source"
    apply_api.apply(source, [write("cell.yaml", CELL)])
    cells.snapshot(source, "api", name="before")
    target = tmp_path / "before.tar"
    done = transfer.export(source, "before", target)
    assert len(done.sha256) == 64 and target.stat().st_mode & 0o777 == 0o600
    return target


def _world(state: Path) -> dict[str, Any]:
    """Everything an import could have written: rows of every table, files under images/."""
    if not (state / "state.db").exists():
        return {}
    conn = sqlite3.connect(state / "state.db")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    rows = {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    conn.close()
    fake = sqlite3.connect(state / "backends" / "fake.db")
    rows["fake.checkpoints"] = fake.execute("SELECT * FROM checkpoints").fetchall()
    fake.close()
    images = state / "images"
    rows["files"] = sorted(str(p) for p in images.rglob("*")) if images.exists() else []
    return rows


def test_export_import_fork_into_another_state_directory(tmp_path: Path, archive: Path,
                                                         write: Any) -> None:
    target = tmp_path / "target"
    with archive.open("rb") as source:
        done = transfer.import_(target, source, origin=str(archive))
    assert (done.name, done.backend) == ("before", "fake")
    db = open_database(target)
    snap = objects.require(db.conn, "Snapshot", "before")
    assert snap.phase == "Ready" and snap.id == done.id and snap.labels == {}
    assert snap.status["origin"]["cell"] == "api" and snap.extra["cell_id"] is None
    ops = db.conn.execute("SELECT action, status FROM operations WHERE object_id = ?",
                          (snap.id,)).fetchall()
    assert [tuple(r) for r in ops] == [("import", "Succeeded")]
    db.close()
    report = apply_api.apply(target, [write("fork.yaml", fork_of("before"))])
    assert report.ok, report
    db = open_database(target)
    fork = objects.require(db.conn, "Cell", "moved")
    assert fork.phase == "Running" and fork.extra["forked_from"] == done.id
    db.close()


def test_export_is_recorded_as_an_operation(tmp_path: Path, archive: Path) -> None:
    db = open_database(tmp_path / "source")
    rows = db.conn.execute("SELECT o.action, o.status, s.outputs FROM operations o JOIN "
                           "operation_steps s ON s.op_id = o.id WHERE o.action = 'export'"
                           ).fetchall()
    db.close()
    assert len(rows) == 1 and rows[0][1] == "Succeeded"
    assert json.loads(rows[0][2])["file"] == str(archive)


def test_import_into_the_same_state_directory_needs_a_new_name(tmp_path: Path,
                                                               archive: Path) -> None:
    source = tmp_path / "source"
    with pytest.raises(Conflict, match="already exists"), archive.open("rb") as stream:
        transfer.import_(source, stream)
    with archive.open("rb") as stream:
        done = transfer.import_(source, stream, name="copy")
    db = open_database(source)
    assert objects.require(db.conn, "Snapshot", "copy").id == done.id
    db.close()


def test_an_imported_snapshot_exports_again_and_deletes(tmp_path: Path, archive: Path) -> None:
    target = tmp_path / "target"
    with archive.open("rb") as stream:
        transfer.import_(target, stream)
    again = io.BytesIO()
    transfer.export(target, "before", again)
    with tarfile.open(fileobj=io.BytesIO(again.getvalue())) as tar:
        header = json.loads(tar.extractfile(fmt.HEADER).read())  # type: ignore[union-attr]
    assert header["lineage"]["cell"] == "api" and header["lineage"]["cellId"]
    report = apply_api.delete(target, kind="Snapshot", name="before")
    assert report.ok, report
    assert _world(target)["fake.checkpoints"] == []


def _damaged(data: bytes, how: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        trailer = tar.getmember(fmt.TRAILER)
    if how == "truncated":
        return data[:trailer.offset]
    if how == "wrong checksum":
        out = bytearray(data)
        at = trailer.offset_data + data[trailer.offset_data:].index(b'"sha256": "') + 11
        out[at] = ord("0") if out[at] != ord("0") else ord("1")
        return bytes(out)
    header = data.index(b'"name": "before"')  # a byte of the header's metadata
    return data[:header] + b'"name": "bexore"' + data[header + 16:]


@pytest.mark.parametrize("how", ["truncated", "wrong checksum", "altered header"])
def test_a_damaged_archive_is_refused_and_changes_nothing(tmp_path: Path, archive: Path,
                                                          how: str) -> None:
    target = tmp_path / "target"
    open_database(target).close()
    with archive.open("rb") as stream:
        transfer.import_(target, stream, name="unrelated")  # the world has something in it
    before = _world(target)
    damaged = _damaged(archive.read_bytes(), how)
    with pytest.raises(ArchiveRefused, match="nothing imported"):
        transfer.import_(target, io.BytesIO(damaged))
    assert _world(target) == before


def test_an_unknown_format_version_is_refused(tmp_path: Path, archive: Path) -> None:
    data = archive.read_bytes().replace(b'"formatVersion": 1', b'"formatVersion": 9')
    with pytest.raises(ArchiveRefused, match="format version 9"):
        transfer.import_(tmp_path / "target", io.BytesIO(data))


def test_an_archive_for_another_backend_kind_is_refused(tmp_path: Path, archive: Path) -> None:
    # a fake (metadata) archive that claims a tree: the fake cannot take it
    data = archive.read_bytes().replace(b'"tree": false', b'"tree": true ')
    with pytest.raises(ArchiveRefused, match="does not take"):
        transfer.import_(tmp_path / "target", io.BytesIO(data))


def test_an_invalid_name_is_refused(tmp_path: Path, archive: Path) -> None:
    from devcell.errors import ManifestError

    with pytest.raises(ManifestError), archive.open("rb") as stream:
        transfer.import_(tmp_path / "target", stream, name="Not_A_Name")


def test_export_of_a_snapshot_not_taken_yet_is_refused(tmp_path: Path, write: Any) -> None:
    source = tmp_path / "source"
    stopped = dict(CELL, spec=dict(CELL["spec"], state="Stopped"))
    apply_api.apply(source, [write("cell.yaml", stopped)])
    cells.snapshot(source, "api", name="waiting", options=cells.DEFAULTS)
    with pytest.raises(transfer.NotReady, match="not Ready"):
        transfer.export(source, "waiting", tmp_path / "out.tar")
    assert not (tmp_path / "out.tar").exists()
    assert not list(tmp_path.glob(".out.tar*"))


def test_applying_the_imported_snapshots_manifest_keeps_it(tmp_path: Path, archive: Path,
                                                          write: Any) -> None:
    target = tmp_path / "target"
    with archive.open("rb") as stream:
        done = transfer.import_(target, stream)
    manifest = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot",
                "metadata": {"name": "before"}, "spec": {"cell": "api"}}
    report = apply_api.apply(target, [write("snap.yaml", manifest)])
    assert report.ok, report
    db = open_database(target)
    snap = objects.require(db.conn, "Snapshot", "before")
    assert (snap.id, snap.phase, snap.extra["checkpoint_ref"]) == (
        done.id, "Ready", f"fake://{done.id}")
    db.close()


def test_the_lineage_tree_shows_an_imported_snapshot_and_its_forks(
        tmp_path: Path, archive: Path, write: Any) -> None:
    from devcell.cli import lineage
    from devcell.store import views

    target = tmp_path / "target"
    with archive.open("rb") as stream:
        transfer.import_(target, stream)
    assert apply_api.apply(target, [write("fork.yaml", fork_of("before"))]).ok
    db = open_database(target)
    text = lineage.render(*views.lineage(db.conn))
    db.close()
    assert text.splitlines() == [
        "snapshot/before (metadata) imported, of cell api elsewhere  Ready",
        "└── cell/moved  Running"], text


def test_a_fork_on_another_backend_than_the_imported_snapshots_is_refused(
        tmp_path: Path, archive: Path, write: Any) -> None:
    from devcell.errors import ManifestError

    target = tmp_path / "target"
    with archive.open("rb") as stream:
        transfer.import_(target, stream)  # a fake (metadata) snapshot
    container_fork = fork_of("before")
    container_fork["spec"]["backend"] = "container"
    with pytest.raises(ManifestError, match="taken by the fake backend"):
        apply_api.apply(target, [write("fork.yaml", container_fork)])


def test_export_to_a_fifo_or_device_writes_to_it_and_never_replaces_it(
        tmp_path: Path, write: Any) -> None:
    """`-o /dev/null` or `-o /dev/stdout` (as root) must not rename a regular file over the
    machine's device: a path that names a FIFO or a device is written to, as tar -f does."""
    import os
    import stat
    import threading

    source = tmp_path / "source"
    apply_api.apply(source, [write("cell.yaml", CELL)])
    cells.snapshot(source, "api", name="before")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as pipe:
            got.append(pipe.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        done = transfer.export(source, "before", fifo)
    finally:
        if not got and reader.is_alive() and stat.S_ISFIFO(os.lstat(fifo).st_mode):
            with open(fifo, "wb"):  # let the reader go if the export never opened it
                pass
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    with tarfile.open(fileobj=io.BytesIO(got[0])) as tar:
        assert fmt.TRAILER in tar.getnames()
    assert len(done.sha256) == 64
    assert not list(tmp_path.glob(".*.partial"))


def test_an_invalid_name_in_the_archive_is_blamed_on_the_archive_and_names_the_fix(
        tmp_path: Path, write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 10: without --name, the name comes from the archive's header; a bad one
    is the archive's, and --name is the way round it (it was blamed on a --name never given)."""
    from devcell.errors import ManifestError

    source = tmp_path / "source"
    apply_api.apply(source, [write("cell.yaml", CELL)])
    cells.snapshot(source, "api", name="before")
    header_bytes = fmt.header_bytes
    monkeypatch.setattr(fmt, "header_bytes",
                        lambda **kw: header_bytes(**{**kw, "name": "Bad_Name"}))
    transfer.export(source, "before", tmp_path / "bad.tar")
    with pytest.raises(ManifestError) as refused, (tmp_path / "bad.tar").open("rb") as stream:
        transfer.import_(tmp_path / "target", stream)
    said = str(refused.value.problems[0])
    assert "<command line>" not in said and "the archive's snapshot name 'Bad_Name'" in said, said
    assert "import it under another name with --name NAME" in said, said
    with (tmp_path / "bad.tar").open("rb") as stream:
        assert transfer.import_(tmp_path / "target", stream, name="good").name == "good"
