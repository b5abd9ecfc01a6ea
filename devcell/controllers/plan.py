"""Plans: what a controller decided to do, as plain data the reconciler can execute and record."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from devcell.controllers.steps import StepName
from devcell.errors import DevCellError
from devcell.records import MutableRecord, Record, field
from devcell.store.objects import ObjectRecord


class When(StrEnum):
    SUCCESS = "success"  # only while every earlier step succeeded (the default)
    FAILURE = "failure"  # only after an earlier step failed: compensation (e.g. resume)
    ALWAYS = "always"  # in both cases (e.g. resume services after a checkpoint)


class Step(Record):
    """One step of a plan: what it does, with which arguments, and when it runs."""

    name: StepName
    args: dict[str, Any] = field(default_factory=dict)
    when: When = When.SUCCESS
    hold: bool = False
    """Never stop (suspend) right after this step: e.g. a cell stays frozen after `quiesce`
    until `resume` runs, so a shutdown must not leave it frozen."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": str(self.name), "args": self.args, "when": str(self.when), "hold": self.hold}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        return cls(StepName(data["name"]), dict(data.get("args", {})), When(data.get("when", "success")),
                   bool(data.get("hold", False)))


class Gate(Record):
    """Before step `before`, the plan stops until someone approves it with input matching
    `schema` (a JSON Schema); `devcell op resume` or `--approve` passes it."""

    before: int
    reason: str
    schema: dict[str, Any]


def confirm_schema(name: str, what: str) -> dict[str, Any]:
    """The input every approval gate asks for: the object's name, typed back to confirm."""
    return {"type": "object", "additionalProperties": False, "required": ["confirm"],
            "properties": {"confirm": {"const": name, "description": f"{what}, to confirm"}}}


def resume_command(op_id: str, name: str) -> str:
    """The command that approves a gated operation on the object `name` (confirm_schema)."""
    return f"devcell op resume {op_id} --input confirm={name}"


class Plan(MutableRecord):
    """An ordered list of steps that moves one object towards its desired state."""

    object: ObjectRecord
    action: str
    steps: list[Step]
    backend: str
    work: Any = None
    """What the kind's controller keeps between its steps and finish() (a typed record of
    its own: CellWork, SnapshotWork); never persisted (a resumed plan rebuilds it)."""
    gate: Gate | None = None
    ran: list[str] = field(default_factory=list)
    """Steps that ran, in order (the executor fills it)."""

    @property
    def step_names(self) -> list[str]:
        return [s.name for s in self.steps]

    def to_dict(self) -> dict[str, Any]:
        """What a run snapshot keeps: enough to rebuild the plan after a restart."""
        return {"kind": self.object.kind, "objectId": self.object.id, "action": self.action,
                "backend": self.backend, "steps": [s.to_dict() for s in self.steps]}


class Wait(Record):
    """Nothing can be done until something else happens (a dependency becomes Ready)."""

    reason: str
    message: str
    requeue_after: float = 1.0


class Settled(Record):
    """Desired and observed agree: nothing to do (until `requeue_after` seconds from now, when
    something is due: a snapshot's ttl runs out, a cell's next scheduled snapshot)."""

    requeue_after: float | None = None


class Blocked(Record):
    """Nothing can be planned because of `error` (the engine unreachable, the cell gone...).

    The error keeps its class: whether the reconcile is retried with backoff or is terminal
    follows from it (devcell.errors.retry_delay), and so does the recorded reason.
    """

    error: DevCellError

    @property
    def message(self) -> str:
        return str(self.error)


Decision = Plan | Wait | Settled | Blocked
