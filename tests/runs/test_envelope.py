"""A save refuses, before touching the disk, any snapshot a load would reject."""

from __future__ import annotations

import math
from typing import Any

import pytest

from devcell.runs import CompletedStep, SnapshotStore, StorageError, envelope
from tests.runs.helpers import location, make_snapshot

RUN_ID = "op_0001"

REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "plan not JSON": ({"plan": [{1, 2}]}, "not representable as JSON"),
    "NaN output": ({"completed_steps": (CompletedStep(step_id="a", outputs={"x": math.nan}),)},
                   "not representable as JSON"),
    "non-scalar output": ({"completed_steps": (
        CompletedStep(step_id="a", outputs={"x": [1]}),  # type: ignore[dict-item]
    )}, "completedSteps[0].outputs.x"),
    "plan a string": ({"plan": "quiesce"}, "snapshot.plan"),
    "empty plan id": ({"plan_id": ""}, "snapshot.planId"),
    "step completed twice": ({"completed_steps": (CompletedStep(step_id="a", outputs={}),) * 2},
                             "records step 'a' twice"),
    "resume schema not a schema": ({"resume_schema": {"type": "nonsense"}},
                                   "resumeSchema is not a valid JSON Schema"),
    "wrong status": ({"status": "running"}, "status is 'running'"),
    "lone surrogate": ({"plan_id": "plan_\ud800"}, "not representable as JSON"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_save_refuses_what_a_load_would_reject(persistent_store: SnapshotStore, case: str
                                               ) -> None:
    changes, expected = REFUSED[case]
    persistent_store.save(make_snapshot(RUN_ID))
    with pytest.raises(StorageError) as info:
        persistent_store.save(make_snapshot(RUN_ID, **changes))
    assert info.value.code == StorageError.INVALID_SNAPSHOT
    assert info.value.path == location(persistent_store, RUN_ID)
    assert expected in info.value.reason
    assert persistent_store.load(RUN_ID) == make_snapshot(RUN_ID)  # untouched


def test_save_refuses_something_that_is_not_a_snapshot(persistent_store: SnapshotStore) -> None:
    with pytest.raises(StorageError) as info:
        persistent_store.save(make_snapshot(RUN_ID).to_dict())  # type: ignore[arg-type]
    assert info.value.code == StorageError.INVALID_SNAPSHOT
    assert "expected a RunSnapshot, got dict" in info.value.reason


def test_save_refuses_an_oversized_snapshot(persistent_store: SnapshotStore) -> None:
    with pytest.raises(StorageError) as info:
        persistent_store.save(make_snapshot(RUN_ID, plan=["x" * 1024] * (16 * 1024)))
    assert info.value.code == StorageError.INVALID_SNAPSHOT
    assert "byte limit" in info.value.reason
    assert persistent_store.load(RUN_ID) is None


def test_another_version_is_named_as_such_not_as_a_checksum_mismatch() -> None:
    data = envelope.encode(make_snapshot(RUN_ID), where="<t>")
    tampered = data.replace(b'"version":1', b'"version":2')
    with pytest.raises(StorageError, match="unsupported format version 2"):
        envelope.decode(tampered, run_id=RUN_ID, where="<t>")
