"""Imperative verbs: they write desired state and converge exactly like apply."""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

from devcell import admission, names
from devcell.cli.converge_output import converge_and_report
from devcell.errors import ManifestError, NotFound, Problem
from devcell.manifests.model import Manifest, digest
from devcell.store import db as dbmod
from devcell.store import desired, objects

CLI = "<command line>"


def _check_name(kind: str, name: str) -> None:
    problem = names.name_problem(name)
    if problem:
        raise ManifestError([Problem(CLI, problem, kind=kind, name=name[:40], field="--name")])


def _manifest(kind: str, name: str, spec: dict[str, Any],
              labels: dict[str, str] | None = None) -> Manifest:
    labels = labels or {}
    return Manifest(kind=kind, name=name, spec=spec, labels=labels, annotations={}, file=CLI,
                    source="cli", line=1)


def _report(db: dbmod.Database, result: desired.ApplyResult, args: argparse.Namespace) -> int:
    for c in result.changes:
        sys.stdout.write(f"{c.kind.lower()}/{c.name} {c.outcome}\n")
    sys.stdout.flush()
    return converge_and_report(db, result.to_reconcile, verbose=args.verbose,
                               timeout=args.timeout, trigger="cli")


def run_snapshot_create(args: argparse.Namespace) -> int:
    _check_name("Snapshot", args.name)
    db = dbmod.open_database(args.state_dir)
    cell = objects.require(db.conn, "Cell", args.cell)
    result = admission.apply_objects(db, [_manifest("Snapshot", args.name, {"cell": cell.name})])
    return _report(db, result, args)


def run_snapshot_list(args: argparse.Namespace) -> int:
    from devcell.cli import cmd_get

    db = dbmod.open_database(args.state_dir)
    cell = objects.require(db.conn, "Cell", args.cell)
    from devcell.store import views

    rows = views.snapshots_table(db.conn, [], cell=cell.id)
    if args.output in ("table", "wide"):
        if not rows:
            sys.stderr.write(f"No snapshots of cell {cell.name}.\n")
            return 0
        cmd_get._print_table("snapshots", rows, wide=args.output == "wide")
        return 0
    args.kind, args.name, args.selector = "snapshots", None, None
    return cmd_get.run_get(args) if not rows else _print_docs(db, rows, args.output)


def _print_docs(db: dbmod.Database, rows: list[dict[str, Any]], output: str) -> int:
    from devcell.cli import cmd_get, render

    if output == "name":
        sys.stdout.write("".join(f"snapshot/{r['name']}\n" for r in rows))
        return 0
    docs = render.as_list(cmd_get._documents(db, "snapshots", rows))
    (render.as_json if output == "json" else render.as_yaml)(docs)
    return 0


def run_cell_fork(args: argparse.Namespace) -> int:
    _check_name("Cell", args.name)
    db = dbmod.open_database(args.state_dir)
    cell = objects.require(db.conn, "Cell", args.cell)
    snap = objects.get(db.conn, "Snapshot", args.snapshot)
    if snap is None:
        raise NotFound(f'snapshot "{args.snapshot}" not found')
    if snap.extra.get("cell_id") != cell.id:
        raise ManifestError([Problem(
            CLI, f'snapshot "{snap.name}" was taken of cell "{snap.spec["cell"]}", '
                 f'not of "{cell.name}"', kind="Cell", name=args.name, field="--snapshot")])
    spec = copy.deepcopy(cell.spec)
    spec["state"] = "Running"
    spec.setdefault("workspace", {})["from"] = {"snapshot": snap.name}
    manifest = _manifest("Cell", args.name, spec, labels=dict(cell.labels))
    assert manifest.spec_hash == digest(spec)
    result = admission.apply_objects(db, [manifest])
    return _report(db, result, args)


def _set_state(args: argparse.Namespace, state: str) -> int:
    db = dbmod.open_database(args.state_dir)
    change = admission.set_cell_state(db, args.cell, state)
    result = desired.ApplyResult([change])
    return _report(db, result, args)


def run_cell_sleep(args: argparse.Namespace) -> int:
    return _set_state(args, "Sleeping")


def run_cell_start(args: argparse.Namespace) -> int:
    return _set_state(args, "Running")
