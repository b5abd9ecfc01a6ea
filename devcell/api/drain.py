"""`devcell node drain NODE`: move every cell whose workspace is on NODE to other nodes, then
set NODE's availability to drain (docs/cluster.md, "Draining a node").

Each cell's move is recorded on it as desired state (a restore request with `away_from`,
devcell.store.restores) and carried out by the cell controller as one operation: `stop`,
`checkpoint` (a snapshot of the stopped cell, recorded Ready, named `<cell>-move-<time>`),
`restore-workspace` (the swarm backend's move_workspace: the checkpoint pushed from NODE to
the cluster's registry, pulled into a new volume on the node the swarm picks, the workspace's
record switched to it), `start` on the new node, where the old workspace is emptied once the
cell runs. Until the switch the cell and its workspace are whole on NODE; a kill at any point
leaves the request recorded, and a rerun (of this command, or the daemon's next pass) plans
the rest again from what is observed: the same snapshot, the push recorded, the pull pinned
to the node the swarm chose.

A lost node (not Ready) only with `from_last_snapshot`: each cell's request then names its
newest snapshot in the registry and no checkpoint of its own (nothing can run on the node),
and what the cell wrote since that snapshot is lost with the node, as the command says.

NODE's availability becomes `drain` only once no cell's workspace is left there: before, the
jobs that checkpoint and push must still run there (the swarm starts no task on a drained or
paused node, facts), and draining the engine's tasks would stop cells whose workspaces are
only there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import ids, names
from devcell.api import converging, nodes
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.errors import UsageError
from devcell.store import db as dbmod
from devcell.store import objects, restores
from devcell.store.desired import Change

KIND = "Cell"
SUFFIX = "-move-"


@dataclass
class Drained:
    node: str
    moved: list[tuple[str, str]] = field(default_factory=list)
    """(cell, the node it is on now)."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    """(cell, why): still on the node."""
    from_snapshots: list[tuple[str, str, str]] = field(default_factory=list)
    """(cell, snapshot, taken at): a lost node's cells, moved from these (what they wrote
    since is lost)."""
    drained: bool = False
    """Whether the node's availability is drain now (no workspace left there)."""
    report: Report | None = None


def _on_node(state_dir: Path, node_id: str) -> set[str]:
    """The cells whose workspace is recorded on `node_id`, or whose old workspace a move
    left there (emptied once the cell ran on its new node)."""
    from devcell.backends.container.swarm_cells import Volumes

    return {str(r.get("cell_id")) for _, r in Volumes(state_dir).all() if r.get("cell_id") and (
        (r.get("node") == node_id and r.get("filled") is not False)
        or _previous_node(r) == node_id)}


def _previous_node(record: dict[str, Any]) -> str | None:
    """The node of the old workspace a move left (a restore's `previous` is only a volume
    name on the workspace's own node)."""
    previous = record.get("previous")
    return str(previous.get("node")) if isinstance(previous, dict) else None


def _recorded_on(state_dir: Path, node_id: str) -> set[str]:
    """The cells whose workspace is still recorded on `node_id` (a lost node: the old
    workspaces moves left there cannot be emptied until it is back)."""
    from devcell.backends.container.swarm_cells import Volumes

    return {str(r.get("cell_id")) for _, r in Volumes(state_dir).all()
            if r.get("cell_id") and r.get("node") == node_id}


def _moving(conn: Any, node_id: str) -> set[str]:
    """The cells with a move off `node_id` still pending (one a kill interrupted)."""
    return {str(key[1]) for key in restores.pending_keys(conn)
            if (cell := objects.get(conn, KIND, str(key[1]))) is not None
            and (restores.of(cell) or restores.Request("", "", None, None, "")).away_from
            == node_id}


def _last_pushed(conn: Any, state_dir: Path, cell_id: str, registry: str | None
                 ) -> tuple[str, str, str] | None:
    """(id, name, taken at) of the cell's newest Ready snapshot whose checkpoint is in
    `registry` (pushed when taken, or by an earlier move): what a lost node's cell moves from."""
    from devcell.backends.container.swarm_cells import Volumes

    if registry is None:
        return None
    records = Volumes(state_dir, "checkpoints")
    for snap_id, name, taken in conn.execute(
            "SELECT id, name, taken_at FROM snapshots WHERE cell_id = ? AND checkpoint_ref IS "
            "NOT NULL AND deleted_at IS NULL ORDER BY taken_at DESC", (cell_id,)):
        pushed = (records.read(str(snap_id)) or {}).get("pushed") or {}
        if pushed.get("registry") == registry:
            return str(snap_id), str(name), str(taken)
    return None


def _wait_for_daemon(db: dbmod.Database, cell_ids: list[str], timeout: float) -> None:
    """A daemon holds the lease and moves the cells: wait until each move is done or failed
    (its request cleared), or `timeout`. Converging's own wait reads the cells' Ready
    condition, which a move recorded on a running cell leaves True until the daemon takes it
    up: a drain run beside a daemon (and every drain served by one, server/drains.py) said
    "not moved yet" at once while the daemon was moving the cells."""
    from devcell.api import restore

    deadline = time.monotonic() + timeout
    waiting = list(cell_ids)
    while True:
        waiting = [c for c in waiting if not restore.carried_out(db, c, approve=False)]
        if not waiting or time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def _move_name(cell: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    stem = cell[:names.MAX_NAME_LENGTH - len(SUFFIX) - len(stamp)].rstrip("-")
    return f"{stem}{SUFFIX}{stamp}"


@dataclass(frozen=True)
class Target:
    """The node a drain moves cells off, checked (target()): its id, whether it is lost (not
    Ready), and the cluster's registry."""

    id: str
    lost: bool
    registry: str | None


def target(state_dir: Path, name: str, *, from_last_snapshot: bool = False,
           where: str | None = None) -> Target:
    """Node `name` checked for a drain before anything is recorded (a server answers these
    refusals before its stream begins): a cluster configured, the node found, not cordoned,
    and lost only with `from_last_snapshot`. `where`: how an error names the cluster's
    setting (None: its file's path; the API's, nodes.SERVER_SETTING)."""
    from devcell.store import guard

    guard.database_exists(state_dir)
    settings = nodes.cluster(state_dir)
    if settings is None:
        raise UsageError(f"no cluster is configured ({nodes.setting(state_dir, where)}): a "
                         "single host has no other node to move its cells to; see "
                         "docs/cluster.md")
    node = nodes.find(nodes.list_nodes(state_dir, where=where), name)
    lost = node.state != "ready"
    if node.availability == "pause" and not lost:
        raise UsageError(f"node {node.id} is cordoned: the jobs that checkpoint and push its "
                         f"cells must run there; `devcell node uncordon {node.id}` first")
    if lost and not from_last_snapshot:
        raise UsageError(f"node {node.id} is {node.state}: its cells cannot be checkpointed "
                         "there; `devcell node drain NODE --from-last-snapshot` moves each "
                         "from its newest snapshot in cluster.registry, losing what it wrote "
                         "since (or wait for the node to come back)")
    return Target(node.id, lost, settings.registry)


def drain(state_dir: Path, name: str, *, from_last_snapshot: bool = False,
          options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Drained:
    """Move the cells off node `name`, then drain it. A node that is not Ready (lost) only
    with `from_last_snapshot`: each cell then moves from its newest snapshot in the
    registry, and what it wrote since that snapshot is lost (the request says so)."""
    return move(state_dir, target(state_dir, name, from_last_snapshot=from_last_snapshot),
                options=options, hooks=hooks)


def move(state_dir: Path, node: Target, *, options: Options = DEFAULTS,
         hooks: Hooks = NO_HOOKS) -> Drained:
    """The drain of a node target() checked: each cell's move recorded and converged (by the
    daemon, when one holds the lease), then the node drained once none is left on it."""
    lost, registry = node.lost, node.registry
    result = Drained(node.id)
    db = dbmod.open_database(state_dir)
    try:
        here = _on_node(state_dir, node.id) | _moving(db.conn, node.id)
        changes: list[Change] = []
        with db.write() as conn:
            for cell_id in sorted(here):
                cell = objects.get(conn, KIND, cell_id)
                if cell is None or cell.deleting:
                    continue
                pending = restores.of(cell)
                if pending is not None and pending.away_from != node.id:
                    result.failed.append((cell.name, f"a restore of snapshot {pending.snapshot} "
                                                     "is pending; finish or cancel it first"))
                    continue
                if pending is None and lost:
                    last = _last_pushed(conn, state_dir, cell.id, registry)
                    if last is None:
                        result.failed.append((cell.name, "no snapshot of it is in "
                                              f"{registry or 'a registry (no cluster.registry)'}"
                                              f"; its files are only on node {node.id}"))
                        continue
                    restores.record(conn, cell, restores.new_request(
                        snapshot_id=last[0], snapshot=last[1], safety_id=None, safety=None,
                        away_from=node.id))
                    result.from_snapshots.append((cell.name, last[1], last[2]))
                elif pending is None:
                    snapshot_id, snapshot = ids.new_id("snap"), _move_name(cell.name)
                    restores.record(conn, cell, restores.new_request(
                        snapshot_id=snapshot_id, snapshot=snapshot, safety_id=snapshot_id,
                        safety=snapshot, away_from=node.id))
                changes.append(Change(KIND, cell.name, f"moving off node {node.id}", cell.id,
                                      needs_reconcile=True))
        if changes:
            result.report = converging.finish(db, Recorded(tuple(changes)), trigger="cli",
                                              options=options, hooks=hooks,
                                              keys=[(KIND, c.object_id) for c in changes
                                                    if c.object_id])
            if result.report.converged.holder is not None and options.wait:
                _wait_for_daemon(db, [str(c.object_id) for c in changes], options.timeout)
        left = (_recorded_on(state_dir, node.id) if lost else _on_node(state_dir, node.id)) \
            | _moving(db.conn, node.id)
        for change in changes:
            cell = objects.get(db.conn, KIND, str(change.object_id))
            if cell is None:
                continue
            if change.object_id in left:
                move = cell.status.get("move") or {}
                why = str(move.get("failed") or "not moved yet (its operation did not finish)")
                result.failed.append((cell.name, why))
            else:
                from devcell.backends.container.swarm_cells import Volumes

                record = next((r for _, r in Volumes(state_dir).all()
                               if r.get("cell_id") == cell.id), {})
                result.moved.append((cell.name, str(record.get("node") or "?")))
    finally:
        db.close()
    if not result.failed and not left:
        nodes.set_availability(state_dir, node.id, "drain")
        result.drained = True
    return result


def said(result: Drained) -> tuple[list[tuple[str, str]], int]:
    """What `devcell node drain` prints of `result`, a (stream, line) each (stdout or
    stderr, escaped), and its exit status: the command on the state directory and a server's
    stream (server.drains) say the same lines."""
    out: list[tuple[str, str]] = []
    for cell, snapshot, taken in result.from_snapshots:
        out.append(("stdout", f"cell/{cell} moving from snapshot/{snapshot} (taken {taken}; "
                              f"what it wrote since is lost with node {result.node})"))
    out += [("stdout", f"cell/{cell} moved to node {node}") for cell, node in result.moved]
    out += [("stderr", f"error: cell/{cell} is still on node {result.node}: {why}")
            for cell, why in result.failed]
    if result.drained:
        out.append(("stdout", f"node/{result.node} drained"))
    else:
        out.append(("stderr", f"error: node/{result.node} not drained: cells are left on it; "
                              "run `devcell node drain` again"))
    return [(stream, names.printable(line)) for stream, line in out], \
        0 if result.drained else 1
