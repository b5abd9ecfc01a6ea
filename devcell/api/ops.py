"""`op resume` and `op cancel`: act on a suspended operation, then converge its object.

A resume validates the input against the schema its run snapshot carries (the approval gate's
question) before anything is written: a wrong answer leaves the operation suspended and says
what it expects. The approval is recorded for whoever reconciles next; with a daemon running,
the call waits for that operation to finish rather than for its object (a resumed delete never
makes its object Ready).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devcell.api import converging
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.errors import ManifestError, NotFound, Problem, UsageError
from devcell.store import db as dbmod
from devcell.store import events, objects, operations, restores


def resume(state_dir: Path, op_ref: str, *, inputs: Sequence[str] = (),
           input_files: Sequence[str] = (), values: Mapping[str, Any] | None = None,
           options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    """Approve suspended operation `op_ref` with `inputs` (KEY=VALUE) and `input_files` (YAML
    or JSON mappings, read first; pairs override), or `values` (an API request's mapping),
    then continue it."""
    db = dbmod.open_database(state_dir)
    try:
        op = _suspended(db, op_ref)
        schema = _resume_schema(db, op["id"], options.run_store)
        given = {**parse_inputs(inputs, input_files), **(values or {})}
        if schema is not None:
            _check_input(op["id"], schema, given)
        elif given:
            raise UsageError(f"operation {op['id']} takes no input (it was suspended by a "
                             "shutdown)")
        with db.write() as conn:
            operations.approve(conn, op["id"], given if schema is not None else {})
            events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                          name=op["object_name"], reason="Approved",
                          message=f"operation {op['id']} approved", op_id=op["id"])
        return _finish(db, op, trigger="resume", options=options, hooks=hooks,
                       until_op=op["id"])
    finally:
        db.close()


def cancel(state_dir: Path, op_ref: str, *, options: Options = DEFAULTS,
           hooks: Hooks = NO_HOOKS) -> Report:
    """Cancel suspended operation `op_ref` (a cancelled delete keeps its object), then
    converge its object."""
    db = dbmod.open_database(state_dir)
    try:
        op = _suspended(db, op_ref)
        with db.write() as conn:
            operations.finish(conn, op["id"], status=operations.OpStatus.FAILED,
                              reason="Cancelled", message="cancelled by the user",
                              failed_step=op["current_step"])
            record = objects.get(conn, op["object_kind"], op["object_id"])
            if op["action"] == "delete" and record is not None and record.deleting:
                objects.cancel_delete(conn, record)
            if op["action"] == "restore":
                restores.clear(conn, op["object_id"])  # the workspace stays as it is
            events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                          name=op["object_name"], reason="OperationCancelled",
                          message=f"{op['action']} {op['id']} cancelled" +
                          ("; the object is kept" if op["action"] == "delete" else
                           "; the workspace is kept" if op["action"] == "restore" else ""),
                          op_id=op["id"])
        from devcell import runs

        store = runs.open_store(db.state_dir, options.run_store)
        try:
            store.delete(op["id"])
        finally:
            store.close()
        return _finish(db, op, trigger="cli", options=options, hooks=hooks)
    finally:
        db.close()


def parse_inputs(pairs: Sequence[str], files: Sequence[str]) -> dict[str, Any]:
    """Resume input from KEY=VALUE pairs and YAML/JSON files holding a mapping."""
    from devcell.manifests import loader, validate

    data: dict[str, Any] = {}
    # Read and parsed as manifests are: bounded, never hanging on a FIFO in a directory,
    # strict JSON for .json, no YAML aliases (an alias bomb) and no duplicate keys.
    for source in loader.read_sources(list(files)) if files else []:
        data.update(validate.read_mapping(source))
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {pair!r}: use key=value")
        data[key] = value
    return data


def _suspended(db: dbmod.Database, ref: str) -> Any:
    op = operations.get(db.conn, ref)
    if op is None:
        raise NotFound(f'operation "{ref}" not found')
    if op["status"] != operations.OpStatus.SUSPENDED:
        raise UsageError(f"operation {op['id']} is {op['status']}, not suspended")
    return op


def _resume_schema(db: dbmod.Database, op_id: str, run_store: str | None
                   ) -> dict[str, Any] | None:
    """The input schema of the operation's approval gate; None when it was suspended by a
    shutdown (it takes no input). NotFound when it has no run snapshot to resume from."""
    from devcell import runs

    store = runs.open_store(db.state_dir, run_store)
    try:
        snapshot = store.load(op_id)
    finally:
        store.close()
    if snapshot is None:
        raise NotFound(f"operation {op_id} has no run snapshot to resume from")
    schema: dict[str, Any] | None = snapshot.resume_schema
    return schema


def _check_input(op_id: str, schema: dict[str, Any], given: dict[str, Any]) -> None:
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = [
        Problem("<input>", e.message, field=".".join(str(p) for p in e.absolute_path) or None)
        for e in sorted(validator.iter_errors(given), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        wants = json.dumps(schema.get("properties", {}), sort_keys=True)
        problems.append(Problem("<input>", f"operation {op_id} stays suspended; it "
                                f"expects: {wants}"))
        raise ManifestError(problems)


def _finish(db: dbmod.Database, op: Any, *, trigger: str, options: Options, hooks: Hooks,
            until_op: str | None = None) -> Report:
    key = (str(op["object_kind"]), str(op["object_id"]))
    return converging.finish(db, Recorded(operation=str(op["id"])), trigger=trigger,
                             options=options, hooks=hooks, keys=[key],
                             names={key: str(op["object_name"])}, until_op=until_op)
