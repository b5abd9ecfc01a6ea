"""A pruned cell's workspace, kept: the safety snapshot its delete plan takes first.

A prune (`apply --prune`, the GitOps daemon) deletes a cell because its manifest is gone,
which may not be what the user meant (a checkout that swapped the directory, a generator
slow to write it back). The prune records how long to keep the workspace (store/prunes.py);
the delete plan then checkpoints the stopped cell's workspace as a safety snapshot whose ttl
is that time, before the cell and its volume go. The snapshot shows in `get snapshots` and
`df`, restores onto a cell of the same name (`devcell snapshot restore NAME`) or seeds a new
one (`workspace.from`), and expires on its ttl, when its storage is reclaimed.
"""

from __future__ import annotations

import sqlite3

from devcell.backends.base import Outputs
from devcell.controllers import safety_snapshots
from devcell.controllers.plan import Step
from devcell.controllers.steps import StepName
from devcell.manifests import quantities
from devcell.manifests.model import manifest_hash, spec_hash
from devcell.store import objects
from devcell.store.prunes import Kept

SOURCE = "prune"
"""The `source` of a pruned cell's safety snapshot (no manifest path: a prune never takes it)."""


def _spec(cell: objects.ObjectRecord, kept: Kept) -> dict[str, str]:
    return {"cell": cell.name, "ttl": quantities.format_duration(kept.keep_seconds)}


def _why(cell: objects.ObjectRecord) -> str:
    return f"pruning cell {cell.name} (its manifest was gone)"


def step(cell: objects.ObjectRecord, kept: Kept, key: bytes) -> Step:
    spec = _spec(cell, kept)
    annotations = {safety_snapshots.ANNOTATION: f"taken before {_why(cell)}"}
    return Step(StepName.CHECKPOINT, {
        "checkpoint_id": kept.safety_id, "safety": kept.safety, "pruned": True,
        "keep_seconds": kept.keep_seconds, "spec_hash": spec_hash(spec, key),
        "manifest_hash": manifest_hash(spec, {}, annotations, key)})


def record(conn: sqlite3.Connection, cell: objects.ObjectRecord, args: dict[str, object],
           outputs: Outputs) -> None:
    kept = Kept(int(str(args["keep_seconds"])), str(args["checkpoint_id"]), str(args["safety"]))
    safety_snapshots.record(conn, cell, dict(args), outputs, spec=_spec(cell, kept),
                            why=_why(cell), source=SOURCE,
                            origin={"kind": "pruned", "cell": cell.name, "cellId": cell.id})
