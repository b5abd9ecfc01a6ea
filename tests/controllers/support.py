"""Helpers shared by the controller and reconciler tests (in-process, fake backend).

Manifests are built from plain dicts and run through the real validator (so specs are
defaulted exactly as `devcell apply` defaults them), then recorded with
`desired.apply_objects` and converged with `converge.converge`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from devcell import API_VERSION, admission, kinds
from devcell.backends.fake import FakeBackend
from devcell.controllers.context import Context
from devcell.controllers.plan import Decision, Plan, Settled, Wait
from devcell.manifests import validate
from devcell.manifests.model import Manifest, SourceFile
from devcell.reconciler.converge import Key, Report, converge
from devcell.reconciler.reconcile import controller_for
from devcell.store import desired, objects, operations
from devcell.store.db import Database

SOURCE_KEY = "/virtual/manifests.yaml"


def cell_doc(name: str, state: str = "Running", *, labels: dict[str, str] | None = None,
             fork_of: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"backend": "fake", "state": state, **spec}
    if fork_of is not None:
        body.setdefault("workspace", {})["from"] = {"snapshot": fork_of}
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": "Cell", "metadata": meta, "spec": body}


def snapshot_doc(name: str, cell: str, *, labels: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": API_VERSION, "kind": "Snapshot", "metadata": meta,
            "spec": {"cell": cell}}


def parse(*docs: dict[str, Any]) -> list[Manifest]:
    """Validated, defaulted Manifests, exactly as the validator makes them from a file."""
    text = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs).encode()
    source = SourceFile("test.yaml", SOURCE_KEY, text, hashlib.sha256(text).hexdigest())
    manifests, problems = validate.parse_source(source)
    assert not problems, [str(p) for p in problems]
    assert len(manifests) == len(docs)
    return manifests


def apply(db: Database, *docs: dict[str, Any]) -> desired.ApplyResult:
    return admission.apply_objects(db, parse(*docs))


def live_keys(db: Database) -> list[Key]:
    """Every live object, cells first (in creation order), then snapshots."""
    return objects.live_keys(db.conn)


def all_keys(db: Database) -> list[Key]:
    """Every object ever recorded, deleted ones included."""
    keys: list[Key] = []
    for kind in kinds.KINDS.values():
        keys += [(kind.name, r[0]) for r in db.conn.execute(
            f"SELECT id FROM {kind.table} ORDER BY rowid")]
    return keys


def converge_all(ctx: Context, keys: list[Key] | None = None) -> Report:
    return converge(ctx, keys if keys is not None else live_keys(ctx.db), timeout=60)


def op_count(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM operations").fetchone()[0])


def step_count(db: Database) -> int:
    return int(db.conn.execute("SELECT count(*) FROM operation_steps").fetchone()[0])


def decide(ctx: Context, kind: str, ref: str) -> Decision:
    """The controller's decision for the object named (or with id) `ref`."""
    record = objects.get(ctx.db.conn, kind, ref, include_deleted=True)
    assert record is not None, f"{kind} {ref} not recorded"
    return controller_for(kind).decide(ctx, record.id)


def plan_of(ctx: Context, kind: str, ref: str) -> Plan:
    decision = decide(ctx, kind, ref)
    assert isinstance(decision, Plan), f"expected a Plan for {kind} {ref}, got {decision!r}"
    return decision


def record(db: Database, kind: str, ref: str) -> objects.ObjectRecord:
    found = objects.get(db.conn, kind, ref, include_deleted=True)
    assert found is not None, f"{kind} {ref} not recorded"
    return found


def last_operation(db: Database, ref: str, kind: str = "Cell") -> tuple[Any, list[operations.StepRecord]]:
    rec = record(db, kind, ref)
    ops = operations.for_object(db.conn, rec.id, limit=1)
    assert ops, f"no operation recorded for {kind} {ref}"
    return ops[0], operations.steps(db.conn, ops[0]["id"])


def fake(ctx: Context) -> FakeBackend:
    backend = ctx.backend("fake")
    assert isinstance(backend, FakeBackend)
    return backend


def is_settled(decision: Decision) -> bool:
    return isinstance(decision, Settled)


def is_wait(decision: Decision) -> bool:
    return isinstance(decision, Wait)


@contextmanager
def context_for(db: Database, trigger: str = "test") -> Iterator[Context]:
    ctx = Context(db, trigger=trigger)
    try:
        yield ctx
    finally:
        ctx.close()
