"""Imperative verbs on cells: `snapshot create`, `cell fork`, `cell sleep`, `cell start`.

Each writes desired state exactly as an apply of the equivalent manifest would (through
admission), then converges it like an apply. Their input comes from a command line, not a
file, so their problems are located at `<command line>` and name the flag.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from devcell import admission, names
from devcell.api import converging
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.errors import ManifestError, Problem
from devcell.manifests.model import Manifest
from devcell.store import db as dbmod
from devcell.store import desired, objects

CLI = admission.COMMAND_LINE
TRIGGER = "cli"


def snapshot(state_dir: Path, cell: str, *, name: str, ttl: str | None = None,
             consistency: str | None = None, options: Options = DEFAULTS,
             hooks: Hooks = NO_HOOKS) -> Report:
    """Checkpoint `cell` as a new Snapshot object `name` (that expires after `ttl`; with
    `consistency` "machine", keeping memory too)."""
    _check_name("Snapshot", name)
    if ttl is not None:
        from devcell.errors import UsageError
        from devcell.manifests import quantities

        try:
            quantities.duration_seconds(ttl)
        except ValueError as exc:
            raise UsageError(f"--ttl: {exc}") from None
    db = dbmod.open_database(state_dir)
    try:
        record = objects.require(db.conn, "Cell", cell)
        spec = {"cell": record.name, **({"ttl": ttl} if ttl is not None else {}),
                **({"consistency": consistency} if consistency is not None else {})}
        result = admission.apply_objects(db, [_manifest("Snapshot", name, spec)])
        return _finish(db, result, options, hooks)
    finally:
        db.close()


def fork(state_dir: Path, cell: str, *, snapshot: str, name: str,
         host_ports: dict[int, int] | None = None, publish: bool = True,
         options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS) -> Report:
    """A new cell `name` with `cell`'s spec, its workspace restored from `snapshot` (which
    must be a snapshot of `cell`). `host_ports`: container port -> the fork's host port for
    it (the others stay the parent's, which admission refuses while the parent holds them);
    `publish=False`: the fork publishes no port."""
    _check_name("Cell", name)
    db = dbmod.open_database(state_dir)
    try:
        source = objects.require(db.conn, "Cell", cell)
        snap = objects.get(db.conn, "Snapshot", snapshot)
        if snap is None:
            raise objects.not_found(db.conn, "Snapshot", snapshot)
        if snap.extra.get("cell_id") != source.id:
            raise ManifestError([Problem(
                CLI, f'snapshot "{snap.name}" was taken of cell "{snap.spec["cell"]}", '
                     f'not of "{source.name}"', kind="Cell", name=name, field="--snapshot")])
        spec = copy.deepcopy(source.spec)
        spec["state"] = "Running"
        _fork_ports(spec, host_ports or {} if publish else None, name)
        spec.setdefault("workspace", {})["from"] = {"snapshot": snap.name}
        spec["workspace"].pop("source", None)  # a fork keeps its snapshot's files
        manifest = _manifest("Cell", name, spec, labels=dict(source.labels))
        result = admission.apply_objects(db, [manifest])
        return _finish(db, result, options, hooks)
    finally:
        db.close()


def _fork_ports(spec: dict[str, Any], ports: dict[int, int] | None, name: str) -> None:
    network = spec.get("network") or {}
    if ports is None:
        if network.get("ports"):
            network["ports"] = []
        return
    published = {int(p["containerPort"]) for p in network.get("ports") or []}
    unknown = sorted(set(ports) - published)
    if unknown:
        raise ManifestError([Problem(
            CLI, f"--port {unknown[0]}:{ports[unknown[0]]}: the cell publishes no container port "
                 f"{unknown[0]} (it publishes: {', '.join(map(str, sorted(published))) or 'none'})",
            kind="Cell", name=name, field="--port")])
    for port in network.get("ports") or []:
        if int(port["containerPort"]) in ports:
            port["hostPort"] = ports[int(port["containerPort"])]


def sleep(state_dir: Path, cell: str, *, options: Options = DEFAULTS,
          hooks: Hooks = NO_HOOKS) -> Report:
    """Checkpoint the workspace, then stop the cell (desired state Sleeping)."""
    return set_state(state_dir, cell, "Sleeping", options=options, hooks=hooks)


def start(state_dir: Path, cell: str, *, options: Options = DEFAULTS,
          hooks: Hooks = NO_HOOKS) -> Report:
    """Start a stopped or sleeping cell (desired state Running)."""
    return set_state(state_dir, cell, "Running", options=options, hooks=hooks)


def set_state(state_dir: Path, cell: str, state: str, *, options: Options = DEFAULTS,
              hooks: Hooks = NO_HOOKS) -> Report:
    db = dbmod.open_database(state_dir)
    try:
        change = admission.set_cell_state(db, cell, state)
        return _finish(db, desired.ApplyResult([change]), options, hooks)
    finally:
        db.close()


def _finish(db: dbmod.Database, result: desired.ApplyResult, options: Options,
            hooks: Hooks) -> Report:
    return converging.finish(db, Recorded(tuple(result.changes)), trigger=TRIGGER,
                             options=options, hooks=hooks)


def _check_name(kind: str, name: str) -> None:
    problem = names.name_problem(name)
    if problem:
        raise ManifestError([Problem(CLI, problem, kind=kind, name=name[:40], field="--name")])


def _manifest(kind: str, name: str, spec: dict[str, Any],
              labels: dict[str, str] | None = None) -> Manifest:
    return Manifest(kind=kind, name=name, spec=spec, labels=labels or {}, annotations={},
                    file=CLI, source="cli", line=1)
