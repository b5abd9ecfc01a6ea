"""The RunSnapshot value: its camelCase document and the format version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from devcell.runs import FORMAT_VERSION, CompletedStep, RunSnapshot, RunStatus, utc_timestamp
from tests.runs.helpers import make_snapshot


def test_document_keys_are_camel_case_with_a_version() -> None:
    document = make_snapshot().to_dict()
    assert list(document) == ["version", "runId", "planId", "plan", "completedSteps",
                              "suspendedStepId", "resumeSchema", "suspendedAt", "status"]
    assert document["version"] == FORMAT_VERSION == 1
    assert document["status"] == "suspended"
    assert document["completedSteps"][0] == {
        "stepId": "quiesce", "outputs": {"frozen": True, "services": 2, "took": 0.25, "note": None}}


def test_from_dict_round_trip() -> None:
    snapshot = make_snapshot()
    again = RunSnapshot.from_dict(snapshot.to_dict())
    assert again == snapshot
    assert again.status is RunStatus.SUSPENDED
    assert isinstance(again.completed_steps, tuple)


def test_from_dict_refuses_another_version() -> None:
    document = make_snapshot().to_dict()
    document["version"] = 2
    with pytest.raises(ValueError, match="version 2"):
        RunSnapshot.from_dict(document)


def test_completed_outputs() -> None:
    snapshot = make_snapshot(completed_steps=(CompletedStep(step_id="a", outputs={"x": 1}),))
    assert snapshot.completed_outputs("a") == {"x": 1}
    assert snapshot.completed_outputs("b") is None


def test_frozen_and_keyword_only() -> None:
    snapshot = make_snapshot()
    with pytest.raises(AttributeError):
        snapshot.run_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RunSnapshot("op_1", "plan", [], (), "step", None, "2025-01-01T00:00:00Z")  # type: ignore[call-arg]


def test_utc_timestamp() -> None:
    moment = datetime(2025, 1, 31, 13, 0, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
    assert utc_timestamp(moment) == "2025-01-31T12:00:00.123Z"
    assert utc_timestamp().endswith("Z")
    assert utc_timestamp(datetime(2025, 1, 1, tzinfo=UTC)) == "2025-01-01T00:00:00.000Z"
