"""`get nodes` (its rows and table; `get` prints them as any kind's) and `node cordon`,
`node uncordon`: one devcell.api.nodes call each, printed."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from devcell.api import nodes, render
from devcell.errors import UsageError
from devcell.names import printable
from devcell.store.db import resolve_state_dir

if TYPE_CHECKING:
    from devcell.manifests.selectors import Selector


def rows(args: argparse.Namespace, selector: Selector | None) -> list[dict[str, Any]]:
    """`get nodes`' rows: each node's table fields, its labels and its document."""
    if args.watch or args.field_selector:
        raise UsageError("nodes are read from the engine each time: no -w or --field-selector "
                         "with `get nodes` (-l selects by node label)")
    remote = getattr(args, "remote", None)
    if remote is not None:  # through a server (cli/remote.py): the nodes it lists
        found = [served(remote, doc) for doc in remote.list("nodes")]
    else:
        found = nodes.list_nodes(resolve_state_dir(args.state_dir))
    wanted = set(args.names)
    return [_row(n) for n in found if (selector is None or selector.matches(n.labels))
            and (not wanted or n.name in wanted or n.id in wanted)]


def served(client: Any, doc: Any) -> nodes.Node:
    """A node a server answered with (cli/remote_nodes.py); one that is not a node is the
    client's "not DevCell's API" error, never a traceback."""
    try:
        return nodes.from_document(doc)
    except ValueError as exc:
        from devcell.client import not_api

        raise not_api(client.url, f"a node that is not one ({exc})") from None


def _row(node: nodes.Node) -> dict[str, Any]:
    return {"name": node.name, "id": node.id, "labels": node.labels, "node": node,
            "document": node.document()}


def table(rows: list[dict[str, Any]], wide: bool) -> tuple[list[str], list[list[Any]]]:
    headers = ["NAME", "ID", "ROLE", "STATUS", "AVAILABILITY", "CELLS", "AGE"]
    data: list[list[Any]] = []
    for r in rows:
        n: nodes.Node = r["node"]
        role = f"{n.role},leader" if n.leader else n.role
        data.append([n.name, n.id, role, n.state.capitalize(), n.availability, len(n.cells),
                     render.age(n.created) if n.created else "-"])
        if wide:
            reserved = (f"{n.reserved_cpus:g}cpu,{render.size(n.reserved_memory_bytes)}"
                        if n.tasks >= 0 else "-")
            data[-1] += [n.address or "-", n.engine or "-",
                         "-" if n.cpus is None else f"{n.cpus:g}",
                         "-" if n.memory_bytes is None else render.size(n.memory_bytes),
                         reserved, "-" if n.tasks < 0 else n.tasks,
                         ",".join(n.cells) or "<none>", n.message or ""]
    if wide:
        headers += ["ADDRESS", "ENGINE", "CPUS", "MEMORY", "RESERVED", "TASKS", "CELL-NAMES",
                    "MESSAGE"]
    return headers, data


def _set(args: argparse.Namespace, availability: str, said: str) -> int:
    node, changed = nodes.set_availability(resolve_state_dir(args.state_dir), args.node,
                                           availability)
    return print_set(node.id, changed, said)


def print_set(node_id: str, changed: bool, said: str) -> int:
    """What cordon and uncordon say (on the state directory and through a server alike)."""
    shown = printable(f"node/{node_id}")
    sys.stdout.write(f"{shown} {said}\n" if changed else f"{shown} already {said}\n")
    return 0


def run_cordon(args: argparse.Namespace) -> int:
    """The engine's availability `pause`: nothing new is placed on the node; what runs there
    stays."""
    return _set(args, "pause", "cordoned")


def run_uncordon(args: argparse.Namespace) -> int:
    return _set(args, "active", "uncordoned")


def run_drain(args: argparse.Namespace) -> int:
    """Each cell moved off the node (a recorded operation each), then the node drained."""
    from devcell.api import drain
    from devcell.cli import converge_output as output

    result = drain.drain(resolve_state_dir(args.state_dir), args.node,
                         from_last_snapshot=args.from_last_snapshot,
                         options=output.options(args),
                         hooks=output.hooks(args, lambda recorded: None))
    lines, code = drain.said(result)
    for stream, line in lines:
        print_line(stream, line)
    return code


def print_line(stream: str, line: str) -> None:
    """One line of a drain's (escaped already), on its stream: on the state directory and
    through a server (cli/remote_nodes.py, as each arrives) alike."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.write(line + "\n")
    out.flush()
