"""POST /api/v1/operations/ID/resume and .../cancel: `devcell op resume|cancel` through the API.

A suspended operation (a delete or restore at its approval gate, one a shutdown stopped) is
judged by what it does to its object: approving or cancelling a delete is the `delete` verb on
that object, a restore the `restore` verb, anything else `update` (a developer only on their
own cells and those shared with them; an operation on no cell, a garbage collection, only an
admin). The library calls are `op resume|cancel`'s own (api/ops.py), in the caller's name;
the daemon continues the object, so the answer is what was recorded, not how it ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.errors import NotFound, UsageError
from devcell.server import bodies

MAX_BODY_BYTES = 64 << 10
"""A resume's input: the approval gate's answers, small."""


def parse_input(data: bytes) -> dict[str, Any]:
    """A resume's body: none, or a JSON object {"input": {...}} (the gate's answers, as
    `op resume --input KEY=VALUE` and `--input-file` give them)."""
    if not data.strip():
        return {}
    body = bodies.json_object(data, "resume", ["input"], "input, the approval gate's answers")
    given = body.get("input", {})
    if not isinstance(given, dict):
        raise UsageError("resume: input must be a JSON object of the gate's answers")
    return given


def record(state_dir: Path, principal: Any, which: str, op_ref: str,
           given: dict[str, Any]) -> dict[str, Any]:
    """Resume or cancel the suspended operation `op_ref` once `principal` may: what was
    recorded, as apply's result document (its `operation`)."""
    from devcell.api import converging, ops, reports
    from devcell.auth import policy, resources
    from devcell.store import actor, operations
    from devcell.store.db import Database

    db = Database(state_dir, create=False)
    try:
        op = operations.get(db.conn, op_ref)
        if op is None:
            raise NotFound(f'operation "{op_ref}" not found')
        verb = {"delete": policy.Verb.delete, "restore": policy.Verb.restore}.get(
            str(op["action"]), policy.Verb.update)
        policy.require(principal, verb, resources.recorded(db.conn, str(op["object_kind"]),
                                                           str(op["object_id"])))
    finally:
        db.close()
    how = converging.Options(wait=False)
    with actor.acting_as(principal.user):
        if which == "resume":
            report = ops.resume(state_dir, str(op["id"]), values=given, options=how)
        else:
            report = ops.cancel(state_dir, str(op["id"]), options=how)
    return reports.document(report)
