"""Imperative verbs (`snapshot create|list`, `cell fork|sleep|start`): arguments in, one
devcell.api call (they write desired state and converge exactly like apply), report printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from devcell.api import cells
from devcell.cli import converge_output as output
from devcell.names import printable
from devcell.store import db as dbmod
from devcell.store import objects


def run_snapshot_create(args: argparse.Namespace) -> int:
    return output.exit_code(cells.snapshot(
        dbmod.resolve_state_dir(args.state_dir), args.cell, name=args.name, ttl=args.ttl,
        consistency=args.consistency,
        options=output.options(args), hooks=output.hooks(args, output.changes())))


def run_snapshot_list(args: argparse.Namespace) -> int:
    from devcell.cli import cmd_get

    db = dbmod.open_database(args.state_dir)
    cell = objects.require(db.conn, "Cell", args.cell)
    from devcell.store import views

    rows = views.snapshots_table(db.conn, cell=cell.id)
    if args.output == "wide" and rows:
        rows = cmd_get._measured(db, "snapshots", rows)
    docs = [d for _, d in cmd_get._documents(db, "snapshots", rows)] \
        if args.output in ("json", "yaml") else []
    return print_snapshot_list(args.output, cell.name, rows, docs)


def print_snapshot_list(fmt: str, cell: str, rows: list[dict[str, Any]],
                        docs: list[dict[str, Any]]) -> int:
    """`snapshot list`'s output of `cell`'s snapshot rows (and, for json and yaml, their
    documents): as on the state directory, so through a server (cli/remote_get.py). No
    snapshots: a table says so on stderr, json and yaml are an empty List, name nothing."""
    from devcell.api import render
    from devcell.cli import cmd_get

    if fmt in ("table", "wide"):
        if not rows:
            sys.stderr.write(printable(f"No snapshots of cell {cell}.") + "\n")
            return 0
        render.table(*cmd_get._table("snapshots", rows, wide=fmt == "wide"))
    elif fmt == "name":
        sys.stdout.write("".join(printable(f"snapshot/{r['name']}") + "\n" for r in rows))
    else:
        (render.as_json if fmt == "json" else render.as_yaml)(render.as_list(docs))
    return 0


def run_cell_fork(args: argparse.Namespace) -> int:
    return output.exit_code(cells.fork(
        dbmod.resolve_state_dir(args.state_dir), args.cell, snapshot=args.snapshot,
        name=args.name, host_ports=dict(args.port), publish=not args.no_ports,
        count=args.count, options=output.options(args), hooks=output.hooks(args, output.changes())))


def run_cell_sleep(args: argparse.Namespace) -> int:
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    code = output.exit_code(cells.sleep(
        state_dir, args.cell, options=output.options(args),
        hooks=output.hooks(args, output.changes())))
    kept = cells.kept(state_dir, args.cell) if code == 0 else None
    if kept:  # what the sleep kept, as its backend can keep it (never more)
        print(printable(f"cell/{args.cell} {kept.removeprefix('cell is ')}"))
    return code


def run_cell_restart(args: argparse.Namespace) -> int:
    return output.exit_code(cells.restart(
        dbmod.resolve_state_dir(args.state_dir), args.cell, args.service,
        options=output.options(args), hooks=output.hooks(args, output.changes())))


def run_cell_rerun_hooks(args: argparse.Namespace) -> int:
    return output.exit_code(cells.rerun_hooks(
        dbmod.resolve_state_dir(args.state_dir), args.cell, options=output.options(args),
        hooks=output.hooks(args, output.changes())))


def run_cell_start(args: argparse.Namespace) -> int:
    return output.exit_code(cells.start(
        dbmod.resolve_state_dir(args.state_dir), args.cell, options=output.options(args),
        hooks=output.hooks(args, output.changes())))
