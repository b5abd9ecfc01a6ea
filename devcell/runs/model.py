"""The run snapshot: what a suspended operation needs to continue, and nothing more.

A value, not a record: frozen dataclasses with `to_dict()` / `from_dict()` in the camelCase
shape that the persistent stores write (docs/runs.md). The nested `plan`, `outputs` and
`resumeSchema` are plain JSON values; treat them as read-only once a snapshot is built.
`from_dict()` trusts its input's shape: the persistent stores validate before calling it.

The constructor takes what a caller of the library naturally has: completed steps as
`CompletedStep`s or as mappings (`{"stepId": ..., "outputs": {...}}`), `suspended_at` as the
ISO 8601 text or as a number of epoch milliseconds (the design's form); it keeps one form
(CompletedStep, ISO text) and says which field is wrong at construction, not deep in `save`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from numbers import Real
from typing import Any, TypeAlias

FORMAT_VERSION = 1
"""The shape written by `to_dict()`; a store refuses to load any other version."""

Scalar: TypeAlias = str | int | float | bool | None
JSONDocument: TypeAlias = list[Any] | dict[str, Any]


TIMESTAMP_PATTERN = (
    r"^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?(Z|\+00:00)(?!\n)$"
)
"""What `suspendedAt` holds as text: ISO 8601 in UTC (the run snapshot schema uses it too)."""


class RunStatus(StrEnum):
    SUSPENDED = "suspended"


def from_epoch_ms(milliseconds: float) -> str:
    """`utc_timestamp()` of a moment given in milliseconds since the epoch."""
    try:
        moment = datetime.fromtimestamp(milliseconds / 1000, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"suspended_at: {milliseconds!r} ms is not a representable moment "
                         f"({exc})") from None
    return utc_timestamp(moment)


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

    @classmethod
    def coerce(cls, value: object, *, field: str) -> CompletedStep:
        """`value` as a CompletedStep: itself, or built from a mapping with `stepId` (or
        `step_id`) and `outputs`; TypeError naming `field` for anything else."""
        if isinstance(value, CompletedStep):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"{field}: expected a CompletedStep or a mapping with stepId and "
                            f"outputs, got {type(value).__name__}")
        step_id = value.get("stepId", value.get("step_id"))
        outputs = value.get("outputs", {})
        unknown = sorted(str(k) for k in value if k not in ("stepId", "step_id", "outputs"))
        if unknown:
            raise TypeError(f"{field}: unknown key {unknown[0]!r} (expected stepId, outputs)")
        if not isinstance(step_id, str) or not step_id:
            raise TypeError(f"{field}.stepId: expected a non-empty string, got {step_id!r}")
        if not isinstance(outputs, Mapping):
            raise TypeError(f"{field}.outputs: expected a mapping of scalars, "
                            f"got {type(outputs).__name__}")
        for key, scalar in outputs.items():
            if not isinstance(key, str):
                raise TypeError(f"{field}.outputs: keys are strings, got {key!r}")
            if scalar is not None and not isinstance(scalar, str | int | float | bool):
                raise TypeError(f"{field}.outputs.{key}: expected a string, number, boolean or "
                                f"null, got {type(scalar).__name__}")
        return cls(step_id=step_id, outputs=dict(outputs))


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

    def __post_init__(self) -> None:
        steps: object = self.completed_steps
        if isinstance(steps, str | bytes | Mapping) or not hasattr(steps, "__iter__"):
            raise TypeError(f"completed_steps: expected a sequence of steps, "
                            f"got {type(steps).__name__}")
        converted = tuple(CompletedStep.coerce(step, field=f"completed_steps[{i}]")
                          for i, step in enumerate(steps))
        object.__setattr__(self, "completed_steps", converted)
        when: object = self.suspended_at
        if isinstance(when, Real) and not isinstance(when, bool):
            object.__setattr__(self, "suspended_at", from_epoch_ms(float(when)))
        elif not isinstance(when, str):
            raise TypeError(f"suspended_at: expected an ISO 8601 timestamp or epoch "
                            f"milliseconds, got {type(when).__name__}")
        elif not re.search(TIMESTAMP_PATTERN, when):
            raise ValueError(f"suspended_at: {when[:40]!r} is not an ISO 8601 timestamp in "
                             "UTC (2025-01-31T12:00:00.000Z) nor epoch milliseconds")
        if self.resume_schema is not None and not isinstance(self.resume_schema, Mapping):
            raise TypeError(f"resume_schema: expected a JSON Schema object or None, "
                            f"got {type(self.resume_schema).__name__}")

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
        """Build from `to_dict()`'s shape; ValueError for another format version or status.
        `resumeSchema` may be absent and `suspendedAt` a number of epoch milliseconds (the
        design's forms); the snapshot keeps None and the ISO text."""
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
