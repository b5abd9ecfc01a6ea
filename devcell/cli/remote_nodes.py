"""`node cordon`, `node uncordon` and `node drain` through a server (cli/remote.py): POST
/api/v1/nodes/NAME/cordon|uncordon|drain (an admin's), said as on the server's machine; a
drain's lines printed as the server streams them (it moves cells for minutes), its exit
status the server's. `get nodes` reads GET /api/v1/nodes in cmd_nodes itself."""

from __future__ import annotations

import argparse

from devcell.cli import cmd_nodes
from devcell.client import not_api


def run_cordon(args: argparse.Namespace) -> int:
    return _set(args, "cordon", "cordoned")


def run_uncordon(args: argparse.Namespace) -> int:
    return _set(args, "uncordon", "uncordoned")


def _set(args: argparse.Namespace, action: str, said: str) -> int:
    client = args.remote
    answer = client.node_action(args.node, action)
    if not isinstance(answer, dict):
        answer = {}
    node = cmd_nodes.served(client, answer.get("node"))
    changed = answer.get("changed")
    if not isinstance(changed, bool):
        raise not_api(client.url, f"a {action} without saying whether it changed the node")
    return cmd_nodes.print_set(node.id, changed, said)


def run_drain(args: argparse.Namespace) -> int:
    """The drain runs on the server (server/drains.py): one whose answer is cut here, or
    whose output is closed, goes on there to its end."""
    result = args.remote.drain_node(args.node, from_last_snapshot=args.from_last_snapshot,
                                    timeout=args.timeout, on_line=cmd_nodes.print_line)
    return result.exit_code
