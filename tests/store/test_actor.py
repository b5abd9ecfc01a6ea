"""Who makes each change: the actor of events and operations, and a new cell's owner.

The direct CLI (and any caller that says nobody) acts as the state directory's owner; a
server names its request's principal with `actor.acting_as`. A cell's owner is recorded at
create (metadata.owner, else the actor), kept by a later apply that names none, changed by
one that names another; `get -o yaml`, `-o wide` and `describe` show it, and get's output
re-applies unchanged. A snapshot's owner is its cell's as it is taken, an import's its
importer's."""

from __future__ import annotations

import json
import os
import pwd
import sqlite3
import threading
from pathlib import Path

import pytest

from devcell.api import apply as api
from devcell.cli.main import main
from devcell.store import actor, migrations
from devcell.store.db import open_database

ME = pwd.getpwuid(os.geteuid()).pw_name
CELL = """apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {{name: {name}{owner}}}
spec: {{backend: fake{shared}}}
"""


def manifest(tmp_path: Path, name: str = "api", owner: str | None = None,
             shared: list[str] | None = None) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(CELL.format(name=name, owner=f", owner: {owner}" if owner else "",
                                shared=f", sharedWith: {json.dumps(shared)}" if shared else ""))
    return path


def run(state: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["--state-dir", str(state), *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def rows(state: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(state / "state.db")
    try:
        return [tuple(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def test_the_direct_cli_acts_as_the_state_directorys_owner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    run(state, capsys, "apply", "-f", str(manifest(tmp_path, shared=["ana"])))
    doc = json.loads(run(state, capsys, "get", "cell", "api", "-o", "json"))
    assert doc["metadata"]["owner"] == ME and doc["spec"]["sharedWith"] == ["ana"]
    header, line = run(state, capsys, "get", "cells", "-o", "wide").splitlines()
    # OWNER, then NODE (<none> on a single host): found by header, as other columns may follow
    assert header.split()[-2:] == ["OWNER", "NODE"] and line.split()[-2:] == [ME, "<none>"]
    shown = run(state, capsys, "describe", "cell", "api")
    assert f"Owner:              {ME}\n" in shown and "Shared with:        ana\n" in shown
    assert f"by={ME}" in shown
    assert {a for (a,) in rows(state, "SELECT actor FROM events")} == {ME}
    assert {a for (a,) in rows(state, "SELECT actor FROM operations")} == {ME}
    # get's output, which names the owner, re-applies unchanged
    got = run(state, capsys, "get", "cell", "api", "-o", "json")
    (tmp_path / "api.yaml").write_text(got)  # the same file: its source is unchanged
    assert run(state, capsys, "apply", "-f", str(tmp_path / "api.yaml")) == "cell/api unchanged\n"


def test_an_owner_is_kept_unless_a_manifest_names_another(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "state"
    run(state, capsys, "apply", "-f", str(manifest(tmp_path, owner="bob")))
    owner = "SELECT owner FROM cells WHERE deleted_at IS NULL"
    assert rows(state, owner) == [("bob",)]
    run(state, capsys, "apply", "-f", str(manifest(tmp_path, shared=["carol"])))
    assert rows(state, owner) == [("bob",)]
    assert run(state, capsys, "apply", "-f", str(manifest(tmp_path, owner="carol",
                                                          shared=["carol"]))) \
        == "cell/api configured\n"
    assert rows(state, owner) == [("carol",)]
    assert rows(state, "SELECT message FROM events WHERE reason = 'OwnerChanged'") == [
        (f"owner is now carol (was bob) from {tmp_path / 'api.yaml'}",)]


def test_a_request_acts_as_its_principal(tmp_path: Path) -> None:
    state = tmp_path / "state"
    seen: dict[str, str] = {}

    def request(user: str, name: str) -> None:
        with actor.acting_as(user):
            report = api.apply(state, [str(manifest(tmp_path, name))])
            assert report.ok, report
            seen[name] = actor.current()

    threads = [threading.Thread(target=request, args=(u, n))
               for u, n in (("ana", "a1"), ("bob", "b1"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a1": "ana", "b1": "bob"}
    assert actor.current() == ME  # nothing leaked into this thread
    assert sorted(rows(state, "SELECT name, owner FROM cells")) == [("a1", "ana"), ("b1", "bob")]
    assert sorted(set(rows(state, "SELECT object_name, actor FROM events"))) == [
        ("a1", "ana"), ("b1", "bob")]
    assert sorted(set(rows(state, "SELECT object_name, actor FROM operations"))) == [
        ("a1", "ana"), ("b1", "bob")]


def test_the_cells_recorded_before_owners_belong_to_the_state_directorys_owner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    before = [m for m in migrations.MIGRATIONS if m[0] < 10]
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", before)
        m.setattr(migrations, "LATEST", before[-1][0])
        m.setattr("devcell.store.cell_glance.SCHEMA_VERSION", before[-1][0])
        db = open_database(state)
        assert db.conn.execute("PRAGMA user_version").fetchone()[0] == 9
        db.close()
    conn = sqlite3.connect(state / "state.db")
    conn.execute("INSERT INTO cells (id, name, spec, spec_hash, manifest_hash, generation, "
                 "resource_version, phase, created_at, updated_at, backend) VALUES "
                 "('cell_old', 'old', '{}', 'h', 'h', 1, 1, 'Pending', 'now', 'now', 'fake')")
    conn.commit()
    conn.close()
    open_database(state).close()
    assert rows(state, "SELECT name, owner FROM cells") == [("old", ME)]


def test_a_snapshot_is_its_cells_owners_and_an_import_its_importers(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A snapshot records its cell's owner as it is taken, not who takes it (an admin
    snapshotting ana's cell makes ana's snapshot); an imported one is its importer's: the
    request's user, the state directory's owner directly."""
    from devcell.api import cells, transfer

    state = tmp_path / "state"
    run(state, capsys, "apply", "-f", str(manifest(tmp_path, owner="ana")))
    with actor.acting_as("root-admin"):
        cells.snapshot(state, "api", name="s1")
    archive = tmp_path / "s1.tar"
    transfer.export(state, "s1", archive)
    with actor.acting_as("dev"), archive.open("rb") as source:
        transfer.import_(state, source, name="s1-dev")
    with archive.open("rb") as source:
        transfer.import_(state, source, name="s1-me")
    assert sorted(rows(state, "SELECT name, owner FROM snapshots")) == [
        ("s1", "ana"), ("s1-dev", "dev"), ("s1-me", ME)]
    assert rows(state, "SELECT actor FROM events WHERE reason = 'Imported' "
                       "ORDER BY id") == [("dev",), (ME,)]


def test_the_snapshots_recorded_before_owners_get_their_cells_owner(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upgraded from schema 11: a snapshot of a recorded cell (live or deleted) is that
    cell's owner's, one without a cell here the state directory's owner's."""
    state = tmp_path / "state"
    before = [m for m in migrations.MIGRATIONS if m[0] < 12]
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", before)
        m.setattr(migrations, "LATEST", before[-1][0])
        m.setattr("devcell.store.cell_glance.SCHEMA_VERSION", before[-1][0])
        open_database(state).close()
    conn = sqlite3.connect(state / "state.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 11
    for cell_id, name, owner, deleted in (("cell_a", "a", "ana", None),
                                          ("cell_b", "b", "bob", "then")):
        conn.execute("INSERT INTO cells (id, name, spec, spec_hash, manifest_hash, generation, "
                     "resource_version, phase, created_at, updated_at, backend, owner, "
                     "deleted_at) VALUES (?, ?, '{}', 'h', 'h', 1, 1, 'Ready', 'now', 'now', "
                     "'fake', ?, ?)", (cell_id, name, owner, deleted))
    for snap_id, name, cell_id in (("snap_a", "sa", "cell_a"), ("snap_b", "sb", "cell_b"),
                                   ("snap_i", "si", None)):
        conn.execute("INSERT INTO snapshots (id, name, spec, spec_hash, manifest_hash, "
                     "generation, resource_version, phase, created_at, updated_at, cell_id) "
                     "VALUES (?, ?, '{}', 'h', 'h', 1, 1, 'Ready', 'now', 'now', ?)",
                     (snap_id, name, cell_id))
    conn.commit()
    conn.close()
    open_database(state).close()
    assert rows(state, "SELECT name, owner FROM snapshots ORDER BY name") == [
        ("sa", "ana"), ("sb", "bob"), ("si", ME)]
    assert rows(state, "SELECT version, name FROM migrations WHERE version = 12") == [
        (12, "snapshot owner")]
