"""The SnapshotStore contract, run against every adapter (file, SQLite, in-memory)."""

from __future__ import annotations

import pytest

from devcell.runs import CompletedStep, SnapshotStore, StorageError
from tests.runs.helpers import make_snapshot, write_raw


def test_missing_run_gives_none(store: SnapshotStore) -> None:
    assert store.load("op_missing") is None


def test_round_trip(store: SnapshotStore) -> None:
    snapshot = make_snapshot()
    store.save(snapshot)
    loaded = store.load(snapshot.run_id)
    assert loaded == snapshot
    assert loaded is not None and loaded.to_dict() == snapshot.to_dict()


def test_round_trip_without_resume_schema_or_completed_steps(store: SnapshotStore) -> None:
    snapshot = make_snapshot(resume_schema=None, completed_steps=(), plan={"steps": []})
    store.save(snapshot)
    assert store.load(snapshot.run_id) == snapshot


def test_overwrite_replaces(store: SnapshotStore) -> None:
    first = make_snapshot()
    second = make_snapshot(
        completed_steps=(*first.completed_steps,
                         CompletedStep(step_id="copy", outputs={"bytes": 1048576})),
        suspended_step_id="record", resume_schema=None,
    )
    store.save(first)
    store.save(second)
    assert store.load(first.run_id) == second


def test_runs_are_independent(store: SnapshotStore) -> None:
    a, b = make_snapshot("op_a"), make_snapshot("op_b", plan_id="plan_b")
    store.save(a)
    store.save(b)
    store.delete("op_a")
    assert store.load("op_a") is None
    assert store.load("op_b") == b


def test_delete(store: SnapshotStore) -> None:
    snapshot = make_snapshot()
    store.save(snapshot)
    store.delete(snapshot.run_id)
    assert store.load(snapshot.run_id) is None


def test_delete_of_a_missing_run_is_not_an_error(store: SnapshotStore) -> None:
    store.delete("op_never_saved")
    store.save(make_snapshot())
    store.delete("op_0001")
    store.delete("op_0001")
    assert store.load("op_0001") is None


def test_save_after_delete(store: SnapshotStore) -> None:
    snapshot = make_snapshot()
    store.save(snapshot)
    store.delete(snapshot.run_id)
    store.save(snapshot)
    assert store.load(snapshot.run_id) == snapshot


def test_close_then_use_again(store: SnapshotStore) -> None:
    store.save(make_snapshot())
    store.close()
    assert store.load("op_0001") == make_snapshot()


BAD_RUN_IDS = ["", "..", ".", "a/b", "../escape", "/abs", "a\x00b", "x" * 129, ".hidden",
               "a\\b", "sp ace", "new\nline", "é"]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=repr)
def test_run_ids_that_could_escape_are_refused(store: SnapshotStore, run_id: str) -> None:
    for call in (lambda: store.load(run_id), lambda: store.delete(run_id),
                 lambda: store.save(make_snapshot(run_id))):
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.code == StorageError.INVALID_RUN_ID
        assert info.value.reason and info.value.path


def test_longest_run_id_is_accepted(store: SnapshotStore) -> None:
    snapshot = make_snapshot("r" * 128)
    store.save(snapshot)
    assert store.load("r" * 128) == snapshot



def test_a_document_in_the_designs_form_loads(persistent_store: SnapshotStore) -> None:
    """suspendedAt as epoch milliseconds and no resumeSchema key (the design's form) load;
    the snapshot keeps the ISO text and None."""
    from devcell.runs import envelope

    payload = make_snapshot("op_0001", resume_schema=None).to_dict()
    del payload["resumeSchema"]
    payload["suspendedAt"] = 1738324800250
    body = envelope.canonical(payload)
    persistent_store.save(make_snapshot("op_0001"))  # the table or directory exists
    write_raw(persistent_store, "op_0001",
              b'{"checksum":"' + envelope.checksum_of(body).encode() + b'","snapshot":' + body + b"}")
    loaded = persistent_store.load("op_0001")
    assert loaded is not None
    assert (loaded.suspended_at, loaded.resume_schema) == ("2025-01-31T12:00:00.250Z", None)


def test_a_snapshot_built_from_mappings_saves_and_loads(store: SnapshotStore) -> None:
    snapshot = make_snapshot(completed_steps=[{"stepId": "quiesce", "outputs": {"n": 2}}],
                             suspended_at=1738324800250)
    store.save(snapshot)
    assert store.load(snapshot.run_id) == snapshot
