"""Desired objects: generation vs resourceVersion, optimistic concurrency, live-name uniqueness."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devcell import admission
from devcell.errors import Conflict, ManifestError, NotFound
from devcell.manifests.model import Manifest
from devcell.store import desired, objects
from devcell.store.db import Database, open_database
from tests.controllers.support import cell_doc, parse, snapshot_doc

KEY = b"k" * 32


def cell_manifest(name: str = "api", *, image: str = "busybox",
                  labels: dict[str, str] | None = None) -> Manifest:
    return parse(cell_doc(name, image=image, labels=labels))[0]


def insert_cell(db: Database, name: str = "api") -> str:
    m = cell_manifest(name)
    with db.write() as conn:
        return objects.insert(conn, kind="Cell", name=m.name, spec=m.spec, labels=m.labels,
                              annotations=m.annotations, spec_hash=m.spec_hash(KEY),
                              manifest_hash=m.manifest_hash(KEY), source=m.source,
                              extra={"backend": "fake"})


def update(db: Database, record: objects.ObjectRecord, m: Manifest) -> None:
    with db.write() as conn:
        objects.update_desired(conn, record, spec=m.spec, labels=m.labels,
                               annotations=m.annotations, spec_hash=m.spec_hash(KEY),
                               manifest_hash=m.manifest_hash(KEY), source=m.source)


def get(db: Database, ref: str = "api", kind: str = "Cell") -> objects.ObjectRecord:
    return objects.require(db.conn, kind, ref)


# -- generation and resourceVersion ----------------------------------------------------------


def test_new_object_starts_at_generation_1_resource_version_1(db: Database) -> None:
    object_id = insert_cell(db)
    cell = get(db)
    assert cell.id == object_id and object_id.startswith("cell_")
    assert (cell.generation, cell.resource_version, cell.observed_generation) == (1, 1, 0)
    assert cell.phase == "Pending" and cell.status == {}
    assert get(db, object_id).name == "api"  # by id as well as by name


def test_labels_only_change_bumps_resource_version_not_generation(db: Database) -> None:
    admission.apply_objects(db, [cell_manifest(labels={"team": "core"})])
    before = get(db)
    result = admission.apply_objects(db, [cell_manifest(labels={"team": "platform"})])
    after = get(db)
    assert [c.outcome for c in result.changes] == ["configured"]
    assert after.generation == before.generation == 1
    assert after.resource_version == before.resource_version + 1
    assert after.spec_hash == before.spec_hash
    assert after.manifest_hash != before.manifest_hash
    assert after.labels == {"team": "platform"}


def test_spec_change_bumps_both(db: Database) -> None:
    admission.apply_objects(db, [cell_manifest(image="one")])
    admission.apply_objects(db, [cell_manifest(image="two")])
    cell = get(db)
    assert (cell.generation, cell.resource_version) == (2, 2)
    assert cell.spec["image"] == "two"


def test_unchanged_apply_writes_nothing(db: Database) -> None:
    admission.apply_objects(db, [cell_manifest()])
    result = admission.apply_objects(db, [cell_manifest()])
    assert [c.outcome for c in result.changes] == ["unchanged"]
    assert (get(db).generation, get(db).resource_version) == (1, 1)


def test_status_write_bumps_resource_version_only_when_something_changed(db: Database) -> None:
    insert_cell(db)
    cell = get(db)
    with db.write() as conn:
        assert objects.write_status(conn, cell, phase="Running", status={"a": 1},
                                    observed_generation=1)
    assert cell.resource_version == 2  # the caller's copy follows the write
    stored = get(db)
    assert (stored.phase, stored.status, stored.observed_generation) == ("Running", {"a": 1}, 1)
    assert (stored.generation, stored.resource_version) == (1, 2)
    with db.write() as conn:
        assert not objects.write_status(conn, stored, phase="Running", status={"a": 1},
                                        observed_generation=1)
    assert get(db).resource_version == 2


@settings(max_examples=25, deadline=None)
@given(edits=st.lists(st.tuples(st.sampled_from(["one", "two", "three"]),
                                st.sampled_from([None, "a", "b"])), max_size=8))
def test_generation_counts_spec_changes_and_version_counts_writes(
        edits: list[tuple[str, str | None]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "state")
        try:
            admission.apply_objects(db, [cell_manifest(image="one")])
            spec_changes = writes = 0
            current: tuple[str, str | None] = ("one", None)
            for image, label in edits:
                if (image, label) != current:
                    writes += 1
                    spec_changes += image != current[0]
                labels = {"l": label} if label else None
                admission.apply_objects(db, [cell_manifest(image=image, labels=labels)])
                current = (image, label)
            cell = get(db)
            assert cell.generation == 1 + spec_changes
            assert cell.resource_version == 1 + writes
        finally:
            db.close()


# -- optimistic concurrency ------------------------------------------------------------------


def test_stale_resource_version_is_a_conflict(db: Database) -> None:
    insert_cell(db)
    stale = get(db)
    fresh = get(db)
    update(db, fresh, cell_manifest(image="two"))
    with pytest.raises(Conflict, match="resourceVersion 1 is stale"):
        update(db, stale, cell_manifest(image="three"))
    assert get(db).spec["image"] == "two"  # the stale write did not land
    with pytest.raises(Conflict):
        with db.write() as conn:
            objects.write_status(conn, stale, phase="Failed", status={},
                                 observed_generation=0)
    with pytest.raises(Conflict):
        with db.write() as conn:
            objects.request_delete(conn, stale)
    cell = get(db)
    assert (cell.phase, cell.deleting, cell.resource_version) == ("Pending", False, 2)


def test_delete_request_twice_with_the_same_copy_is_a_conflict(db: Database) -> None:
    insert_cell(db)
    cell = get(db)
    with db.write() as conn:
        objects.request_delete(conn, cell)
    with pytest.raises(Conflict):
        with db.write() as conn:
            objects.request_delete(conn, cell)


# -- names -----------------------------------------------------------------------------------


def test_live_names_are_unique(db: Database) -> None:
    insert_cell(db)
    with pytest.raises(Conflict, match='cell "api" already exists'):
        insert_cell(db)
    assert db.execute("SELECT count(*) FROM cells").fetchone()[0] == 1


def test_a_reference_of_bytes_that_are_not_utf8_names_nothing(db: Database) -> None:
    """`devcell exec $'b\\xff' -- true`: the argument's undecodable byte (a lone surrogate)
    cannot be sent to SQLite; not found, not a traceback."""
    insert_cell(db)
    assert objects.get(db.conn, "Cell", "b\udcffx") is None
    with pytest.raises(NotFound, match="not found"):
        objects.require(db.conn, "Cell", "b\udcffx")


def test_same_name_in_different_kinds_is_fine(db: Database) -> None:
    admission.apply_objects(db, parse(cell_doc("api"), snapshot_doc("api", "api")))
    assert get(db, "api", "Cell").id != get(db, "api", "Snapshot").id


def test_name_of_a_deleted_object_can_be_reused(db: Database) -> None:
    old_id = insert_cell(db)
    old = get(db)
    with db.write() as conn:
        objects.request_delete(conn, old)
    # deletion requested is not deletion done: the name is still taken
    with pytest.raises(Conflict):
        insert_cell(db)
    with db.write() as conn:
        objects.mark_deleted(conn, get(db))
    with pytest.raises(NotFound):
        get(db)
    new_id = insert_cell(db)
    assert new_id != old_id
    assert get(db).id == new_id
    gone = objects.get(db.conn, "Cell", old_id, include_deleted=True)
    assert gone is not None and gone.deleted_at is not None and gone.phase == "Deleted"
    assert objects.get(db.conn, "Cell", old_id) is None  # not live
    assert db.execute("SELECT count(*) FROM cells WHERE name = 'api'").fetchone()[0] == 2


def test_apply_of_an_object_being_deleted_is_refused(db: Database) -> None:
    admission.apply_objects(db, [cell_manifest()])
    desired.delete(db, "Cell", "api")
    with pytest.raises(ManifestError, match="is being deleted"):
        admission.apply_objects(db, [cell_manifest(image="two")])


def test_immutable_fields_are_refused(db: Database) -> None:
    admission.apply_objects(db, parse(cell_doc("api"), cell_doc("other"),
                                    snapshot_doc("snap", "api")))
    backend_change: dict[str, Any] = cell_doc("api")
    backend_change["spec"].update(backend="vm", image="debian:12")
    with pytest.raises(ManifestError, match="immutable"):
        admission.apply_objects(db, parse(backend_change))
    with pytest.raises(ManifestError, match="immutable"):
        admission.apply_objects(db, parse(snapshot_doc("snap", "other")))
    with pytest.raises(ManifestError, match="fork source is immutable"):
        admission.apply_objects(db, parse(cell_doc("api", fork_of="snap")))
    assert get(db).spec["backend"] == "fake" and get(db).generation == 1


def test_a_reference_not_found_is_said_escaped(db: Database) -> None:
    """The CLI keeps an error's newlines: `exec $'x\\nerror: ...'` printed a forged line of
    its own (found by attack41)."""
    from devcell.store import objects

    with pytest.raises(NotFound) as caught:
        objects.require(db.conn, "Cell", "x\nerror: forged\x1b[2J")
    assert str(caught.value) == 'cell "x\\nerror: forged\\x1b[2J" not found'
