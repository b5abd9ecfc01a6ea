"""`devcell get snapshots --tree`: which cell each snapshot came from, which cells were forked
from it, and so what depends on what, as a tree drawn from the store's lineage columns
(a snapshot's cell_id, a fork's forked_from). Every name is escaped (names.printable)."""

from __future__ import annotations

import sys
from typing import Any

from devcell.errors import NotFound
from devcell.names import printable

Node = tuple[str, dict[str, Any]]
"""("cell" | "snapshot", its row)"""


def _label(kind: str, row: dict[str, Any], children: list[Node]) -> str:
    if row["deleted_at"]:
        state = "Deleted" + (": kept while a fork depends on it" if kind == "snapshot" else "")
    elif row["deleting_at"]:
        forks = [printable(r["name"]) for k, r in children if k == "cell"]
        state = "Deleting" + (f": waits until its forks are gone ({', '.join(forks)})"
                              if forks else "")
    else:
        state = printable(row["phase"] or "Pending")
    extra = f" ({printable(row['consistency'])})" if row.get("consistency") else ""
    return f"{kind}/{printable(row['name'])}{extra}  {state}"


def forest(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]]
           ) -> tuple[list[Node], dict[str, list[Node]]]:
    """The roots (cells forked from nothing shown) and each node's children, by id."""
    shown = {s["id"] for s in snapshots}
    children: dict[str, list[Node]] = {}
    for s in snapshots:
        children.setdefault(s["cell_id"], []).append(("snapshot", s))
    roots: list[Node] = []
    for c in cells:
        if c["forked_from"] in shown:
            children.setdefault(c["forked_from"], []).append(("cell", c))
        else:
            roots.append(("cell", c))
    return roots, children


def _contains(node: Node, children: dict[str, list[Node]], name: str) -> bool:
    stack = [node]
    while stack:
        kind, row = stack.pop()
        if kind == "snapshot" and (row["name"] == name or row["id"] == name):
            return True
        stack += children.get(row["id"], [])
    return False


def render(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]],
           name: str | None = None) -> str:
    """The tree as text; with `name`, only the tree holding that snapshot."""
    roots, children = forest(cells, snapshots)
    if name is not None:
        roots = [r for r in roots if _contains(r, children, name)]
        if not roots:
            raise NotFound(f'snapshot "{name}" not found')
    lines: list[str] = []
    for root in roots:
        # Iterative (lineage may be deep): (node, prefix for its label, prefix for children).
        stack: list[tuple[Node, str, str]] = [(root, "", "")]
        while stack:
            (kind, row), lead, below = stack.pop()
            kids = children.get(row["id"], [])
            lines.append(lead + _label(kind, row, kids))
            for i, kid in reversed(list(enumerate(kids))):
                last = i == len(kids) - 1
                stack.append((kid, below + ("└── " if last else "├── "),
                              below + ("    " if last else "│   ")))
    return "".join(line + "\n" for line in lines)


def show(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]],
         name: str | None = None) -> None:
    text = render(cells, snapshots, name)
    if not text:
        sys.stderr.write("No resources found.\n")
    sys.stdout.write(text)
