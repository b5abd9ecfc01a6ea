"""`get` and `describe`: read-only, so they never create state and never import YAML
unless asked for it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from devcell import kinds
from devcell.cli import render
from devcell.errors import NotFound, UsageError
from devcell.names import printable
from devcell.store import guard, views
from devcell.store.db import Database, resolve_state_dir

KIND_OF_TABLE = {kind.plural: kind.name for kind in kinds.KINDS.values()}


def _open(args: argparse.Namespace) -> Database | None:
    state_dir = resolve_state_dir(args.state_dir)
    if not (state_dir / "state.db").exists():
        guard.refuse_leftovers(state_dir, state_dir / "state.db")  # a lost database: say so
        return None
    return Database(state_dir, create=False)


def _rows(db: Database, kind: str, name: str | None, selector: list[Any], *, wide: bool = False
          ) -> list[dict[str, Any]]:
    conn = db.conn
    if kind == "cells":
        return _with_observed(db, views.cells_table(conn, selector, name, wide=wide))
    if kind == "snapshots":
        return views.snapshots_table(conn, selector, name)
    if kind == "volumes":
        return views.volumes_table(conn, name)
    if kind == "operations":
        return views.operations_table(conn, name)
    if kind == "controllers":
        from devcell.reconciler import lease
        from devcell.store import daemon_status

        row = daemon_status.read(conn)
        if row is None:
            return []
        holder = lease.current_holder(db.state_dir)
        row["running"] = holder is not None and holder.pid == row["pid"]
        return [row]
    return views.events_table(conn, name)


CRASH_LOOP = "CrashLoopBackOff"


def _with_observed(db: Database, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cell's OBSERVED age (when its phase was last confirmed by its backend), and
    CrashLoopBackOff for the phase of a cell held back after its runtime kept dying."""
    import time

    from devcell.store import observations

    seen = observations.load(db.state_dir) if rows else {}
    now = time.time()
    for r in rows:
        at = seen.get(r["id"])
        r["observed_s"] = None if at is None else int(now - at)
        if r.get("retry_at") is not None and float(r["retry_at"]) > now:
            r["phase"] = CRASH_LOOP
    return rows


def _documents(db: Database, kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if kind in KIND_OF_TABLE:
        obj_kind = KIND_OF_TABLE[kind]
        docs = []
        for r in rows:
            full = views.object_row(db.conn, obj_kind, r["id"])
            if full is not None:
                docs.append(views.object_document(db.conn, obj_kind, full))
        return docs
    if kind == "operations":
        for r in rows:
            r["steps"] = views.step_documents(db.conn, r["id"])
    return rows


def _waiting_for(op: dict[str, Any]) -> str:
    """What a suspended operation waits for, in a few words."""
    if op["status"] != "Suspended":
        return "-"
    if op["reason"] == "AwaitingApproval":
        return f"approval: devcell op resume {op['id']} --input ..."
    if op["reason"] == "Approved":
        return "the reconciler (approved)"
    return "a controller start (resumes after a shutdown)"


def _snapshot_cell(row: Any) -> str:
    """The cell a snapshot was taken of; an imported one names its cell where it was taken."""
    if row["cell"] is None and row["imported_from"] is not None:
        return f"{row['imported_from']} (imported)"
    return str(row["cell"] or row["cell_id"]) + (" (deleted)" if row["cell_deleted"] else "")


DELETING = "Deleting"
"""The PHASE a table shows for an object whose deletion was asked for and is not done (waiting
for an approval, for its forks, or for the reconciler), as kubectl shows Terminating."""


def _phase(row: dict[str, Any]) -> str:
    gone = row.get("deleted_at") is not None  # an expired snapshot, kept as a record
    return DELETING if row.get("deleting_at") and not gone else str(row["phase"])


def _print_table(kind: str, rows: list[dict[str, Any]], wide: bool) -> None:
    age = render.age
    if kind == "cells":
        headers = ["NAME", "BACKEND", "DESIRED", "PHASE", "OBSERVED", "FORKED-FROM", "AGE"]
        secs = render.age_seconds
        data = [[r["name"], r["backend"], r["state"], _phase(r), secs(r["observed_s"]),
                 r["forked_from"], secs(r["age_s"])] for r in rows]
        if wide:
            headers += ["ID", "IMAGE", "GENERATION", "SOURCE"]
            for d, r in zip(data, rows, strict=True):
                d += [r["id"], r["image"], f"{r['observed_generation']}/{r['generation']}",
                      r["source"]]
    elif kind == "snapshots":
        headers = ["NAME", "CELL", "CONSISTENCY", "PHASE", "FORKS", "AGE"]
        data = [[r["name"], _snapshot_cell(r),
                 r["consistency"] or "-", _phase(r), r["forks"] or "-", age(r["created_at"])]
                for r in rows]
        if wide:
            headers += ["ID", "CELL-ID", "TAKEN"]
            for d, r in zip(data, rows, strict=True):
                d += [r["id"], r["cell_id"], r["taken_at"]]
    elif kind == "volumes":
        headers = ["NAME", "CELL", "MOUNT", "FROM-SNAPSHOT", "PHASE", "AGE"]
        data = [[r["name"], r["cell"], r["mount_path"], r["from_snapshot"] or "-", r["phase"],
                 age(r["created_at"])] for r in rows]
        if wide:
            headers += ["ID", "BACKEND-REF"]
            for d, r in zip(data, rows, strict=True):
                d += [r["id"], r["backend_ref"]]
    elif kind == "operations":
        headers = ["ID", "OBJECT", "ACTION", "TRIGGER", "STATUS", "STEP", "WAITING-FOR", "AGE"]
        data = [[r["id"], f"{r['object_kind'].lower()}/{r['object_name']}", r["action"],
                 r["trigger"], r["status"], r["current_step"] or "-", _waiting_for(r),
                 age(r["created_at"])] for r in rows]
        if wide:
            headers += ["STEPS", "MESSAGE"]
            for d, r in zip(data, rows, strict=True):
                d += [",".join(r["plan"]) or "-", r["message"] or ""]
    elif kind == "controllers":
        headers = ["NAME", "RUNNING", "PID", "HOST", "SINCE", "MANIFESTS-VALID", "MESSAGE"]
        data = []
        for r in rows:
            cond: dict[str, Any] = next(
                (c for c in r["conditions"] if c["type"] == "ManifestsValid"), {})
            data.append([r["name"], "yes" if r["running"] else "no", r["pid"], r["host"],
                         age(r["started_at"]), cond.get("status"), cond.get("message")])
    else:
        headers = ["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        data = [[age(r["created_at"]), r["type"], r["reason"],
                 f"{r['object_kind'].lower()}/{r['object_name']}", r["message"]] for r in rows]
    render.table(headers, data)


def run_get(args: argparse.Namespace) -> int:
    try:
        selector = views.parse_selector(args.selector)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "tree", False):
        return _tree(args)
    db = _open(args)
    rows = (_rows(db, args.kind, args.name, selector, wide=args.output == "wide")
            if db is not None else [])
    if args.name is not None and not rows:
        raise NotFound(f'{args.kind.rstrip("s")} "{args.name}" not found')
    if args.output in ("yaml", "json"):
        assert db is not None or not rows
        docs = _documents(db, args.kind, rows) if db is not None else []
        value: Any = docs[0] if args.name is not None and len(docs) == 1 else render.as_list(docs)
        (render.as_json if args.output == "json" else render.as_yaml)(value)
        return 0
    if args.output == "name":
        singular = args.kind.rstrip("s")
        key = "id" if args.kind in ("operations", "events") else "name"
        sys.stdout.write("".join(f"{singular}/{r[key]}\n" for r in rows))
        return 0
    if not rows and not args.watch:
        sys.stderr.write("No resources found.\n")
        return 0
    if rows:
        _print_table(args.kind, rows, wide=args.output == "wide")
    if db is not None and args.kind in KIND_OF_TABLE:
        _warn_invalid_manifests(db)
    if args.watch:
        return _watch(args, selector, rows)
    return 0


def _tree(args: argparse.Namespace) -> int:
    """`get snapshots --tree [NAME]`: the lineage forest (cli/lineage.py)."""
    if args.kind != "snapshots" or args.output != "table" or args.watch or args.selector:
        raise UsageError("--tree shows snapshots only, as a tree: no -o, -w or -l with it")
    from devcell.cli import lineage

    db = _open(args)
    cells, snapshots = views.lineage(db.conn) if db is not None else ([], [])
    lineage.show(cells, snapshots, args.name)
    return 0


def _warn_invalid_manifests(db: Database) -> None:
    """A daemon keeping some objects at their last good state should not go unnoticed."""
    from devcell.store import daemon_status

    row = daemon_status.read(db.conn)
    if row is None or row["stopped_at"]:
        return
    cond = next((c for c in row["conditions"] if c["type"] == "ManifestsValid"), None)
    if cond and cond["status"] == "False":
        sys.stderr.write(f"warning: controller: {printable(cond['message'])}\n")


def _watch(args: argparse.Namespace, selector: list[Any], rows: list[dict[str, Any]]) -> int:
    """Poll for commits (PRAGMA data_version) and print rows that changed, as kubectl -w does."""
    import time

    state_dir = resolve_state_dir(args.state_dir)
    db: Database | None = None
    seen = {r.get("id"): _row_key(r) for r in rows}
    version = None
    try:
        while True:
            if db is None and (state_dir / "state.db").exists():
                db = Database(state_dir, create=False)
            if db is not None:
                current = db.data_version()
                if current != version:
                    version = current
                    fresh = _rows(db, args.kind, args.name, selector, wide=args.output == "wide")
                    changed = [r for r in fresh if seen.get(r.get("id")) != _row_key(r)]
                    for r in fresh:
                        seen[r.get("id")] = _row_key(r)
                    if changed:
                        _print_table(args.kind, changed, wide=args.output == "wide")
                        sys.stdout.flush()
            time.sleep(0.05)
    except KeyboardInterrupt:
        return 0


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items() if k not in ("created_at",)}, default=str,
                      sort_keys=True)


def run_describe(args: argparse.Namespace) -> int:
    from devcell.cli import describe

    db = _open(args)
    if db is None:
        raise NotFound(f'{args.kind.lower()} "{args.name}" not found')
    if args.kind == "Operation":
        describe.operation(db.conn, args.name)
    else:
        describe.object(db.conn, args.kind, args.name, db.state_dir)
    return 0
