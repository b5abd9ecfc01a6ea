"""`get` and `describe`: read-only, so they never create state and never import YAML
unless asked for it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from devcell.api import listing, render
from devcell.errors import NotFound, UsageError
from devcell.names import printable, terminal_text
from devcell.store import faults, guard, views
from devcell.store.db import Database, resolve_state_dir

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from devcell.cli.printers import Output
    from devcell.manifests.selectors import Selector

PLAIN_OUTPUTS = ("table", "wide", "yaml", "json", "name")
"""Formats that need no template: for them the template printers are not even imported."""

KIND_OF_TABLE = listing.KIND_OF_TABLE
_documents = listing.documents
_events_for = listing.events_for


def _open(args: argparse.Namespace) -> Database | None:
    state_dir = resolve_state_dir(args.state_dir)
    if not guard.database_exists(state_dir):  # a lost database is refused, named
        return None
    return Database(state_dir, create=False)


LABELED = ("cells", "snapshots", "nodes")
"""The kinds with labels: -l, --show-labels and -L apply to them only."""
FIELDS = {
    "cells": {"metadata.name": "name", "metadata.id": "id", "status.phase": "shown_phase",
              "spec.backend": "backend", "spec.state": "state"},
    "snapshots": {"metadata.name": "name", "metadata.id": "id", "status.phase": "shown_phase",
                  "spec.cell": "cell"},
}
"""The fields --field-selector may name, per kind, and the table column each is read from
(status.phase is the PHASE the table shows: Deleting, CrashLoopBackOff included)."""


def _rows(db: Database, kind: str, names: Sequence[str], selector: Selector | None, *,
          wide: bool = False, labels: bool = False) -> list[dict[str, Any]]:
    found = listing.rows(db, kind, names, selector, wide=wide, labels=labels)
    return _measured(db, kind, found) if wide else found


def _measured(db: Database, kind: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with what their backends measure now (-o wide only: it walks workspaces and
    checkpoints and reads cgroups); why a figure is missing goes to stderr."""
    for problem in listing.measured(db, kind, rows):
        sys.stderr.write(f"warning: {printable(problem)}\n")
    return rows


def _dirty(usage: Any) -> str | None:
    """The DIRTY column: what changed since the workspace's last checkpoint."""
    ws = usage.workspace if usage is not None else None
    if ws is None:
        return None
    if ws.changed_files == 0 and ws.changed_bytes == 0:
        return "no"
    # A disk (vm) counts written blocks, not files.
    files = (f"{ws.changed_files} file{'s' if ws.changed_files != 1 else ''}"
             if ws.changed_files else "blocks")
    text = f"{render.size(ws.changed_bytes)} in {files}"
    return text if ws.since is not None else f"{text} (never checkpointed)"


def _cell_usage(usage: Any) -> list[str | None]:
    """WORKSPACE, DISK, DIRTY, MEMORY, CPU of one cell (<none>: its backend keeps no files or
    runtimes, or it has none now)."""
    ws = usage.workspace if usage is not None else None
    run = usage.runtime if usage is not None else None
    # A vm machine's own files (root overlay, config disk, RAM file) are the cell's too.
    files = run.files_bytes if run is not None else None
    disk = None if ws is None and files is None else (
        (ws.own_disk if ws is not None else 0) + (files or 0))
    return [None if ws is None else render.size(ws.workspace.logical),
            None if disk is None else render.size(disk), _dirty(usage), _memory(run),
            None if run is None or run.cpu_seconds is None else f"{run.cpu_seconds:.2f}s"]


def _memory(run: Any) -> str | None:
    """The MEMORY column: the runtime's, or a sleeping machine's RAM kept on disk."""
    if run is None:
        return None
    if run.memory_bytes is not None:
        return render.size(run.memory_bytes)
    if run.held and run.ram_file_bytes:
        return f"{render.size(run.ram_file_bytes)} (asleep, on disk)"
    return None


def _waiting_for(op: dict[str, Any]) -> str:
    """What a suspended operation waits for, in a few words."""
    if op["status"] != "Suspended":
        return "-"
    if op["reason"] == "AwaitingApproval":
        from devcell.controllers import plan  # only here: `get` loads little

        return f"approval: {plan.resume_command(op['id'], op['object_name'])}"
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


FROZEN = "Frozen"
"""The PHASE a table shows for a cell an operation froze and has not resumed (store/frozen)."""


def _phase(row: dict[str, Any]) -> str:
    gone = row.get("deleted_at") is not None  # an expired snapshot, kept as a record
    if row.get("deleting_at") and not gone:
        return DELETING
    return FROZEN if row.get("frozen_at") else str(row["phase"])


HELD_MARK = "*"
"""After DESIRED: the state is a runtime hold (`cell sleep`, `cell start`, an idle sleep), not
the manifest's (store/holds.py); HELD (-o wide) and describe say by whom and since when."""


def _desired(row: dict[str, Any]) -> Any:
    held = faults.loads(row["held"]) if row.get("held") else None
    if held is None:
        return row["state"]
    return f"{held.get('state')}{HELD_MARK}"


def _held(row: dict[str, Any]) -> str | None:
    """`BY@TIME` of the cell's hold (spaces as dashes: one table word), None: none."""
    held = faults.loads(row["held"]) if row.get("held") else None
    if held is None:
        return None
    return f"{str(held.get('by', '?')).replace(' ', '-')}@{held.get('at', '?')}"


def _table(kind: str, rows: list[dict[str, Any]], wide: bool
           ) -> tuple[list[str], list[list[Any]]]:
    age = render.age
    if kind == "cells":
        headers = ["NAME", "BACKEND", "DESIRED", "PHASE", "OBSERVED", "FORKED-FROM", "AGE"]
        secs = render.age_seconds
        data = [[r["name"], r["backend"], _desired(r), _phase(r), secs(r["observed_s"]),
                 r["forked_from"], secs(r["age_s"])] for r in rows]
        if wide:
            headers += ["ID", "IMAGE", "GENERATION", "SOURCE", "PORTS", "WORKSPACE", "DISK",
                        "DIRTY", "MEMORY", "CPU", "HELD", "SERVICES", "SIDECARS", "OWNER",
                        "NODE"]
            for d, r in zip(data, rows, strict=True):
                d += [r["id"], r["image"], f"{r['observed_generation']}/{r['generation']}",
                      r["source"], r.get("ports_shown"), *_cell_usage(r.get("usage")),
                      _held(r), render.services(r.get("services")),
                      render.sidecars(r.get("sidecars")), r["owner"], r.get("node_down") or r.get("node")]
    elif kind == "snapshots":
        headers = ["NAME", "CELL", "CONSISTENCY", "PHASE", "FORKS", "AGE"]
        data = [[r["name"], _snapshot_cell(r),
                 r["consistency"] or "-", _phase(r), r["forks"] or "-", age(r["created_at"])]
                for r in rows]
        if wide:
            headers += ["ID", "CELL-ID", "TAKEN", "NODE", "SIZE", "UNIQUE"]
            for d, r in zip(data, rows, strict=True):
                use = r.get("usage")
                d += [r["id"], r["cell_id"], r["taken_at"], r.get("node"),
                      None if use is None else render.size(use.usage.logical),
                      None if use is None else render.size(use.unique)]
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
            headers += ["STEPS", "BY", "MESSAGE"]
            for d, r in zip(data, rows, strict=True):
                d += [",".join(r["plan"]) or "-", r.get("actor") or "-", r["message"] or ""]
    elif kind == "controllers":
        headers = ["NAME", "RUNNING", "PID", "HOST", "SINCE", "MANIFESTS-VALID", "MESSAGE"]
        data = []
        for r in rows:
            cond: dict[str, Any] = next(
                (c for c in r["conditions"] if c["type"] == "ManifestsValid"), {})
            data.append([r["name"], "yes" if r["running"] else "no", r["pid"], r["host"],
                         age(r["started_at"]), cond.get("status"), cond.get("message")])
    elif kind == "nodes":
        from devcell.cli import cmd_nodes

        headers, data = cmd_nodes.table(rows, wide)
    else:
        headers = ["AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"]
        data = [[age(r["created_at"]), r["type"], r["reason"],
                 f"{r['object_kind'].lower()}/{r['object_name']}", r["message"]] for r in rows]
    return headers, data


def _print_table(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """The kind's table, with -L label columns and --show-labels' LABELS column appended."""
    headers, data = _table(args.kind, rows, wide=args.output == "wide")
    for key in args.label_columns:
        headers.append(key.rpartition("/")[2].upper())
        for d, r in zip(data, rows, strict=True):
            d.append(_labels(r).get(key, ""))
    if args.show_labels:
        headers.append("LABELS")
        for d, r in zip(data, rows, strict=True):
            d.append(",".join(f"{k}={v}" for k, v in sorted(_labels(r).items())) or "<none>")
    render.table(headers, data, no_headers=args.no_headers)


def _labels(row: dict[str, Any]) -> dict[str, str]:
    found = row.get("labels") or {}
    return faults.loads(found) if isinstance(found, str) else dict(found)


def prepare(args: argparse.Namespace) -> tuple[Output | None, Selector | None, tuple[Any, ...]]:
    """(output template, label selector, field selector) of a `get` command line, each
    refused before anything is read when it cannot be used (shared with cli/remote_get)."""
    output = None
    if args.output not in PLAIN_OUTPUTS or args.sort_by:
        from devcell.cli import jsonpath, printers

        # a bad template is refused before anything is read
        output = printers.parse_output(args.output)
        args.output = output.format
        if args.sort_by:
            jsonpath.relaxed(args.sort_by, what="--sort-by")
    args.label_columns = [k for given in args.label_columns or () for k in given.split(",") if k]
    if args.names and args.selector:
        raise UsageError(NAMES_AND_SELECTOR)
    return output, _selector(args), _field_selector(args)


def check_for(args: argparse.Namespace) -> str | None:
    """`--for KIND/NAME`'s value, refused with anything but `get events`."""
    for_object: str | None = getattr(args, "for_object", None)
    if for_object is not None and (args.kind != "events" or args.names):
        raise UsageError("--for is for `get events --for KIND/NAME` (without a NAME)")
    return for_object


def run_get(args: argparse.Namespace) -> int:
    output, selector, fields = prepare(args)
    if getattr(args, "tree", False):
        return _tree(args)
    for_object = check_for(args)
    db = _open(args) if args.kind != "nodes" else None  # nodes: from the engine (cmd_nodes)
    labels = bool(args.show_labels or args.label_columns)
    if for_object is not None:
        rows = _events_for(db, for_object) if db is not None else []
    elif args.kind == "nodes":
        from devcell.cli import cmd_nodes

        rows = cmd_nodes.rows(args, selector)
    else:
        rows = (_rows(db, args.kind, args.names, selector, wide=args.output == "wide",
                      labels=labels) if db is not None else [])
    rows = _filtered(args.kind, rows, fields)
    missing = _missing(args.kind, args.names, rows)
    if args.kind == "nodes":
        pairs = [(r, r["document"]) for r in rows]
    elif db is not None and _needs_documents(args):
        pairs = _documents(db, args.kind, rows)
    else:
        pairs = [(r, r) for r in rows]
    if args.sort_by:
        from devcell.cli import printers

        budget = _budget(args)
        pairs = [pairs[i] for i in printers.sort_order(args.sort_by, [d for _, d in pairs],
                                                       budget)]
    elif args.names:
        pairs = _in_given_order(args.kind, args.names, pairs)
    rows = [r for r, _ in pairs]
    _print(args, output, rows, [d for _, d in pairs], missing)
    if db is not None and args.kind in KIND_OF_TABLE and args.output in ("table", "wide"):
        _warn_invalid_manifests(db)
    if missing:
        from devcell.store import objects  # only here: its records cost `get` imports

        for name in missing:
            close = (objects.suggestion(db.conn, KIND_OF_TABLE[args.kind], name)
                     if db is not None and args.kind in KIND_OF_TABLE else "")
            sys.stderr.write(f'error: {args.kind.rstrip("s")} "{printable(name)}" not found'
                             f'{printable(close)}\n')
        return NotFound.exit_code
    if args.watch and args.output in ("table", "wide"):
        return _watch(args, selector, rows)
    return 0


def _budget(args: argparse.Namespace) -> Any:
    """The command's one jsonpath budget (--sort-by, custom columns and -o jsonpath share
    it): made on first use, kept on the parsed arguments."""
    from devcell.cli import jsonpath

    if getattr(args, "jsonpath_budget", None) is None:
        args.jsonpath_budget = jsonpath.Budget()
    return args.jsonpath_budget


NAMES_AND_SELECTOR = ("a NAME cannot be given with -l (as kubectl): give NAME... or "
                      "-l SELECTOR")


def _needs_documents(args: argparse.Namespace) -> bool:
    return args.output in ("yaml", "json", "jsonpath", "custom-columns") or bool(args.sort_by)


def _print(args: argparse.Namespace, output: Output | None, rows: list[dict[str, Any]],
           docs: list[dict[str, Any]], missing: list[str]) -> None:
    one = len(args.names) == 1 and len(docs) == 1
    if args.names and not docs:
        return  # only names not found: kubectl prints the errors alone, not an empty List
    if args.output in ("yaml", "json", "jsonpath"):
        value: Any = docs[0] if one else render.as_list(docs)
        if args.output == "jsonpath":
            from devcell.cli import jsonpath

            assert output is not None
            # raw into a pipe (`X=$(devcell get ... -o jsonpath=...)` gets the data as is, as
            # kubectl's); on a terminal, escaped so that no value can drive it
            escape = terminal_text if sys.stdout.isatty() else str
            sys.stdout.write(jsonpath.render(output.template, value, escape=escape,
                                             budget=_budget(args)))
        else:
            (render.as_json if args.output == "json" else render.as_yaml)(value)
    elif args.output == "name":
        singular = args.kind.rstrip("s")
        # a node by id: the hostnames of a cluster's nodes need not differ
        key = "id" if args.kind in ("operations", "events", "nodes") else "name"
        sys.stdout.write("".join(printable(f"{singular}/{r[key]}") + "\n" for r in rows))
    elif args.output == "custom-columns":
        from devcell.cli import printers

        assert output is not None
        if docs:
            render.table([c.header for c in output.columns],
                         printers.column_rows(output.columns, docs, _budget(args)),
                         no_headers=args.no_headers)
    elif rows:
        _print_table(args, rows)
    if not rows and not missing and not args.watch and args.output in ("table", "wide",
                                                                          "custom-columns"):
        sys.stderr.write("No resources found.\n")


def _selector(args: argparse.Namespace) -> Selector | None:
    if not (args.selector or args.show_labels or args.label_columns):
        return None
    if args.kind not in LABELED:
        raise UsageError(f"{args.kind} have no labels: -l, --show-labels and -L apply to "
                         f"{' and '.join(LABELED)}")
    from devcell.manifests import selectors

    # -L keys are not checked, as kubectl: a key only names a column (empty for a key that no
    # object can have), and the table escapes what it prints
    return selectors.parse(args.selector) if args.selector else None


def _field_selector(args: argparse.Namespace) -> tuple[Any, ...]:
    if not args.field_selector:
        return ()
    from devcell.manifests import fieldselectors

    return fieldselectors.parse(args.field_selector, FIELDS.get(args.kind, {}))


def _filtered(kind: str, rows: list[dict[str, Any]], fields: tuple[Any, ...]
              ) -> list[dict[str, Any]]:
    if not fields:
        return rows
    from devcell.manifests import fieldselectors

    for r in rows:
        r["shown_phase"] = _phase(r)
    return [r for r in rows if fieldselectors.matches_row(fields, r, FIELDS[kind])]


def _keys(kind: str, row: dict[str, Any]) -> set[Any]:
    """What a name given on the command line may be for this row."""
    if kind in ("operations", "events"):
        return {row.get("id"), row.get("object_name"), row.get("object_id")}
    return {row.get("name"), row.get("id")}


def _missing(kind: str, names: Sequence[str], rows: list[dict[str, Any]]) -> list[str]:
    return [n for n in dict.fromkeys(names) if not any(n in _keys(kind, r) for r in rows)]


def _in_given_order(kind: str, names: Sequence[str], pairs: list[Any]) -> list[Any]:
    """kubectl lists `get cells b a` as b, then a."""
    order = {name: i for i, name in enumerate(dict.fromkeys(names))}
    return sorted(pairs, key=lambda pair: min(
        (order[k] for k in _keys(kind, pair[0]) if k in order), default=len(order)))


def _tree(args: argparse.Namespace) -> int:
    """`get snapshots --tree [NAME]`: the lineage forest (cli/lineage.py)."""
    check_tree(args)
    from devcell.cli import lineage

    db = _open(args)
    cells, snapshots = views.lineage(db.conn) if db is not None else ([], [])
    lineage.show(cells, snapshots, args.names[0] if args.names else None)
    return 0


def check_tree(args: argparse.Namespace) -> None:
    """--tree's refusals (here and through a server)."""
    if args.kind != "snapshots" or args.output != "table" or args.watch or args.selector \
            or args.field_selector or args.sort_by or len(args.names) > 1:
        raise UsageError("--tree shows snapshots only, as a tree: no -o, -w or -l with it")


def _warn_invalid_manifests(db: Database) -> None:
    """A daemon keeping some objects at their last good state should not go unnoticed."""
    for note in listing.controller_warnings(db):
        sys.stderr.write(f"warning: {printable(note)}\n")


def _watch(args: argparse.Namespace, selector: Selector | None, rows: list[dict[str, Any]]
           ) -> int:
    """Poll for commits (PRAGMA data_version) and print rows that changed, as kubectl -w does."""
    import time

    state_dir = resolve_state_dir(args.state_dir)
    db: Database | None = None
    seen = {r.get("id"): _row_key(r) for r in rows}
    version = None
    try:
        while True:
            if db is None and guard.database_exists(state_dir):
                db = Database(state_dir, create=False)
            if db is not None:
                current = db.data_version()
                if current != version:
                    version = current
                    fresh = (_events_for(db, args.for_object) if args.for_object is not None
                             else _rows(db, args.kind, args.names, selector,
                                        wide=args.output == "wide",
                                        labels=bool(args.show_labels or args.label_columns)))
                    changed = [r for r in fresh if seen.get(r.get("id")) != _row_key(r)]
                    for r in fresh:
                        seen[r.get("id")] = _row_key(r)
                    if changed:
                        _print_table(args, changed)
                        sys.stdout.flush()
            time.sleep(0.05)
    except KeyboardInterrupt:
        return 0


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in row.items() if k not in ("created_at", "usage")},
                      default=str, sort_keys=True)


def check_describe_args(args: argparse.Namespace) -> None:
    """describe's usage errors, the same on a state directory and through a server."""
    if not args.names and not args.selector:
        raise UsageError(f"describe needs a NAME or -l SELECTOR (e.g. devcell describe "
                         f"{args.kind.lower()} api)")
    if args.names and args.selector:
        raise UsageError(NAMES_AND_SELECTOR)
    if args.selector and args.kind == "Operation":
        raise UsageError("operations have no labels: describe them by id")


def run_describe(args: argparse.Namespace) -> int:
    """kubectl describe: each object named (or each matching -l, never both), one after the
    other; a name not found is reported and makes the exit status 1, the others are still
    described."""
    from devcell.api import describe

    check_describe_args(args)
    from devcell.manifests import selectors

    selector = selectors.parse(args.selector) if args.selector else None
    db = _open(args)
    names = list(dict.fromkeys(args.names))
    if db is not None and selector is not None:
        names = views.names_matching(db.conn, args.kind, selector)
    missing = 0
    for i, name in enumerate(names):
        if i:
            sys.stdout.write("\n\n")
        try:
            if db is None:
                raise NotFound(f'{args.kind.lower()} "{printable(name)}" not found')
            if args.kind == "Operation":
                describe.operation(db.conn, name)
            else:
                describe.object(db.conn, args.kind, name, db.state_dir)
        except NotFound as exc:
            sys.stdout.flush()
            sys.stderr.write(f"error: {exc}\n")
            missing += 1
    if not names:
        sys.stderr.write("No resources found.\n")
    return NotFound.exit_code if missing else 0
