"""`devcell get` through a server (cli/remote.py): the rows and documents the API answers
(GET /api/v1/rows/KIND, made by api.listing as `get` makes them on the state directory),
printed by cmd_get's own printers, so the output is the same bytes as on the server's
machine. `-w` follows the API's watch and prints the rows that changed, as `get -w` does."""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from devcell.cli import cmd_get
from devcell.errors import NotFound, UsageError
from devcell.names import MAX_NAME_LENGTH, printable

if TYPE_CHECKING:
    from devcell.cli.printers import Output

PART = 100
"""Names asked for in one request (the API's limit)."""
SERVED = ("cells", "snapshots", "operations", "events", "nodes", "volumes", "controllers")
"""The kinds the API lists (every kind `devcell get` shows)."""


def run_get(args: argparse.Namespace) -> int:
    if args.kind == "nodes":  # the engine's, listed whole: `get nodes`' own code prints them
        return int(cmd_get.run_get(args))  # (cmd_nodes.rows reads them through args.remote)
    output, _selector, fields = cmd_get.prepare(args)  # refused here as on the state directory
    return run(args, output, fields)


def run(args: argparse.Namespace, output: Output | None, fields: tuple[Any, ...]) -> int:
    client = args.remote
    if args.kind not in SERVED:
        raise UsageError(f"`devcell get {args.kind}` is not served through the DevCell API yet "
                         f"(it serves {', '.join(SERVED)}): run it on the server's machine, "
                         "or give --state-dir DIR to use a state directory here")
    if getattr(args, "tree", False):
        return _tree(args)
    cmd_get.check_for(args)
    if args.watch and args.kind in ("volumes", "controllers"):
        raise UsageError(f"`devcell get {args.kind} -w` is not served through the DevCell API "
                         "(it watches the objects alone): run it on the server's machine")
    wide = args.output == "wide"
    docs_wanted = cmd_get._needs_documents(args)
    rows, pairs, notes = fetch(args, client, wide=wide, objects=docs_wanted)
    kept = {id(r) for r in cmd_get._filtered(args.kind, rows, fields)}
    pairs = [(r, d) for r, d in pairs if id(r) in kept]
    rows = [r for r in rows if id(r) in kept]
    missing = cmd_get._missing(args.kind, args.names, rows)
    if args.sort_by:
        from devcell.cli import printers

        budget = cmd_get._budget(args)
        pairs = [pairs[i] for i in printers.sort_order(args.sort_by, [d for _, d in pairs],
                                                       budget)]
    elif args.names:
        pairs = cmd_get._in_given_order(args.kind, args.names, pairs)
    rows = [r for r, _ in pairs]
    cmd_get._print(args, output, rows, [d for _, d in pairs], missing)
    if args.kind in cmd_get.KIND_OF_TABLE and args.output in ("table", "wide"):
        for note in notes:
            sys.stderr.write(f"warning: {printable(note)}\n")
    if missing:
        for name in missing:
            sys.stderr.write(f"error: {_not_found(client, args.kind, name)}\n")
        return NotFound.exit_code
    if args.watch and args.output in ("table", "wide"):
        return _watch(args, client, rows)
    return 0


def fetch(args: argparse.Namespace, client: Any, *, wide: bool, objects: bool
          ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], dict[str, Any]]],
                     list[str]]:
    """(rows, (row, document) pairs, notes) as the server lists them; the measuring
    warnings of -o wide said on stderr first, as `get` says them."""
    # A name or id is at most 63 characters: a longer one is not asked for (it is missing).
    names = [n for n in dict.fromkeys(args.names) if 0 < len(n) <= MAX_NAME_LENGTH]
    parts = [names[i:i + PART] for i in range(0, len(names), PART)] or [[]]
    if args.names and not names:
        parts = []
    answer: dict[str, Any] = {"items": [], "warnings": [], "notes": []}
    for part in parts:
        of_cell = getattr(args, "of_cell", None)
        got = client.rows(args.kind, names=part, selector=args.selector or None,
                          for_object=getattr(args, "for_object", None), wide=wide,
                          labels=bool(args.show_labels or args.label_columns),
                          objects=objects, **({"cell": of_cell} if of_cell else {}))
        answer["items"] += got.get("items", [])
        for key in ("warnings", "notes"):
            answer[key] += [w for w in got.get(key, []) if w not in answer[key]]
        answer["metadata"] = got.get("metadata", {})
    args.remote_version = answer.get("metadata", {}).get("resourceVersion")
    for problem in answer.get("warnings", []):
        sys.stderr.write(f"warning: {printable(str(problem))}\n")
    rows: list[dict[str, Any]] = []
    pairs = []
    for item in answer.get("items", []):
        row = item["row"]
        if row.get("usage") is not None:
            row["usage"] = _attributes(row["usage"])
        rows.append(row)
        pairs.append((row, item.get("object", row) if objects else row))
    return rows, pairs, [str(n) for n in answer.get("notes", [])]


def run_snapshot_list(args: argparse.Namespace) -> int:
    """`snapshot list CELL`: the rows of GET /api/v1/rows/snapshots?cell=CELL (a cell not
    recorded: its 404, said as on the state directory), printed by its own printer."""
    from devcell.cli import cmd_cells

    fmt = args.output
    listed = argparse.Namespace(kind="snapshots", names=[], selector=None, show_labels=False,
                                label_columns=None, of_cell=args.cell)
    _rows, pairs, _notes = fetch(listed, args.remote, wide=fmt == "wide",
                                 objects=fmt in ("json", "yaml"))
    rows = [r for r, _ in pairs]
    cell = str(rows[0]["cell"]) if rows else args.cell
    if not rows and fmt in ("table", "wide"):  # its name, when it was given by id
        cell = str(args.remote.get("cells", args.cell)["metadata"]["name"])
    return cmd_cells.print_snapshot_list(fmt, cell, rows, [d for _, d in pairs])


def _tree(args: argparse.Namespace) -> int:
    """`get snapshots --tree [NAME]`: the lineage the server records (GET /api/v1/lineage),
    drawn by cli/lineage.py as on its machine."""
    from devcell.cli import lineage

    cmd_get.check_tree(args)
    cells, snapshots = args.remote.lineage()
    lineage.show(list(cells), list(snapshots), args.names[0] if args.names else None)
    return 0


def _attributes(value: Any) -> Any:
    """A measured usage (JSON) as the records `-o wide`'s columns read by attribute."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _attributes(v) for k, v in value.items()})
    return value


def _not_found(client: Any, kind: str, name: str) -> str:
    """`KIND "NAME" not found`, with the server's "did you mean" for cells and snapshots."""
    plain = f'{kind.rstrip("s")} "{printable(name)}" not found'
    if kind not in cmd_get.KIND_OF_TABLE:
        return plain
    try:
        client.get(kind, name)
    except NotFound as exc:
        return printable(str(exc))
    return plain  # recorded since it was listed


def _watch(args: argparse.Namespace, client: Any, rows: list[dict[str, Any]]) -> int:
    """Each change the API's watch reports, the rows listed again and those that changed
    printed (as `get -w` prints them on a state directory)."""
    seen = {r.get("id"): cmd_get._row_key(r) for r in rows}
    wide = args.output == "wide"
    version = getattr(args, "remote_version", None)
    try:
        while True:  # a watch ends after an hour at most: the next one takes up from there
            for change in client.watch(args.kind, resource_version=version, timeout=3600):
                version = change.get("resourceVersion", version)
                fresh, _pairs, _notes = fetch(args, client, wide=wide, objects=False)
                changed = [r for r in fresh if seen.get(r.get("id")) != cmd_get._row_key(r)]
                for r in fresh:
                    seen[r.get("id")] = cmd_get._row_key(r)
                if changed:
                    cmd_get._print_table(args, changed)
                    sys.stdout.flush()
    except KeyboardInterrupt:
        return 0
