"""GET /api/v1/nodes, GET /api/v1/nodes/NAME and POST /api/v1/nodes/NAME/cordon|uncordon:
`devcell get nodes` and `devcell node cordon|uncordon` through the API.

Nodes are the engine's (api.nodes: the swarm's, or this machine alone), read afresh by each
request, so a list has no resourceVersion and no watch: the control plane keeps no node
records, only an event of each availability change. A node belongs to no developer: every
role may read them (rule `read`), only an admin changes one (rule `node-admin`). The engine
is asked on a worker thread: a manager that answers slowly holds that request alone. An
error names the cluster's setting without the server's path (nodes.SERVER_SETTING).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell.api import nodes

API_VERSION = "devcell.dev/v1alpha1"


def listed(state_dir: Path, selector: Any) -> dict[str, Any]:
    """Every node (those whose labels `selector` matches, when given), as `get nodes -o
    json` lists them."""
    found = [n for n in nodes.list_nodes(state_dir, where=nodes.SERVER_SETTING)
             if selector is None or selector.matches(n.labels)]
    return {"apiVersion": API_VERSION, "kind": "List",
            "items": [n.document() for n in found], "metadata": {}}


def one(state_dir: Path, name: str) -> dict[str, Any]:
    """The node `name` means (its id, unique hostname or unique id prefix); NotFound."""
    return nodes.find(nodes.list_nodes(state_dir, where=nodes.SERVER_SETTING), name).document()


def act(state_dir: Path, principal: Any, name: str, action: str) -> dict[str, Any]:
    """Cordon or uncordon node `name` once `principal` may (an admin): the node after, and
    whether its availability changed (the event is recorded in the caller's name)."""
    from devcell.auth import policy
    from devcell.store import actor

    policy.require(principal, policy.Verb.update, policy.ResourceRef("Node", name))
    availability = {"cordon": "pause", "uncordon": "active"}[action]
    with actor.acting_as(principal.user):
        node, changed = nodes.set_availability(state_dir, name, availability,
                                               where=nodes.SERVER_SETTING)
    return {"node": node.document(), "changed": changed}
