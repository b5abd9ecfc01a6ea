"""What `devcell get` lists, as records: the rows of each kind and the documents `-o json`
prints. The CLI's `get` and the HTTP API's list and get both read through here, so a cell is
the same record whichever way it is asked for.

Read-only and light: it imports no more than `devcell get` did (store views, observations);
what `-o wide` measures (capacity) and prints stays with the CLI.
"""

from __future__ import annotations

from collections.abc import Sequence

from devcell import kinds
from devcell.errors import UsageError
from devcell.names import printable
from devcell.store import views
from devcell.store.db import Database

TYPE_CHECKING = False  # no module on `get`'s path imports typing (~2 ms); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from devcell.manifests.selectors import Selector

KIND_OF_TABLE = {kind.plural: kind.name for kind in kinds.KINDS.values()}
"""cells -> Cell, snapshots -> Snapshot: the kinds whose records are whole documents."""

CRASH_LOOP = "CrashLoopBackOff"
NODE_WORDS = ("node", "nodes", "no")
"""What `--for` takes for a node (as `get nodes` does: cli.arguments.GET_KINDS)."""


def rows(db: Database, kind: str, names: Sequence[str], selector: Selector | None, *,
         wide: bool = False, labels: bool = False, page: views.Page | None = None,
         cell: str | None = None) -> list[dict[str, Any]]:
    """The table rows of `kind` (cells, snapshots, volumes, operations, controllers, events),
    those named (by name or id) or all; cells with their OBSERVED age and crash-loop phase.
    `page` (cells, snapshots): only the rows after a name, at most so many when no selector
    filters them (the API's limit and continue: a page is read, not the whole list).
    `cell` (snapshots): only the snapshots of that recorded cell, by name or id (`snapshot
    list CELL`; NotFound when it is not recorded)."""
    conn = db.conn
    if kind == "cells":
        return with_observed(db, views.cells_table(conn, selector, names, wide=wide,
                                                   labels=labels, page=page))
    if kind == "snapshots":
        if cell is not None:
            from devcell.store import objects

            cell = objects.require(conn, "Cell", cell).id
        return views.snapshots_table(conn, selector, names, cell, page=page)
    if names:  # each name once, in the order given
        return [row for name in dict.fromkeys(names) for row in other_rows(db, kind, name)]
    return other_rows(db, kind, None)


def measured(db: Database, kind: str, rows: list[dict[str, Any]]) -> list[str]:
    """`-o wide`'s figures, added to the rows in place: what the backends measure now
    (`usage`: it walks workspaces and checkpoints and reads cgroups) and, for cells, PORTS
    (`ports_shown`); the warnings say why a figure is missing."""
    problems: list[str] = []
    if rows and kind in ("cells", "snapshots"):
        from devcell.api import capacity

        found = capacity.Problems()
        measures: dict[str, Any] = (capacity.cells(db, rows, found) if kind == "cells"
                                    else capacity.snapshots(db, rows, found))
        for r in rows:
            r["usage"] = measures.get(r["id"])
        problems = list(found.messages)
    if kind == "cells":
        _with_ports(db, rows)
    return problems


def _with_ports(db: Database, rows: list[dict[str, Any]]) -> None:
    """PORTS of `get cells -o wide`: published `HOST->CELL` and forwarded `LOCAL=>CELL` (a
    running port-forward)."""
    from devcell.store import faults, forwards

    forwarded = forwards.live(db.state_dir)
    for row in rows:
        shown = []
        for port in faults.loads(row.get("ports") or "[]"):
            if isinstance(port, dict):
                shown.append(f"{port.get('hostPort', port.get('containerPort'))}->"
                             f"{port.get('containerPort')}")
        shown += [f"{local}=>{remote}" for f in forwarded.get(row["id"], [])
                  for local, remote in f.ports]
        row["ports_shown"] = ",".join(shown) or None


def controller_warnings(db: Database) -> list[str]:
    """A running daemon keeping some objects at their last good state (its manifests do not
    validate): said under a table of cells or snapshots, so it does not go unnoticed."""
    from devcell.store import daemon_status

    row = daemon_status.read(db.conn)
    if row is None or row["stopped_at"]:
        return []
    cond = next((c for c in row["conditions"] if c["type"] == "ManifestsValid"), None)
    if cond and cond["status"] == "False":
        return [f"controller: {cond['message']}"]
    return []


def other_rows(db: Database, kind: str, name: str | None) -> list[dict[str, Any]]:
    """The rows of a kind without labels: volumes, operations, controllers, events."""
    conn = db.conn
    if kind == "volumes":
        return views.volumes_table(conn, name)
    if kind == "operations":
        return views.operations_table(conn, name)
    if kind == "controllers":
        from devcell.reconciler import lease
        from devcell.store import daemon_status

        row = daemon_status.read(conn)
        if row is None or name not in (None, row["name"]):
            return []
        holder = lease.current_holder(db.state_dir)
        row["running"] = holder is not None and holder.pid == row["pid"]
        return [row]
    return views.events_table(conn, name)


def events_for(db: Database, target: str) -> list[dict[str, Any]]:
    """`get events --for cell/NAME` (kubectl's flag): the events of that one object; a node's
    (`node/ID`: cordon and uncordon) too."""
    kind, name = for_target(target)
    return views.events_table(db.conn, name, kind=kind)


def for_target(target: str) -> tuple[str, str]:
    """(kind, name or id) of `--for KIND/NAME`; UsageError when it names no kind."""
    word, _, name = target.partition("/")
    if word.lower() in NODE_WORDS and name:
        return "Node", name
    kind = kinds.by_word(word)
    if kind is None or not name:
        raise UsageError(f"--for takes KIND/NAME, e.g. cell/api or node/ID (got "
                         f"'{printable(target)}')")
    return kind.name, name


def with_observed(db: Database, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def documents(db: Database, kind: str, rows: list[dict[str, Any]]
              ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(row, document) for each row, the document as `-o json` prints it (every document
    read in a few queries: views.object_documents); a row whose object went away since it
    was listed is left out."""
    if kind in KIND_OF_TABLE:
        found = views.object_documents(db.conn, KIND_OF_TABLE[kind], [r["id"] for r in rows])
        return [(r, found[r["id"]]) for r in rows if r["id"] in found]
    if kind == "operations":
        for r in rows:
            r["steps"] = views.step_documents(db.conn, r["id"])
    return [(r, r) for r in rows]


def built(db: Database, kind: str, rows: list[dict[str, Any]],
          before: dict[str, views.Built]) -> dict[str, views.Built]:
    """Each row's (signature, document) by id, in the rows' order (cells and snapshots: those
    unchanged since `before` keep their document, views.built_documents); other kinds'
    documents are built each time, with no signature."""
    if kind in KIND_OF_TABLE:
        found = views.built_documents(db.conn, KIND_OF_TABLE[kind], [r["id"] for r in rows],
                                      before)
        return {r["id"]: found[r["id"]] for r in rows if r["id"] in found}
    return {str(doc["id"]): ((), doc) for _, doc in documents(db, kind, rows)}

