"""`op resume` and `op cancel`: act on suspended operations."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from devcell.cli.converge_output import converge_and_report
from devcell.errors import ManifestError, NotFound, Problem, UsageError
from devcell.store import db as dbmod
from devcell.store import events, objects, operations


def _suspended(db: dbmod.Database, ref: str) -> Any:
    op = operations.get(db.conn, ref)
    if op is None:
        raise NotFound(f'operation "{ref}" not found')
    if op["status"] != operations.OpStatus.SUSPENDED:
        raise UsageError(f"operation {op['id']} is {op['status']}, not suspended")
    return op


def _parse_inputs(pairs: list[str], files: list[str]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for path in files:
        import yaml

        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise ManifestError([Problem(path, f"cannot read input: {exc}")]) from None
        if not isinstance(loaded, dict):
            raise ManifestError([Problem(path, "input must be a mapping of keys to values")])
        data.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--input {pair!r}: use key=value")
        data[key] = value
    return data


def run_op_resume(args: argparse.Namespace) -> int:
    db = dbmod.open_database(args.state_dir)
    op = _suspended(db, args.operation)
    from devcell import runs

    store = runs.open_store(db.state_dir, args.run_store)
    snapshot = store.load(op["id"])
    store.close()
    if snapshot is None:
        raise NotFound(f"operation {op['id']} has no run snapshot to resume from")
    given = _parse_inputs(args.input or [], args.input_file or [])
    schema = snapshot.resume_schema
    if schema is not None:
        import jsonschema

        validator = jsonschema.validators.validator_for(schema)(schema)
        problems = [
            Problem("<input>", e.message, field=".".join(str(p) for p in e.absolute_path) or None)
            for e in sorted(validator.iter_errors(given), key=lambda e: list(e.absolute_path))
        ]
        if problems:
            wants = json.dumps(schema.get("properties", {}), sort_keys=True)
            problems.append(Problem("<input>", f"operation {op['id']} stays suspended; it "
                                    f"expects: {wants}"))
            raise ManifestError(problems)
    elif given:
        raise UsageError(f"operation {op['id']} takes no input (it was suspended by a shutdown)")
    with db.write() as conn:
        operations.approve(conn, op["id"], given if schema is not None else {})
        events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                      name=op["object_name"], reason="Approved",
                      message=f"operation {op['id']} approved", op_id=op["id"])
    sys.stdout.write(f"operation/{op['id']} approved\n")
    sys.stdout.flush()
    return converge_and_report(db, [(op["object_kind"], op["object_id"])], verbose=args.verbose,
                               timeout=args.timeout, trigger="resume",
                               run_store=args.run_store, until_op=op["id"])


def run_op_cancel(args: argparse.Namespace) -> int:
    db = dbmod.open_database(args.state_dir)
    op = _suspended(db, args.operation)
    with db.write() as conn:
        operations.finish(conn, op["id"], status=operations.OpStatus.FAILED, reason="Cancelled",
                          message="cancelled by the user", failed_step=op["current_step"])
        record = objects.get(conn, op["object_kind"], op["object_id"])
        if op["action"] == "delete" and record is not None and record.deleting:
            objects.cancel_delete(conn, record)
        events.record(conn, kind=op["object_kind"], object_id=op["object_id"],
                      name=op["object_name"], reason="OperationCancelled",
                      message=f"{op['action']} {op['id']} cancelled" +
                      ("; the object is kept" if op["action"] == "delete" else ""),
                      op_id=op["id"])
    from devcell import runs

    store = runs.open_store(db.state_dir, args.run_store)
    store.delete(op["id"])
    store.close()
    sys.stdout.write(f"operation/{op['id']} cancelled\n")
    sys.stdout.flush()
    return converge_and_report(db, [(op["object_kind"], op["object_id"])], verbose=args.verbose,
                               timeout=args.timeout, trigger="cli", run_store=args.run_store)
