"""The machines cells run on: `devcell get nodes`, `devcell node cordon/uncordon`.

With a cluster configured (`cluster.engine`, docs/cluster.md) the nodes are the swarm's, as
its manager's engine reports them, and DevCell's cells on each are found by the labels of
their services' tasks. Without one, DevCell is single-host: one node, this machine, running
every cell the state directory records. Cordon and uncordon are the engine's availability
(pause, active): DevCell keeps no node state of its own, only an event of each change.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import config
from devcell.errors import BackendError, NotFound, UsageError
from devcell.names import printable

LOCAL_ID = "local"
MAX_FIGURE = 1 << 63
"""A served node's largest figure (bytes, cpus, tasks): past it (or Infinity, NaN) a hostile
server's answer made int() or the table's sizes raise OverflowError, a traceback."""
CELL_LABEL = "dev.devcell.cell"  # the container backend's label naming a cell (labels.CELL)


@dataclass(frozen=True)
class Node:
    """One machine, as `get nodes` shows it."""

    name: str
    """Its hostname (several nodes of one test machine share one; the id tells them apart)."""
    id: str
    role: str
    """manager, worker, or local (single-host)."""
    availability: str
    """active, pause (cordoned) or drain: whether the scheduler places tasks there."""
    state: str
    """The engine's word for the node: ready, down, unknown, disconnected."""
    address: str | None
    """None: the single host (it is not reached through an address)."""
    leader: bool = False
    message: str = ""
    engine: str = ""
    created: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cpus: float | None = None
    memory_bytes: int | None = None
    reserved_cpus: float = 0.0
    reserved_memory_bytes: int = 0
    tasks: int = 0
    """Tasks of any service the swarm runs there (-1: not known, single-host)."""
    cells: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        """The node as `get nodes -o json|yaml` prints it (kubectl's shape)."""
        return {
            "apiVersion": "devcell.dev/v1alpha1", "kind": "Node",
            "metadata": {"name": self.name, "id": self.id, "labels": dict(self.labels),
                         "creationTimestamp": self.created},
            "spec": {"role": self.role, "availability": self.availability},
            "status": {
                "state": self.state, "message": self.message, "address": self.address,
                "leader": self.leader, "engineVersion": self.engine or None,
                "capacity": {"cpus": self.cpus, "memoryBytes": self.memory_bytes},
                # single-host: nothing reserves (no scheduler), so no figure, not a zero
                "reserved": None if self.tasks < 0 else {
                    "cpus": self.reserved_cpus, "memoryBytes": self.reserved_memory_bytes},
                "tasks": None if self.tasks < 0 else self.tasks,
                "cells": list(self.cells),
            },
        }


def from_document(doc: Any) -> Node:
    """The node a document of `Node.document()` describes (a server's answer to `get nodes`,
    read by the CLI's remote mode to print the same table); ValueError when it is not one."""
    def text(value: Any, what: str, *, optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise ValueError(f"a node's {what} is not text")
        return value

    def number(value: Any, what: str) -> Any:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"a node's {what} is not a number")
        if abs(value) > MAX_FIGURE or not math.isfinite(value):  # JSON's Infinity, 1e400
            raise ValueError(f"a node's {what} is not a finite number of at most 2**63")
        return value

    if not isinstance(doc, dict) or doc.get("kind") != "Node":
        raise ValueError("not a Node document")
    meta, spec, status = (doc.get(k) for k in ("metadata", "spec", "status"))
    if not (isinstance(meta, dict) and isinstance(spec, dict) and isinstance(status, dict)):
        raise ValueError("a Node without metadata, spec and status")
    labels = meta.get("labels") or {}
    capacity = status.get("capacity") or {}
    reserved = status.get("reserved")
    cells = status.get("cells") or []
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise ValueError("a node's labels are not text")
    if not isinstance(capacity, dict) or not (reserved is None or isinstance(reserved, dict)):
        raise ValueError("a node's capacity is not an object")
    if not isinstance(cells, list) or not all(isinstance(c, str) for c in cells):
        raise ValueError("a node's cells are not names")
    tasks = number(status.get("tasks"), "tasks")
    memory = number(capacity.get("memoryBytes"), "memory")
    return Node(
        name=text(meta.get("name"), "name"), id=text(meta.get("id"), "id"),
        role=text(spec.get("role"), "role"),
        availability=text(spec.get("availability"), "availability"),
        state=text(status.get("state"), "state"),
        address=text(status.get("address"), "address", optional=True),
        leader=status.get("leader") is True,
        message=text(status.get("message") or "", "message"),
        engine=text(status.get("engineVersion") or "", "engine version"),
        created=text(meta.get("creationTimestamp"), "creation time", optional=True),
        labels=dict(labels), cpus=number(capacity.get("cpus"), "cpus"),
        memory_bytes=None if memory is None else int(memory),
        reserved_cpus=float(number((reserved or {}).get("cpus"), "reserved cpus") or 0),
        reserved_memory_bytes=int(number((reserved or {}).get("memoryBytes"),
                                         "reserved memory") or 0),
        tasks=-1 if tasks is None else int(tasks), cells=tuple(cells))


def cluster(state_dir: Path) -> config.ClusterSettings | None:
    """The configured cluster, or None: single-host."""
    return config.load(state_dir).cluster


SERVER_SETTING = "cluster.engine in the server's configuration"
"""How the API names the setting to a caller elsewhere: its path is the server's, of no use
to a remote admin and not for them to learn (final43, F8)."""


def setting(state_dir: Path, where: str | None) -> str:
    """The setting an error names: `where`, or cluster.engine in this state directory's
    configuration file (the CLI on the machine itself)."""
    return where or f"cluster.engine in {config.config_path(state_dir)}"


def _manager(state_dir: Path, settings: config.ClusterSettings, where: str | None) -> Any:
    from devcell.backends.container.cluster import Manager

    return Manager(settings.socket, setting(state_dir, where))


def list_nodes(state_dir: Path, *, where: str | None = None) -> list[Node]:
    """Every node: the swarm's (by hostname, then id), or this machine alone. `where`: how
    an error names the cluster's setting (None: its file's path)."""
    settings = cluster(state_dir)
    if settings is None:
        return [_local(state_dir)]
    manager = _manager(state_dir, settings, where)
    raw = manager.nodes()
    services = manager.services_of_state(state_dir)
    tasks = manager.tasks()
    nodes = [_read(n, tasks, services) for n in raw]
    return sorted(nodes, key=lambda n: (n.name, n.id))


def _local(state_dir: Path) -> Node:
    """This machine as the one node of a single-host state directory: every recorded cell
    is here; its capacity is the kernel's."""
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    return Node(name=os.uname().nodename, id=LOCAL_ID, role="local", availability="active",
                state="ready", address=None, cpus=float(os.cpu_count() or 0) or None,
                memory_bytes=memory, tasks=-1, cells=tuple(_recorded_cells(state_dir)))


def _recorded_cells(state_dir: Path) -> list[str]:
    from devcell.store import guard, views
    from devcell.store.db import Database

    if not guard.database_exists(state_dir):
        return []
    db = Database(state_dir, create=False)
    try:
        return [str(r["name"]) for r in views.cells_table(db.conn)]
    finally:
        db.close()


def _read(raw: dict[str, Any], tasks: list[dict[str, Any]],
          services: dict[str, dict[str, str]]) -> Node:
    """A node as `_from_engine` reads it, or an error naming it when the engine describes
    it (or its tasks) in shapes the Engine API does not give: a faulty or hostile manager
    is a clear error, not a traceback."""
    try:
        return _from_engine(raw, tasks, services)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise BackendError(f"listing the swarm's nodes: the swarm manager's engine describes "
                           f"node {printable(str(raw.get('ID'))[:80])} in a shape DevCell "
                           f"does not read ({printable(str(exc)[:200])})") from None


def _from_engine(raw: dict[str, Any], tasks: list[dict[str, Any]],
                 services: dict[str, dict[str, str]]) -> Node:
    spec = raw.get("Spec") or {}
    description = raw.get("Description") or {}
    status = raw.get("Status") or {}
    manager = raw.get("ManagerStatus") or {}
    resources = description.get("Resources") or {}
    node_id = str(raw.get("ID") or "")
    here = [t for t in tasks if t.get("NodeID") == node_id]
    reserved_cpus, reserved_memory = 0.0, 0
    for task in here:
        reservations = ((task.get("Spec") or {}).get("Resources") or {}).get("Reservations") or {}
        reserved_cpus += float(reservations.get("NanoCPUs") or 0) / 1e9
        reserved_memory += int(reservations.get("MemoryBytes") or 0)
    cells = sorted({str(services[t["ServiceID"]].get(CELL_LABEL) or t["ServiceID"])
                    for t in here if t.get("ServiceID") in services})
    nano = resources.get("NanoCPUs")
    role = str(spec.get("Role") or "worker")
    return Node(
        name=str(description.get("Hostname") or node_id), id=node_id, role=role,
        availability=str(spec.get("Availability") or "active"),
        state=str(status.get("State") or "unknown"), message=str(status.get("Message") or ""),
        # A manager's own address is the one it listens on; a worker's is the address its
        # connection came from (docs/cluster.md, "Facts").
        address=str(manager.get("Addr") or status.get("Addr") or ""),
        leader=bool(manager.get("Leader")),
        engine=str((description.get("Engine") or {}).get("EngineVersion") or ""),
        created=raw.get("CreatedAt"), labels=dict(spec.get("Labels") or {}),
        cpus=None if nano is None else float(nano) / 1e9,
        memory_bytes=resources.get("MemoryBytes"),
        reserved_cpus=reserved_cpus, reserved_memory_bytes=reserved_memory,
        tasks=len(here), cells=tuple(cells))


def find(nodes: list[Node], name: str) -> Node:
    """The node `name` means: its id, its unique hostname, or a unique prefix of its id (as
    the docker CLI takes)."""
    for node in nodes:
        if node.id == name:
            return node
    named = [n for n in nodes if n.name == name]
    if len(named) > 1:
        raise UsageError(f'"{printable(name)}" is the hostname of {len(named)} nodes '
                         f'({", ".join(n.id for n in named)}): give a node id')
    if named:
        return named[0]
    prefixed = [n for n in nodes if name and n.id.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    raise NotFound(f'node "{printable(name)}" not found'
                   + (" (an id prefix of several nodes)" if prefixed else ""))


def set_availability(state_dir: Path, name: str, availability: str, *,
                     where: str | None = None) -> tuple[Node, bool]:
    """Set node `name`'s availability on the swarm; the node after, and whether it changed.
    Single-host there is nothing to set: refused, naming the configuration (`where`, as
    list_nodes). A lost database is refused before the engine is asked: the change could
    not be recorded."""
    from devcell.store import guard

    guard.database_exists(state_dir)
    settings = cluster(state_dir)
    if settings is None:
        raise UsageError(f"no cluster is configured ({setting(state_dir, where)}): a single "
                         "host has no scheduler to keep cells off it; see docs/cluster.md")
    node = find(list_nodes(state_dir, where=where), name)
    if node.availability == availability:
        return node, False
    manager = _manager(state_dir, settings, where)
    manager.set_availability(node.id, availability)
    _record(state_dir, node, availability)
    return find(list_nodes(state_dir, where=where), node.id), True


REASONS = {"pause": "NodeCordoned", "active": "NodeUncordoned", "drain": "NodeDrained"}


def _record(state_dir: Path, node: Node, availability: str) -> None:
    """An event on the control plane (`get events`): who changed a node's availability, and
    from what (the engine keeps no such history)."""
    from devcell.store import events
    from devcell.store.db import open_database

    db = open_database(state_dir)
    try:
        with db.write() as conn:
            events.record(conn, kind="Node", object_id=node.id, name=node.name,
                          reason=REASONS[availability],
                          message=f"node {node.id} ({node.name}): availability "
                                  f"{node.availability} -> {availability}")
    finally:
        db.close()
