"""Snapshot lineage as a forest: which cell each snapshot came from and which cells were forked
from it, drawn from the store's lineage columns (a snapshot's cell_id, a fork's forked_from).
`devcell get snapshots --tree` prints it as text (cli/lineage.py), the dashboard draws it as
a graph (server/ui): both walk the same forest."""

from __future__ import annotations

from typing import Any

Node = tuple[str, dict[str, Any]]
"""("cell" | "snapshot", its row)"""


def forest(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]]
           ) -> tuple[list[Node], dict[str, list[Node]]]:
    """The roots (cells forked from nothing shown) and each node's children, by id."""
    shown = {s["id"] for s in snapshots}
    children: dict[str, list[Node]] = {}
    roots: list[Node] = []
    for s in snapshots:
        if s["cell_id"] is None:  # imported: its cell lives in another state directory
            roots.append(("snapshot", s))
        else:
            children.setdefault(s["cell_id"], []).append(("snapshot", s))
    for c in cells:
        if c["forked_from"] in shown:
            children.setdefault(c["forked_from"], []).append(("cell", c))
        else:
            roots.append(("cell", c))
    return roots, children


def contains(node: Node, children: dict[str, list[Node]], kind: str, name: str) -> bool:
    """Whether the tree under `node` holds the `kind` ("cell", "snapshot") named `name` (a
    name or an id)."""
    stack = [node]
    while stack:
        found, row = stack.pop()
        if found == kind and name in (row["name"], row["id"]):
            return True
        stack += children.get(row["id"], [])
    return False
