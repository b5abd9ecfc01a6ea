"""The resource a verb acts on, as the policy sees it, from what the store recorded.

A cell is its owner's and shared with the users its spec.sharedWith names. A snapshot is
its cell's while that cell is recorded (its owner and sharedWith: sharing follows the cell,
and the cell's owner may fork from, export and delete it); else it is its own recorded
owner's (the snapshot's owner column: its cell's owner when it was taken, moved along when
that cell changed hands, or whoever imported or pulled it), so a snapshot whose cell was
deleted, or one imported without a cell here, still belongs to a developer, shared with
nobody. Other kinds (operations, events, nodes) have no owner: every role reads them, only
an admin changes them.
"""

from __future__ import annotations

import sqlite3
from typing import Any

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
        if cell is not None:
            return _cell(kind, snapshot.name, cell)
        owner = snapshot.extra.get("owner")
        return ResourceRef(kind, snapshot.name, owner if isinstance(owner, str) else None)
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


def host_reach(spec: dict[str, Any]) -> str | None:
    """The first field of a cell's spec that reaches the server's own files, devices or
    network, or None. Whoever applies a manifest through the API names paths on the
    server, not on their machine: a build context is read from the server's disk (relative
    paths from the daemon's working directory), a host mount or host-path workspace binds a
    server folder (one of another user's, running as its owner), a local git URL clones a
    server repository. DevCell's configuration allows these for the whole server, so only an
    admin may ask for them through the API (policy.require_host)."""
    def local(url: Any) -> bool:
        return isinstance(url, str) and (url.startswith(("/", ".", "~"))
                                         or url.lower().startswith("file:"))

    def get(value: Any, key: str) -> Any:
        return value.get(key) if isinstance(value, dict) else None

    if get(spec, "build") is not None:
        return "spec.build"
    for i, sidecar in enumerate(get(spec, "sidecars") or []):
        if get(sidecar, "build") is not None:
            return f"spec.sidecars[{i}].build"
    for i, feature in enumerate(get(spec, "features") or []):
        if local(get(feature, "ref")):
            return f"spec.features[{i}].ref"
    if get(spec, "mounts"):
        return "spec.mounts"
    source = get(get(spec, "workspace"), "source")
    for key in ("hostPath", "directory", "archive"):
        if get(source, key) is not None:
            return f"spec.workspace.source.{key}"
    if local(get(get(source, "git"), "url")):
        return "spec.workspace.source.git.url"
    if local(get(get(get(spec, "dotfiles"), "git"), "url")):
        return "spec.dotfiles.git.url"
    security = get(spec, "security")
    if get(security, "privileged"):
        return "spec.security.privileged"
    if get(security, "devices"):
        return "spec.security.devices"
    if get(get(spec, "network"), "mode") == "host":
        return "spec.network.mode"
    if get(get(spec, "hooks"), "hostInitialize"):
        return "spec.hooks.hostInitialize"
    return None
