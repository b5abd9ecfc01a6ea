"""`devcell get snapshots --tree`: which cell each snapshot came from, which cells were forked
from it, and so what depends on what, as a tree of text drawn from api.lineage's forest.
Every name is escaped (names.printable)."""

from __future__ import annotations

import sys
from typing import Any

from devcell.api.lineage import Node, contains, forest
from devcell.errors import NotFound
from devcell.names import printable

MAX_DEPTH = 64
"""Levels drawn indented; a deeper node is drawn at this depth, its line saying its own (each
level's indentation made the text quadratic in the depth: a server's made-up chain of 100k
links, ~23 MB, would be ~80 GB drawn)."""


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
    if kind == "snapshot" and row.get("imported_from"):
        extra += f" imported, of cell {printable(row['imported_from'])} elsewhere"
    return f"{kind}/{printable(row['name'])}{extra}  {state}"


def render(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]],
           name: str | None = None) -> str:
    """The tree as text; with `name`, only the tree holding that snapshot."""
    roots, children = forest(cells, snapshots)
    if name is not None:
        roots = [r for r in roots if contains(r, children, "snapshot", name)]
        if not roots:
            raise NotFound(f'snapshot "{name}" not found')
    lines: list[str] = []
    for root in roots:
        # Iterative (lineage may be deep): (node, prefix for its label, prefix for children,
        # depth).
        stack: list[tuple[Node, str, str, int]] = [(root, "", "", 0)]
        while stack:
            (kind, row), lead, below, depth = stack.pop()
            kids = children.get(row["id"], [])
            deep = f"[depth {depth}] " if depth > MAX_DEPTH else ""
            lines.append(lead + deep + _label(kind, row, kids))
            for i, kid in reversed(list(enumerate(kids))):
                last = i == len(kids) - 1
                stack.append((kid, below + ("└── " if last else "├── "),
                              below if depth >= MAX_DEPTH
                              else below + ("    " if last else "│   "), depth + 1))
    return "".join(line + "\n" for line in lines)


def show(cells: list[dict[str, Any]], snapshots: list[dict[str, Any]],
         name: str | None = None) -> None:
    text = render(cells, snapshots, name)
    if not text:
        sys.stderr.write("No resources found.\n")
    sys.stdout.write(text)
