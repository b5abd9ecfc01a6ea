"""The API's route table: one entry per (method, path), read by the app (which serves it) and
by the OpenAPI document (which describes it), so the two cannot disagree.

Resources are named as the CLI names them (`devcell get cells` is GET /api/v1/cells);
their records are `devcell get -o json`'s (api.listing).
"""

from __future__ import annotations

from typing import NamedTuple

PREFIX = "/api/v1"


class Resource(NamedTuple):
    plural: str
    """As the CLI names it: cells, snapshots, operations, events."""
    kind: str
    """The record's kind (Cell, Snapshot, Operation, Event)."""
    labeled: bool
    """Has labels: a labelSelector applies."""
    deletable: bool
    """DELETE removes it (the desired objects: cells and snapshots)."""
    gettable: bool = True
    """GET one by name or id (events have none: `get events NAME` lists an object's, which
    the list's `for` parameter does)."""


RESOURCES = {r.plural: r for r in (
    Resource("cells", "Cell", labeled=True, deletable=True),
    Resource("snapshots", "Snapshot", labeled=True, deletable=True),
    Resource("operations", "Operation", labeled=False, deletable=False),
    Resource("events", "Event", labeled=False, deletable=False, gettable=False),
)}


ROWS_ONLY = {r.plural: r for r in (
    Resource("volumes", "Volume", labeled=False, deletable=False, gettable=False),
    Resource("controllers", "Controller", labeled=False, deletable=False, gettable=False),
)}
"""Kinds served as `devcell get` rows alone (GET /api/v1/rows/KIND): what the backends and
the daemon record beside the objects, with no documents of their own to list or watch."""
NODES = Resource("nodes", "Node", labeled=True, deletable=False)
"""The machines cells run on (`devcell get nodes`): the engine's, read afresh by each request
(api.nodes), so not one of RESOURCES, the control plane's records (no rows, watch or
versions)."""
NODE_ACTIONS = {
    "cordon": "Keep new cells off a node (as `devcell node cordon`: the engine's availability "
              "pause); an admin's",
    "uncordon": "Let cells be placed on a node again (as `devcell node uncordon`); an admin's",
}


class Route(NamedTuple):
    method: str
    path: str
    name: str
    """The handler's name (app) and the OpenAPI operationId."""
    verb: str
    """What authorization is asked for: list, get, watch (with list), create, delete, or an
    action on one cell (ACTIONS), or restore (a snapshot into its cell), export (a snapshot's
    archive; an import is a create); resume and cancel (a
    suspended operation) are judged by what the operation does to its object
    (server/op_actions.py); cordon, uncordon and drain (a node) as an update of it."""
    resource: Resource | None
    summary: str
    upgrade: bool = False
    """A WebSocket (exec, portforward): a plain request is answered 426, an upgrade served as a stream."""


ACTIONS = {
    "sleep": "Checkpoint the cell's workspace, then put it to sleep (as `devcell cell sleep`)",
    "start": "Start a stopped or sleeping cell (as `devcell cell start`)",
    "snapshot": "Take a snapshot of the cell, named as the body says (as `devcell snapshot "
                "create`)",
    "fork": "Make a new cell from a snapshot of this one (as `devcell cell fork`)",
    "restart": "Restart a running cell's services, or the one the body names (as `devcell "
               "cell restart`)",
    "rerun-hooks": "Run a running cell's postCreate hooks again, then postStart (as `devcell "
                   "cell rerun-hooks`)",
}
"""The actions on one cell (POST /api/v1/cells/NAME/ACTION), each the CLI verb's library call
and authorized as the policy's verb of the same name."""
BODY_ACTIONS = frozenset({"snapshot", "fork", "restart"})
"""The actions that take a JSON body (the snapshot's or the fork's name, ...)."""
OPTIONAL_BODY_ACTIONS = frozenset({"restart"})
"""Of those, the ones whose body may be left out (restart: all the cell's services)."""


def table() -> list[Route]:
    routes = [Route("GET", f"{PREFIX}/openapi.json", "openapi", "get", None,
                    "This API's OpenAPI document"),
              Route("POST", f"{PREFIX}/apply", "apply", "create", None,
                    "Record a manifest stream as desired state (server-side apply)"),
              Route("POST", f"{PREFIX}/operations/{{name}}/resume", "resume_operation",
                    "resume", RESOURCES["operations"],
                    "Approve a suspended operation with its input, then continue it (as "
                    "`devcell op resume`)"),
              Route("POST", f"{PREFIX}/operations/{{name}}/cancel", "cancel_operation",
                    "cancel", RESOURCES["operations"],
                    "Cancel a suspended operation (as `devcell op cancel`): a cancelled delete "
                    "keeps its object, a cancelled restore the workspace as it is"),
              Route("GET", f"{PREFIX}/ssh/host-key", "ssh_host_key", "get", None,
                    "The SSH host key the cells' SSH streams answer with (what `devcell "
                    "ssh-config` pins in known_hosts)"),
              Route("POST", f"{PREFIX}/diff", "diff", "get", None,
                    "What an apply of a manifest stream would change, as unified diffs (as "
                    "`devcell diff -f`); nothing is recorded")]
    routes.append(Route("GET", f"{PREFIX}/df", "df", "get", None,
                        "What the state directory takes on disk and what could be freed, by "
                        "type (as `devcell df`; verbose=true: each item, as -v)"))
    routes.append(Route("GET", f"{PREFIX}/lineage", "lineage", "list", RESOURCES["snapshots"],
                        "Which cell each snapshot came from and which cells were forked from "
                        "it: the rows `devcell get snapshots --tree` draws"))
    routes += [Route("GET", f"{PREFIX}/tokens", "list_tokens", "token_admin", None,
                     "The tokens: id, user, role, state (never a token itself; as `devcell "
                     "token list`); an admin's"),
               Route("POST", f"{PREFIX}/tokens", "create_token", "token_admin", None,
                     "Make a token for a user and role (as `devcell token create`): in this "
                     "answer once, nowhere else; an admin's"),
               Route("DELETE", f"{PREFIX}/tokens/{{name}}", "revoke_token", "token_admin", None,
                     "Revoke a token by its id (as `devcell token revoke`): it fails from its "
                     "next use; an admin's")]
    routes += [Route("POST", f"{PREFIX}/gc", "gc", "gc", None,
                     "Remove the volumes and checkpoints nothing references, in every backend "
                     "(as `devcell gc`; dryRun=true: what it would remove); an admin's"),
               Route("GET", f"{PREFIX}/images", "list_images", "get", None,
                     "The images DevCell pulled or built for this state directory, as the "
                     "engine holds them now (as `devcell image ls -o json`)"),
               Route("POST", f"{PREFIX}/images/prune", "prune_images", "image_admin", None,
                     "Remove the images DevCell pulled or built that nothing uses (as "
                     "`devcell image prune`); an admin's, its dryRun=true every role's"),
               Route("POST", f"{PREFIX}/images/build-base", "build_base_image", "image_admin",
                     None, "Build the offline base image, and on a machine with QEMU its vm "
                     "root disk (as `devcell image build-base`; minutes, one at a time); an "
                     "admin's")]
    routes += [Route("GET", f"{PREFIX}/nodes", "list_nodes", "list", NODES,
                     "List the nodes cells run on, as the engine reports them now"),
               Route("GET", f"{PREFIX}/nodes/{{name}}", "get_nodes", "get", NODES,
                     "One node, by id, unique hostname or unique id prefix")]
    routes += [Route("POST", f"{PREFIX}/nodes/{{name}}/{action}", f"{action}_node", action,
                     NODES, summary) for action, summary in NODE_ACTIONS.items()]
    routes.append(Route("POST", f"{PREFIX}/nodes/{{name}}/drain", "drain_node", "drain", NODES,
                        "Move every cell off a node, then drain it (as `devcell node drain`): "
                        "its lines streamed as JSON lines, then its exit status; an admin's"))
    routes += [Route("GET", f"{PREFIX}/rows/{r.plural}", f"rows_{r.plural}", "list", r,
                     f"The table rows `devcell get {r.plural}` prints (the CLI's remote mode)")
               for r in ROWS_ONLY.values()]
    # before snapshots/{name}: a method these paths lack is refused naming theirs (Allow),
    # while GET and DELETE of a snapshot named "import" or "pull" still reach {name}
    routes.append(Route("POST", f"{PREFIX}/snapshots/import", "import_snapshot", "create",
                        RESOURCES["snapshots"],
                        "Bring a snapshot archive in as a Ready snapshot, checked as `devcell "
                        "snapshot import` checks it, recorded in the caller's name"))
    routes.append(Route("POST", f"{PREFIX}/snapshots/pull", "pull_snapshot", "registry",
                        RESOURCES["snapshots"],
                        "Pull a snapshot from a registry with the server's own logins (as "
                        "`devcell snapshot pull`); an admin's"))
    for r in RESOURCES.values():
        routes.append(Route("GET", f"{PREFIX}/{r.plural}", f"list_{r.plural}", "list", r,
                            f"List {r.plural} (watch=true: follow their changes)"))
        routes.append(Route("GET", f"{PREFIX}/rows/{r.plural}", f"rows_{r.plural}", "list", r,
                            f"The table rows `devcell get {r.plural}` prints (the CLI's "
                            "remote mode)"))
        if r.gettable:
            routes.append(Route("GET", f"{PREFIX}/{r.plural}/{{name}}", f"get_{r.plural}",
                                "get", r, f"One of the {r.plural}, by name or id"))
        if r.gettable and r.plural != "events":
            routes.append(Route("GET", f"{PREFIX}/{r.plural}/{{name}}/describe",
                                f"describe_{r.plural}", "get", r,
                                f"One of the {r.plural} as `devcell describe` prints it "
                                "(text: its lineage, operations and events)"))
        if r.deletable:
            routes.append(Route("DELETE", f"{PREFIX}/{r.plural}/{{name}}",
                                f"delete_{r.plural}", "delete", r,
                                f"Ask for one of the {r.plural}' deletion"))
    cells = RESOURCES["cells"]
    for action, summary in ACTIONS.items():
        routes.append(Route("POST", f"{PREFIX}/cells/{{name}}/{action}",
                            f"{action.replace('-', '_')}_cell",
                            action, cells, summary))
    routes.append(Route("POST", f"{PREFIX}/snapshots/{{name}}/restore", "restore_snapshot",
                        "restore", RESOURCES["snapshots"],
                        "Roll a cell's workspace back to this snapshot, in place (as `devcell "
                        "snapshot restore`)"))
    routes.append(Route("GET", f"{PREFIX}/snapshots/{{name}}/archive", "export_snapshot",
                        "export", RESOURCES["snapshots"],
                        "The snapshot's archive, streamed: the bytes `devcell snapshot export` "
                        "writes (a developer: their own cells' and those shared with them)"))
    routes.append(Route("POST", f"{PREFIX}/snapshots/{{name}}/push", "push_snapshot",
                        "registry", RESOURCES["snapshots"],
                        "Push the snapshot to a registry with the server's own logins (as "
                        "`devcell snapshot push`); an admin's"))
    routes.append(Route("GET", f"{PREFIX}/cells/{{name}}/exec", "exec_cell", "exec", cells,
                        "Run a command in the cell: a WebSocket (see docs/api.md for its "
                        "framing)", upgrade=True))
    routes.append(Route("GET", f"{PREFIX}/cells/{{name}}/portforward", "portforward_cell",
                        "port_forward", cells, "One TCP connection to a port the cell "
                        "listens on, as `devcell port-forward` makes it: a WebSocket (see "
                        "docs/api.md for its framing)", upgrade=True))
    routes.append(Route("GET", f"{PREFIX}/cells/{{name}}/ssh", "ssh_cell", "ssh", cells,
                        "One SSH connection to the cell's SSH server, as `devcell ssh-proxy` "
                        "serves it: a WebSocket (see docs/api.md)", upgrade=True))
    routes.append(Route("GET", f"{PREFIX}/cells/{{name}}/logs", "logs_cell", "logs", cells,
                        "The cell's service logs, as `devcell logs` prints them (follow=true: "
                        "as they grow)"))
    return routes
