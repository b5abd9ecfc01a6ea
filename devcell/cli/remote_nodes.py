"""`node cordon` and `node uncordon` through a server (cli/remote.py): POST
/api/v1/nodes/NAME/cordon|uncordon (an admin's), said as on the server's machine. `get nodes`
reads GET /api/v1/nodes in cmd_nodes itself; `node drain` is not served: it moves cells for
minutes and is run on the manager that holds the state directory."""

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
