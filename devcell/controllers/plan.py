"""Plans: what a controller decided to do, as plain data the reconciler can execute and record."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from devcell.store.objects import ObjectRecord


class When(StrEnum):
    SUCCESS = "success"  # only while every earlier step succeeded (the default)
    FAILURE = "failure"  # only after an earlier step failed: compensation (e.g. resume)
    ALWAYS = "always"  # in both cases (e.g. resume services after a checkpoint)


@dataclass(frozen=True)
class Step:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    when: When = When.SUCCESS


@dataclass
class Plan:
    """An ordered list of steps that moves one object towards its desired state."""

    object: ObjectRecord
    action: str
    steps: list[Step]
    backend: str
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]


@dataclass(frozen=True)
class Wait:
    """Nothing can be done until something else happens (a dependency becomes Ready)."""

    reason: str
    message: str
    requeue_after: float = 1.0


@dataclass(frozen=True)
class Settled:
    """Desired and observed agree; `failed` carries a terminal problem that blocks progress."""

    failed: str | None = None


Decision = Plan | Wait | Settled
