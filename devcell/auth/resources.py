"""The resource a verb acts on, as the policy sees it, from what the store recorded.

A cell is its owner's and shared with the users its spec.sharedWith names; a snapshot is
its cell's (its owner may snapshot, fork from and delete it; a snapshot whose cell is gone,
or one imported without a cell here, belongs to no developer). Other kinds (operations,
events, nodes) have no owner: every role reads them, only an admin changes them.
"""

from __future__ import annotations

import sqlite3

from devcell.auth.policy import ResourceRef
from devcell.manifests.model import Manifest
from devcell.store import objects


def _cell(kind: str, name: str, record: objects.ObjectRecord) -> ResourceRef:
    owner = record.extra.get("owner")
    shared = record.spec.get("sharedWith")
    users = tuple(u for u in shared if isinstance(u, str)) if isinstance(shared, list) else ()
    return ResourceRef(kind, name, owner if isinstance(owner, str) else None, users)


def recorded(conn: sqlite3.Connection, kind: str, ref: str) -> ResourceRef:
    """The recorded object `ref` (a name or an id) of `kind` as a resource; an object not
    recorded is ownerless (the caller says it is not found)."""
    if kind == "Cell":
        cell = objects.get(conn, "Cell", ref)
        return _cell(kind, cell.name, cell) if cell is not None else ResourceRef(kind, ref)
    if kind == "Snapshot":
        snapshot = objects.get(conn, "Snapshot", ref)
        if snapshot is None:
            return ResourceRef(kind, ref)
        cell_id = snapshot.extra.get("cell_id")
        cell = objects.get(conn, "Cell", cell_id) if isinstance(cell_id, str) else None
        return _cell(kind, snapshot.name, cell) if cell is not None \
            else ResourceRef(kind, snapshot.name)
    return ResourceRef(kind, ref)


def to_create(user: str, manifest: Manifest) -> ResourceRef:
    """A cell a manifest would create for `user`: owned by the owner it names, else by
    `user` (policy's developer-creates-own refuses a developer naming another). A Snapshot
    manifest is the `snapshot` verb on its cell: `recorded(conn, "Cell", spec.cell)`."""
    shared = manifest.spec.get("sharedWith") or []
    return ResourceRef(manifest.kind, manifest.name, manifest.owner or user,
                       tuple(u for u in shared if isinstance(u, str)))


def to_update(manifest: Manifest) -> ResourceRef:
    """What a manifest would make of a recorded cell, for policy.require_update: the owner
    it names (None: metadata.owner absent, the recorded owner kept) and its sharedWith."""
    shared = manifest.spec.get("sharedWith") or []
    return ResourceRef(manifest.kind, manifest.name, manifest.owner,
                       tuple(u for u in shared if isinstance(u, str)))
