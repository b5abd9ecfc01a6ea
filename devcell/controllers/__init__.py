"""Controllers, one module per kind: observe + diff -> Plan; then record what the steps did."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import sqlite3

    from devcell.backends.base import Outputs
    from devcell.controllers.context import Context
    from devcell.controllers.plan import Decision, Plan, Step


class Controller(Protocol):
    kind: str

    def decide(self, ctx: Context, object_id: str) -> Decision:
        """Read desired, recorded and observed state; return what to do (level-triggered)."""

    def run_step(self, ctx: Context, plan: Plan, step: Step) -> Outputs:
        """Perform one step through the backend."""

    def after_step(self, conn: sqlite3.Connection, plan: Plan, step: Step, outputs: Outputs
                   ) -> None:
        """Record what a successful step created, in the same transaction as the step."""

    def note_outputs(self, plan: Plan, step: Step, outputs: Outputs) -> None:
        """Keep what later steps or finish() need from a step's outputs (in memory only);
        on resume it is called again with the outputs recorded before the suspension."""

    def rebuild_plan(self, ctx: Context, data: dict[str, Any]) -> Plan | None:
        """Rebuild a suspended plan (`Plan.to_dict()`) against fresh state; None if its object
        is gone."""

    def finish(self, conn: sqlite3.Connection, plan: Plan, *, error: str | None,
               reason: str = "StepFailed") -> None:
        """Write the object's status once the plan has run (error: why it failed; reason: the
        cause in a word, e.g. ImageNotFound, for the Ready condition)."""
