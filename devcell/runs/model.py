"""The run snapshot: what a suspended operation needs to continue, and nothing more.

A value, not a record: frozen dataclasses with `to_dict()` / `from_dict()` in the camelCase
shape that the persistent stores write (docs/runs.md). The nested `plan`, `outputs` and
`resumeSchema` are plain JSON values; treat them as read-only once a snapshot is built.
`from_dict()` trusts its input's shape: the persistent stores validate before calling it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeAlias

FORMAT_VERSION = 1
"""The shape written by `to_dict()`; a store refuses to load any other version."""

Scalar: TypeAlias = str | int | float | bool | None
JSONDocument: TypeAlias = list[Any] | dict[str, Any]


class RunStatus(StrEnum):
    SUSPENDED = "suspended"


def utc_timestamp(moment: datetime | None = None) -> str:
    """ISO 8601 in UTC with milliseconds and a `Z` (`2025-01-31T12:00:00.000Z`): sorts as text."""
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True, kw_only=True)
class CompletedStep:
    """A step that finished before the run was suspended, with the scalar outputs it recorded."""

    step_id: str
    outputs: Mapping[str, Scalar]

    def to_dict(self) -> dict[str, Any]:
        return {"stepId": self.step_id, "outputs": dict(self.outputs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompletedStep:
        return cls(step_id=data["stepId"], outputs=dict(data["outputs"]))


@dataclass(frozen=True, kw_only=True)
class RunSnapshot:
    """A run stopped cleanly at a step boundary: resuming skips `completed_steps` and reuses
    their outputs, then starts at `suspended_step_id`. `resume_schema`, when set, is the JSON
    Schema the resume input must satisfy (an approval gate)."""

    run_id: str
    plan_id: str
    plan: JSONDocument
    completed_steps: tuple[CompletedStep, ...]
    suspended_step_id: str
    resume_schema: dict[str, Any] | None = None
    suspended_at: str
    status: RunStatus = RunStatus.SUSPENDED

    def completed_outputs(self, step_id: str) -> Mapping[str, Scalar] | None:
        """The recorded outputs of a completed step, or None if that step has not completed."""
        for step in self.completed_steps:
            if step.step_id == step_id:
                return step.outputs
        return None

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (camelCase keys, with the format version). Nested values are shared,
        not copied."""
        return {
            "version": FORMAT_VERSION,
            "runId": self.run_id,
            "planId": self.plan_id,
            "plan": self.plan,
            "completedSteps": [step.to_dict() for step in self.completed_steps],
            "suspendedStepId": self.suspended_step_id,
            "resumeSchema": self.resume_schema,
            "suspendedAt": self.suspended_at,
            "status": str(self.status),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSnapshot:
        """Build from `to_dict()`'s shape; ValueError for another format version or status."""
        version = data.get("version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            raise ValueError(f"unsupported RunSnapshot format version {version!r} "
                             f"(expected {FORMAT_VERSION})")
        return cls(
            run_id=data["runId"],
            plan_id=data["planId"],
            plan=data["plan"],
            completed_steps=tuple(CompletedStep.from_dict(s) for s in data["completedSteps"]),
            suspended_step_id=data["suspendedStepId"],
            resume_schema=data.get("resumeSchema"),
            suspended_at=data["suspendedAt"],
            status=RunStatus(data["status"]),
        )
