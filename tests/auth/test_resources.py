"""Resources from what the store recorded: a cell's owner and sharers, a snapshot's its
cell's (its own recorded owner's once the cell is gone), anything else ownerless."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.auth import resources
from devcell.auth.policy import ResourceRef, Verb, authorize
from devcell.auth.principals import Principal, Role
from devcell.cli.main import main
from devcell.store.db import open_database
from tests.controllers.support import cell_doc, parse

CELL = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: web, owner: bob}\n"
        "spec: {backend: fake, sharedWith: [ana]}\n---\n"
        "apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: s1}\n"
        "spec: {cell: web}\n")


def test_recorded_resources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state, path = tmp_path / "state", tmp_path / "web.yaml"
    path.write_text(CELL)
    assert main(["--state-dir", str(state), "apply", "-f", str(path)]) == 0, \
        capsys.readouterr().err
    db = open_database(state)
    try:
        cell = resources.recorded(db.conn, "Cell", "web")
        assert cell == ResourceRef("Cell", "web", "bob", ("ana",))
        snap = resources.recorded(db.conn, "Snapshot", "s1")
        assert snap == ResourceRef("Snapshot", "s1", "bob", ("ana",))
        assert resources.recorded(db.conn, "Cell", "nope") == ResourceRef("Cell", "nope")
        assert resources.recorded(db.conn, "Operation", "op_1") == ResourceRef("Operation", "op_1")
    finally:
        db.close()
    assert authorize(Principal("ana", Role.developer), Verb.fork, snap).rule == "developer-shared"
    assert authorize(Principal("eve", Role.developer), Verb.delete, snap).rule \
        == "developer-not-own"


def test_to_create() -> None:
    m = parse(cell_doc("web"))[0]
    assert resources.to_create("ana", m) == ResourceRef("Cell", "web", "ana", ())
    doc = cell_doc("web", sharedWith=["carol"])
    doc["metadata"]["owner"] = "bob"
    ref = resources.to_create("ana", parse(doc)[0])
    assert ref == ResourceRef("Cell", "web", "bob", ("carol",))
    assert not authorize(Principal("ana", Role.developer), Verb.create, ref).allowed


def test_a_snapshot_whose_cell_was_deleted_is_its_own_owners(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Sharing follows the cell while it lives; once it is deleted the snapshot is its
    recorded owner's (the cell's last owner: a cell given away takes its snapshots along),
    shared with nobody."""
    state, path = tmp_path / "state", tmp_path / "web.yaml"
    path.write_text(CELL)
    cli = ["--state-dir", str(state)]
    assert main([*cli, "apply", "-f", str(path)]) == 0, capsys.readouterr().err
    path.write_text(CELL.replace("owner: bob", "owner: carol"))
    assert main([*cli, "apply", "-f", str(path)]) == 0, capsys.readouterr().err
    assert main([*cli, "delete", "cell", "web"]) == 0, capsys.readouterr().err
    db = open_database(state)
    try:
        assert resources.recorded(db.conn, "Cell", "web") == ResourceRef("Cell", "web")
        snap = resources.recorded(db.conn, "Snapshot", "s1")
    finally:
        db.close()
    assert snap == ResourceRef("Snapshot", "s1", "carol", ())
    assert authorize(Principal("carol", Role.developer), Verb.delete, snap).rule \
        == "developer-own"
    for user in ("ana", "bob"):
        assert authorize(Principal(user, Role.developer), Verb.fork, snap).rule \
            == "developer-not-own"
