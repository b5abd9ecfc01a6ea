"""Whether a built cell's inputs changed: what `apply` reports (`rebuilt`) and `diff` shows.

A cell built from a Dockerfile can need a new image while its manifest is unchanged (the
Dockerfile or a file of its context edited). The build's digest is then part of what the
user asked for, so `diff` shows it (the image the runtime was made from against the one the
build names now) and exits 1, and `apply` reports the cell `rebuilt` and converges it. An
unchanged context costs a walk with lstat (the backend's digest cache), no hash and no build,
and converges nothing: the no-op re-apply stays a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcell import backends
from devcell.backends.base import Backend, CellRef
from devcell.controllers import builds
from devcell.errors import BackendError
from devcell.store import built_cells, events, objects
from devcell.store.db import Database

REASON = "BuildInputsChanged"


@dataclass
class Judged:
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    """cell id -> (the image its runtime was made from, the image its build names now)."""
    unknown: dict[str, str] = field(default_factory=dict)
    """cell id -> why it could not be judged (a context that cannot be read, an engine that
    is down, no image recorded yet): reconciled, so the controller says or settles it."""


def judge(db: Database, cells: Iterable[built_cells.BuiltCell]) -> Judged:
    """Judge the settled ones among `cells` (store.built_cells.among)."""
    found = Judged()
    by_backend: dict[str, list[built_cells.BuiltCell]] = {}
    for cell in cells:
        if cell.settled and cell.state != "Sleeping":
            by_backend.setdefault(cell.backend, []).append(cell)
    for name, cells in sorted(by_backend.items()):
        try:
            backend = backends.load(name, Path(db.state_dir))
        except BackendError as exc:
            found.unknown.update(dict.fromkeys((c.id for c in cells), str(exc)))
            continue
        try:
            for cell in cells:
                _judge_one(db, backend, cell, found)
        finally:
            backend.close()
    return found


def _judge_one(db: Database, backend: Backend, cell: built_cells.BuiltCell,
               found: Judged) -> None:
    if builds.built(cell.spec):
        recorded = builds.recorded_image(cell.status)
        try:
            now = wanted(db, backend, cell.id, cell.name, cell.spec, cell.source)
        except BackendError as exc:
            found.unknown[cell.id] = str(exc)
            return
        if recorded is None:
            found.unknown[cell.id] = "the image its runtime was made from is not recorded"
            return
        if recorded != now:
            found.moved[cell.id] = (recorded, now)
            return
    ran = builds.recorded_sidecars(cell.status)
    for sidecar in cell.spec.get("sidecars") or []:
        if sidecar.get("build") is None:
            continue
        name = str(sidecar["name"])
        try:  # judged and tagged as the cell controller does (CELL.SIDECAR)
            now = wanted(db, backend, cell.id, f"{cell.name}.{name}",
                         {"build": sidecar["build"]}, cell.source)
        except BackendError as exc:
            found.unknown[cell.id] = str(exc)
            return
        if name not in ran:
            found.unknown[cell.id] = f"the image sidecar {name} was made from is not recorded"
            return
        if ran[name] != now:
            found.moved[cell.id] = (ran[name], now)
            return


def wanted(db: Database, backend: Backend, cell_id: str, name: str, spec: dict[str, Any],
           source: str | None) -> str:
    """The image tag `spec.build` names now (BackendError when that cannot be said)."""
    return builds.wanted_tag(backend, CellRef(cell_id, name, spec, None), source=source,
                             state_dir=Path(db.state_dir))


def compare(db: Database, cell_id: str, name: str, backend_name: str, spec: dict[str, Any],
            source: str | None, status: dict[str, Any]) -> tuple[str, str] | None:
    """`diff`'s question for one recorded cell and the spec a manifest gives it: (the image
    its runtime was made from, the image `spec.build` names now) when they differ; None when
    they agree or nothing was recorded. BackendError when the build cannot be judged."""
    recorded = builds.recorded_image(status)
    if recorded is None or not builds.built(spec):
        return None
    backend = backends.load(backend_name, Path(db.state_dir))
    try:
        now = wanted(db, backend, cell_id, name, spec, source)
    finally:
        backend.close()
    return (recorded, now) if now != recorded else None


def compare_sidecars(db: Database, cell_id: str, name: str, backend_name: str,
                     spec: dict[str, Any], source: str | None, status: dict[str, Any]
                     ) -> dict[str, tuple[str, str]]:
    """`diff`'s question for the built sidecars of `spec`: sidecar name -> (the image it
    runs, the image its build names now), for those that differ (recorded ones only)."""
    ran = builds.recorded_sidecars(status)
    asked = [s for s in spec.get("sidecars") or []
             if s.get("build") is not None and str(s.get("name")) in ran]
    if not asked:
        return {}
    backend = backends.load(backend_name, Path(db.state_dir))
    moved = {}
    try:
        for sidecar in asked:
            sidecar_name = str(sidecar["name"])
            now = wanted(db, backend, cell_id, f"{name}.{sidecar_name}",
                         {"build": sidecar["build"]}, source)
            if now != ran[sidecar_name]:
                moved[sidecar_name] = (ran[sidecar_name], now)
    finally:
        backend.close()
    return moved


def record(db: Database, moved: dict[str, tuple[str, str]]) -> None:
    """Record the cells whose build's inputs changed as waiting for their rebuild."""
    if not moved:
        return
    with db.write() as conn:
        for cell_id, (was, now) in moved.items():
            cell = objects.get(conn, "Cell", cell_id)
            if cell is None or cell.deleting or was not in (
                    builds.recorded_image(cell.status),
                    *builds.recorded_sidecars(cell.status).values()):
                continue  # changed since it was judged: someone else's to say
            message = (f"its build's inputs changed: image {now} replaces {was}; the next "
                       "reconcile (apply, or the daemon) builds it and recreates the cell")
            status = dict(cell.status)
            status["conditions"] = objects.set_condition(
                status.get("conditions", []), "Ready", "False", REASON, message)
            status["message"] = message
            status["drifted"] = True  # the daemon queues drifted cells (objects.drifted_keys)
            status[REBUILD] = {"from": was, "to": now}
            objects.write_status(conn, cell, phase=objects.Phase.PENDING, status=status,
                                 observed_generation=cell.observed_generation)
            events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason=REASON,
                          message=message)


REBUILD = "rebuild"
"""status.rebuild: {"from": image, "to": image} while a rebuild found by a verb waits."""
