"""Export, import, fork on the real engine: a cell's workspace moves to another state directory
byte for byte, a fork there sees it, and a hostile archive leaves that directory untouched."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcell import backends
from devcell.api import apply as apply_api
from devcell.api import cells, transfer
from devcell.backends.container.layout import Layout
from devcell.errors import ArchiveRefused
from devcell.store import objects, volumes
from devcell.store.db import open_database
from tests.backends.archive_support import HEADER, ROOT, craft, make_tree, member, tree_state
from tests.backends.engine import IMAGE, remove_containers
from tests.conftest import REPO


def _cell(name: str, snapshot: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"backend": "container", "image": IMAGE, "network": {"mode": "none"},
                            "services": [{"name": "idle", "command": ["sleep", "600"]}]}
    if snapshot:
        spec["workspace"] = {"from": {"snapshot": snapshot}}
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
            "spec": spec}


def _apply(state: Path, tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / f"{doc['metadata']['name']}-{state.name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    report = apply_api.apply(state, [str(path)])
    assert report.ok, report


def _workspace(state: Path, cell: str) -> Path:
    db = open_database(state)
    try:
        record = objects.require(db.conn, "Cell", cell)
        volume = volumes.for_cell(db.conn, record.id)
        assert volume is not None
        return Layout(state).workspace(volume.id)
    finally:
        db.close()


@pytest.fixture
def write_fake_cell(tmp_path: Path) -> Path:
    path = tmp_path / "fake-cell.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "other"},
        "spec": {"backend": "fake", "image": IMAGE}}))
    return path


@pytest.fixture
def states(engine: None, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    source, target = tmp_path / "source", tmp_path / "target"
    yield source, target
    for state in (source, target):
        remove_containers(state)


def test_a_cell_moves_to_another_state_directory_and_forks_there(
        states: tuple[Path, Path], tmp_path: Path) -> None:
    source, target = states
    _apply(source, tmp_path, _cell("api"))
    make_tree(_workspace(source, "api"))
    assert cells.snapshot(source, "api", name="before").ok
    db = open_database(source)
    snap_id = objects.require(db.conn, "Snapshot", "before").id
    db.close()
    expected = tree_state(Layout(source).checkpoint(snap_id) / "workspace", strip_setuid=True)
    archive = tmp_path / "before.tar"
    transfer.export(source, "before", archive)

    with archive.open("rb") as stream:
        done = transfer.import_(target, stream, origin=str(archive))
    assert done.backend == "container"
    assert tree_state(Layout(target).checkpoint(done.id) / "workspace") == expected
    _apply(target, tmp_path, _cell("moved", snapshot="before"))
    fork = _workspace(target, "moved")
    assert tree_state(fork) == {**expected, ".": tree_state(fork)["."]}  # its root is new
    assert (fork / "src" / "main.py").read_text() == "print('hello')\n"

    assert apply_api.delete(target, "Cell", "moved").ok
    assert apply_api.delete(target, "Snapshot", "before").ok
    assert not Layout(target).checkpoint(done.id).exists()


def test_a_hostile_archive_leaves_the_state_directory_untouched(
        states: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = states
    outside = tmp_path / "outside"
    outside.mkdir()
    open_database(target).close()
    backends.load("container", target).close()  # a state directory in use: its layout exists
    before = _state_files(target)
    data = craft([ROOT, member("workspace/l", tarfile.SYMTYPE, link=str(outside)),
                  member("workspace/l/escaped", data=b"x")], header=HEADER)
    with pytest.raises(ArchiveRefused, match="nothing imported"):
        transfer.import_(target, io.BytesIO(data))
    assert _state_files(target) == before and list(outside.iterdir()) == []
    db = open_database(target)
    assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0
    assert db.conn.execute("SELECT count(*) FROM operations").fetchone()[0] == 0
    db.close()


def _state_files(state: Path) -> list[str]:
    """What the state directory holds, but its database and the storage lock (a file every
    import and operation takes, state of nothing: store/storage_lock.py)."""
    return sorted(str(p) for p in state.rglob("*")
                  if not p.name.startswith("state.db") and p.name != "storage.lock")


def _kill_import(target: Path, archive: Path, point: str) -> None:
    env = dict(os.environ, DEVCELL_HOME=str(target), DEVCELL_FAILPOINT=point)
    done = subprocess.run([sys.executable, "-m", "devcell", "snapshot", "import", str(archive)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == -signal.SIGKILL, done.stderr


def _rows(target: Path) -> tuple[int, int]:
    db = open_database(target)
    try:
        return (db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0],
                db.conn.execute("SELECT count(*) FROM operations").fetchone()[0])
    finally:
        db.close()


def test_an_import_killed_mid_extraction_leaves_only_a_temporary_recovery_removes(
        states: tuple[Path, Path], tmp_path: Path, write_fake_cell: Path) -> None:
    _, target = states
    archive = tmp_path / "a.tar"
    archive.write_bytes(craft([ROOT, *(member(f"workspace/f{i}", data=b"x" * 1000)
                                       for i in range(10))]))
    open_database(target).close()
    _kill_import(target, archive, "import.file-written:3")
    assert _rows(target) == (0, 0)
    left = [p.name for p in Layout(target).checkpoints.iterdir()]
    assert len(left) == 1 and left[0].startswith(".tmp-snap_"), left
    assert apply_api.apply(target, [str(write_fake_cell)]).ok  # a converge runs recovery
    assert list(Layout(target).checkpoints.iterdir()) == []


def test_an_import_killed_before_its_record_keeps_the_files_and_can_be_redone(
        states: tuple[Path, Path], tmp_path: Path) -> None:
    _, target = states
    archive = tmp_path / "a.tar"
    archive.write_bytes(craft([ROOT, member("workspace/f", data=b"work")]))
    open_database(target).close()
    _kill_import(target, archive, "import.before-record")
    assert _rows(target) == (0, 0)
    (kept,) = Layout(target).checkpoints.iterdir()  # holds files: never removed unasked
    assert (kept / "workspace" / "f").read_bytes() == b"work"
    with archive.open("rb") as stream:
        done = transfer.import_(target, stream)
    assert done.id != kept.name and _rows(target) == (1, 1)
