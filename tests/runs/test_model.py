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


# -- what a library caller naturally passes (issue 10, item 16) ----------------------------

def test_completed_steps_given_as_mappings_become_completed_steps() -> None:
    snapshot = make_snapshot(completed_steps=[  # type: ignore[arg-type]
        {"stepId": "quiesce", "outputs": {"frozen": True}}, {"step_id": "copy"}])
    assert snapshot.completed_steps == (CompletedStep(step_id="quiesce", outputs={"frozen": True}),
                                        CompletedStep(step_id="copy", outputs={}))
    assert RunSnapshot.from_dict(snapshot.to_dict()) == snapshot


@pytest.mark.parametrize(("steps", "field"), [
    ([{"outputs": {}}], r"completed_steps\[0\]\.stepId"),
    ([CompletedStep(step_id="a", outputs={}), {"stepId": "b", "outputs": {"x": [1]}}],
     r"completed_steps\[1\]\.outputs\.x"),
    ([{"stepId": "a", "outputs": "x"}], r"completed_steps\[0\]\.outputs"),
    ([{"stepId": "a", "output": {}}], r"completed_steps\[0\]: unknown key 'output'"),
    (["quiesce"], r"completed_steps\[0\]: expected a CompletedStep"),
    ({"stepId": "a"}, r"completed_steps: expected a sequence"),
])
def test_a_wrong_completed_step_is_refused_at_construction_naming_the_field(
        steps: object, field: str) -> None:
    with pytest.raises(TypeError, match=field):
        make_snapshot(completed_steps=steps)  # type: ignore[arg-type]


def test_suspended_at_as_epoch_milliseconds_is_kept_as_iso_text() -> None:
    moment = datetime(2025, 1, 31, 12, 0, 0, 250000, tzinfo=UTC)
    ms = int(moment.timestamp() * 1000)
    snapshot = make_snapshot(suspended_at=ms)  # type: ignore[arg-type]
    assert snapshot.suspended_at == "2025-01-31T12:00:00.250Z"
    document = snapshot.to_dict()
    document["suspendedAt"] = ms
    assert RunSnapshot.from_dict(document) == snapshot


@pytest.mark.parametrize("when", [10**20, True, None, b"2025", "yesterday", "2025-01-31T12:00:00.000Z\n",
                                  "2025-13-01T00:00:00Z", "2025-01-31T12:00:00+02:00"])
# A timestamp that is not UTC used to pass construction and fail only at save: refused here.
def test_a_suspended_at_that_is_no_moment_is_refused(when: object) -> None:
    with pytest.raises((TypeError, ValueError), match="suspended_at"):
        make_snapshot(suspended_at=when)  # type: ignore[arg-type]


def test_resume_schema_may_be_absent_from_a_document() -> None:
    document = make_snapshot(resume_schema=None).to_dict()
    del document["resumeSchema"]
    assert RunSnapshot.from_dict(document).resume_schema is None


def test_an_empty_step_id_in_a_mapping_is_refused() -> None:
    with pytest.raises(TypeError, match=r"completed_steps\[0\]\.stepId"):
        make_snapshot(completed_steps=[{"stepId": "", "outputs": {}}])  # type: ignore[arg-type]
