"""Record an apply: validated manifests in, desired state written all-or-nothing.

Checks that need the recorded state happen here, before anything is written: immutable
fields, references to snapshots and cells, and the same name twice in one apply. One
problem anywhere means nothing is recorded. Files whose bytes match what was last applied,
and whose objects are unchanged and converged, are not parsed again (the no-op fast path:
no YAML parse, no write, no backend call).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from devcell import failpoints
from devcell.errors import ManifestError, Problem
from devcell.manifests.model import Manifest, SourceFile
from devcell.store import events, objects, sources
from devcell.store.db import Database

SETTLED_PHASES = {"Running", "Stopped", "Sleeping", "Ready"}


@dataclass(frozen=True)
class Change:
    kind: str
    name: str
    outcome: str  # created | configured | unchanged | pruned | deleted
    object_id: str | None = None
    needs_reconcile: bool = False


@dataclass
class ApplyResult:
    changes: list[Change] = field(default_factory=list)

    @property
    def to_reconcile(self) -> list[tuple[str, str]]:
        return [(c.kind, c.object_id) for c in self.changes
                if c.needs_reconcile and c.object_id is not None]


@dataclass(frozen=True)
class _Live:
    id: str
    manifest_hash: str
    source: str | None
    converged: bool
    deleting: bool


def _live_index(conn: sqlite3.Connection, keys: set[tuple[str, str]]
                ) -> dict[tuple[str, str], _Live]:
    """The live objects among `keys` (only those: an apply of one file into a store of
    10,000 objects must not read all of them)."""
    index: dict[tuple[str, str], _Live] = {}
    for kind, table in objects.TABLES.items():
        names = sorted(n for k, n in keys if k == kind)
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]
            for row in conn.execute(
                f"SELECT id, name, manifest_hash, source, generation, observed_generation, "
                f"phase, deleting_at FROM {table} WHERE deleted_at IS NULL AND name IN "
                f"({','.join('?' for _ in chunk)})", chunk
            ):
                converged = row[4] == row[5] and row[6] in SETTLED_PHASES
                index[(kind, row[1])] = _Live(row[0], row[2], row[3], converged,
                                              row[7] is not None)
    return index


def _fast_entries(
    files: list[SourceFile], recorded: dict[str, tuple[str, list[sources.Entry]]],
    live: dict[tuple[str, str], _Live],
) -> dict[str, list[sources.Entry]]:
    """Files that need no parsing: same bytes as last applied, every object unchanged."""
    fast: dict[str, list[sources.Entry]] = {}
    for f in files:
        if f.key == "-" or f.key not in recorded:
            continue
        digest, entries = recorded[f.key]
        if digest != f.digest:
            continue
        ok = True
        for kind, name, manifest_hash in entries:
            obj = live.get((kind, name))
            if obj is None or obj.deleting or obj.manifest_hash != manifest_hash \
                    or obj.source != f.key:
                ok = False
                break
        if ok:
            fast[f.key] = entries
    return fast


def _problem(m: Manifest, path: tuple[str | int, ...], message: str) -> Problem:
    line, col = m.where(*path)
    fp = ""
    for part in path:
        fp += f"[{part}]" if isinstance(part, int) else (f".{part}" if fp else str(part))
    return Problem(m.file, message, line=line, column=col, kind=m.kind, name=m.name,
                   field=fp or None)


def _check(
    conn: sqlite3.Connection, manifests: list[Manifest],
    fast: dict[str, list[sources.Entry]], files: dict[str, SourceFile],
) -> list[Problem]:
    problems: list[Problem] = []
    defined: dict[tuple[str, str], str] = {}
    for path, entries in fast.items():
        for kind, name, _ in entries:
            defined[(kind, name)] = files[path].display
    for m in manifests:
        key = (m.kind, m.name)
        if key in defined:
            problems.append(_problem(m, ("metadata", "name"),
                                     f'{m.kind} "{m.name}" is defined twice in this apply '
                                     f"(also in {defined[key]})"))
            continue
        defined[key] = f"{m.file}:{m.line}"
    for m in manifests:
        existing = objects.get(conn, m.kind, m.name)
        if existing is not None and existing.deleting:
            problems.append(_problem(m, ("metadata", "name"),
                                     f'{m.kind.lower()} "{m.name}" is being deleted; '
                                     "apply again once it is gone"))
            continue
        if m.kind == "Snapshot":
            cell = m.spec["cell"]
            if existing is not None and existing.spec != m.spec:
                problems.append(_problem(
                    m, ("spec", "cell"),
                    f'a Snapshot\'s spec is immutable (recorded cell "{existing.spec["cell"]}", '
                    f'got "{cell}"); delete the snapshot and create a new one'))
            elif existing is None and ("Cell", cell) not in defined \
                    and objects.get(conn, "Cell", cell) is None:
                problems.append(_problem(m, ("spec", "cell"), f'cell "{cell}" not found'))
            continue
        source = m.spec.get("workspace", {}).get("from")
        if existing is not None:
            if existing.spec["backend"] != m.spec["backend"]:
                problems.append(_problem(
                    m, ("spec", "backend"),
                    f'field is immutable (recorded "{existing.spec["backend"]}", got '
                    f'"{m.spec["backend"]}"); delete the cell and create it again'))
            old_source = existing.spec.get("workspace", {}).get("from")
            if old_source != source:
                problems.append(_problem(
                    m, ("spec", "workspace", "from"),
                    f"fork source is immutable (recorded {_fork_source(old_source)}, got "
                    f"{_fork_source(source)})"))
        if source is not None and existing is None:
            snap = source["snapshot"]
            if ("Snapshot", snap) not in defined:
                found = objects.get(conn, "Snapshot", snap)
                if found is None:
                    problems.append(_problem(m, ("spec", "workspace", "from", "snapshot"),
                                             f'snapshot "{snap}" not found'))
                elif found.deleting:
                    problems.append(_problem(m, ("spec", "workspace", "from", "snapshot"),
                                             f'snapshot "{snap}" is being deleted'))
    return problems


def _fork_source(source: dict[str, str] | None) -> str:
    return f'snapshot "{source["snapshot"]}"' if source else "none"


def _write(conn: sqlite3.Connection, manifests: list[Manifest], result: ApplyResult) -> None:
    """Insert/update in dependency order: a snapshot needs its cell's id, a fork its snapshot's."""
    pending = list(manifests)
    while pending:
        waiting = []
        for m in pending:
            extra = _lineage(conn, m)
            if extra is None:
                waiting.append(m)
                continue
            result.changes.append(_record_one(conn, m, extra))
        if len(waiting) == len(pending):
            raise ManifestError([
                _problem(m, ("spec",), "circular reference between cells and snapshots")
                for m in waiting
            ])
        pending = waiting


def _lineage(conn: sqlite3.Connection, m: Manifest) -> dict[str, Any] | None:
    if m.kind == "Snapshot":
        cell = objects.get(conn, "Cell", m.spec["cell"])
        return {"cell_id": cell.id} if cell else None
    source = m.spec.get("workspace", {}).get("from")
    extra: dict[str, Any] = {"backend": m.spec["backend"]}
    if source is not None:
        snap = objects.get(conn, "Snapshot", source["snapshot"])
        if snap is None:
            return None
        extra["forked_from"] = snap.id
    return extra


def _record_one(conn: sqlite3.Connection, m: Manifest, extra: dict[str, Any]) -> Change:
    existing = objects.get(conn, m.kind, m.name)
    if existing is None:
        object_id = objects.insert(
            conn, kind=m.kind, name=m.name, spec=m.spec, labels=m.labels,
            annotations=m.annotations, spec_hash=m.spec_hash, manifest_hash=m.manifest_hash,
            source=m.source, extra=extra,
        )
        events.record(conn, kind=m.kind, object_id=object_id, name=m.name, reason="Applied",
                      message=f"created from {m.file}")
        return Change(m.kind, m.name, "created", object_id, needs_reconcile=True)
    converged = (existing.observed_generation == existing.generation
                 and existing.phase in SETTLED_PHASES)
    if existing.manifest_hash == m.manifest_hash and existing.source == m.source:
        return Change(m.kind, m.name, "unchanged", existing.id, needs_reconcile=not converged)
    objects.update_desired(
        conn, existing, spec=m.spec, labels=m.labels, annotations=m.annotations,
        spec_hash=m.spec_hash, manifest_hash=m.manifest_hash, source=m.source,
    )
    if existing.spec_hash != m.spec_hash:
        events.record(conn, kind=m.kind, object_id=existing.id, name=m.name, reason="Applied",
                      message=f"spec changed (generation {existing.generation + 1}) from {m.file}")
        return Change(m.kind, m.name, "configured", existing.id, needs_reconcile=True)
    return Change(m.kind, m.name, "configured", existing.id, needs_reconcile=not converged)


def _under(source: str | None, roots: list[str]) -> bool:
    if not source or source == "-":
        return False
    return any(source == r or source.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def apply(
    db: Database, files: list[SourceFile], *, dry_run: bool = False,
    prune_roots: list[str] | None = None,
    parse_cache: dict[str, tuple[list[Manifest], list[Problem]]] | None = None,
) -> ApplyResult:
    """Validate every file, check against recorded state, then record all of it or nothing.

    `parse_cache` (digest -> parse result) lets a caller that validates twice (a first apply
    checks against an empty in-memory state before creating anything) parse each file once.
    """
    conn = db.conn
    recorded = sources.recorded(conn, [f.key for f in files])
    live = _live_index(conn, {(k, n) for _, entries in recorded.values() for k, n, _ in entries})
    fast = _fast_entries(files, recorded, live)
    manifests: list[Manifest] = []
    problems: list[Problem] = []
    parsed: dict[str, list[Manifest]] = {}
    cache = parse_cache if parse_cache is not None else {}
    for f in files:
        if f.key in fast:
            continue
        if f.digest + f.key not in cache:
            from devcell.manifests import validate  # only when a file must be parsed

            cache[f.digest + f.key] = validate.parse_source(f)
        found, bad = cache[f.digest + f.key]
        manifests.extend(found)
        problems.extend(bad)
        parsed[f.key] = found
    by_key = {f.key: f for f in files}
    problems.extend(_check(conn, manifests, fast, by_key))
    if manifests:
        from devcell.manifests import validate

        # The recorded cells matter only to a cell with host mounts (the shared-path rule);
        # reading them all for every apply would make one edit cost the size of the store.
        mounting = _mounting_cells(conn) if _any_mounts(manifests) else {}
        problems.extend(validate.security_problems(manifests, db.state_dir, mounting))
    if problems:
        raise ManifestError(problems)

    result = ApplyResult()
    for entries in fast.values():
        for kind, name, _ in entries:
            obj = live[(kind, name)]
            result.changes.append(Change(kind, name, "unchanged", obj.id,
                                         needs_reconcile=not obj.converged))
    if dry_run:
        for m in manifests:
            existing = objects.get(conn, m.kind, m.name)
            outcome = ("created" if existing is None else
                       "unchanged" if existing.manifest_hash == m.manifest_hash else "configured")
            result.changes.append(Change(m.kind, m.name, outcome,
                                         existing.id if existing else None))
        if prune_roots:
            result.changes.extend(prune_candidates(conn, prune_roots, _keep(fast, manifests)))
        return result
    if not manifests and not prune_roots:
        return result  # nothing to write: the no-op fast path ends here
    with db.write() as wconn:
        failpoints.hit("apply.before-write")
        if _any_mounts(manifests):
            # Again under the write lock: a concurrent apply may have recorded a cell that
            # shares a host path since the check above (raising rolls this one back).
            from devcell.manifests import validate

            shared = validate.security_problems(manifests, db.state_dir,
                                                _mounting_cells(wconn))
            if shared:
                raise ManifestError(shared)
        _write(wconn, manifests, result)
        for key, found in parsed.items():
            if key != "-":
                sources.remember(wconn, key, by_key[key].digest,
                                 [(m.kind, m.name, m.manifest_hash) for m in found])
        if prune_roots:
            for change in prune_candidates(wconn, prune_roots, _keep(fast, manifests)):
                record = objects.get(wconn, change.kind, change.object_id or "")
                if record is None:
                    continue
                if record.deleting:
                    result.changes.append(change)  # requested before a crash: finish it
                    continue
                objects.request_delete(wconn, record)
                events.record(wconn, kind=record.kind, object_id=record.id, name=record.name,
                              reason="Pruned", message="its manifest is gone from the applied set")
                result.changes.append(change)
            _forget_vanished(wconn, prune_roots, files)
        failpoints.hit("apply.before-commit")
    failpoints.hit("apply.after-commit")
    return result


def _keep(fast: dict[str, list[sources.Entry]], manifests: list[Manifest]) -> set[tuple[str, str]]:
    keep = {(m.kind, m.name) for m in manifests}
    for entries in fast.values():
        keep.update((k, n) for k, n, _ in entries)
    return keep


def prune_candidates(conn: sqlite3.Connection, roots: list[str], keep: set[tuple[str, str]]
                     ) -> list[Change]:
    """Live objects applied from under `roots` that are not in `keep`."""
    out = []
    for kind, table in objects.TABLES.items():
        # Objects already being deleted are included: a prune interrupted by a crash must be
        # finished by the next one, not forgotten.
        for row in conn.execute(
            f"SELECT id, name, source FROM {table} WHERE deleted_at IS NULL"
        ):
            if (kind, row[1]) not in keep and _under(row[2], roots):
                out.append(Change(kind, row[1], "pruned", row[0], needs_reconcile=True))
    return out


def _forget_vanished(conn: sqlite3.Connection, roots: list[str], files: list[SourceFile]) -> None:
    present = {f.key for f in files}
    for (path,) in conn.execute("SELECT path FROM applied_sources").fetchall():
        if _under(path, roots) and path not in present:
            sources.forget(conn, path)


def _any_mounts(manifests: list[Manifest]) -> bool:
    return any(m.kind == "Cell" and m.spec.get("mounts") for m in manifests)


def _mounting_cells(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Live recorded cells with host mounts, name -> spec (for the shared-mount rule)."""
    import json

    rows = conn.execute("SELECT name, spec FROM cells WHERE deleted_at IS NULL "
                        "AND json_extract(spec, '$.mounts') IS NOT NULL").fetchall()
    return {name: json.loads(spec) for name, spec in rows}


def apply_objects(db: Database, manifests: list[Manifest]) -> ApplyResult:
    """Record objects made by an imperative verb (`snapshot create`, `cell fork`) like an apply."""
    from devcell.manifests import validate

    problems = _check(db.conn, manifests, {}, {})
    if problems:
        raise ManifestError(problems)
    result = ApplyResult()
    with db.write() as conn:
        # Under the write lock: a concurrent apply could record a cell sharing a host path.
        problems = validate.security_problems(  # a fork copies a spec
            manifests, db.state_dir, _mounting_cells(conn))
        if problems:
            raise ManifestError(problems)
        _write(conn, manifests, result)
    return result


def set_cell_state(db: Database, ref: str, state: str) -> Change:
    """`cell sleep` / `cell start`: change the desired state, bumping the generation."""
    from devcell.manifests.model import digest

    with db.write() as conn:
        cell = objects.require(conn, "Cell", ref)
        if cell.deleting:
            raise ManifestError([Problem("<command line>", "is being deleted", kind="Cell",
                                         name=cell.name)])
        if cell.spec.get("state") == state:
            converged = (cell.observed_generation == cell.generation
                         and cell.phase in SETTLED_PHASES)
            return Change("Cell", cell.name, "unchanged", cell.id, needs_reconcile=not converged)
        spec = dict(cell.spec, state=state)
        objects.update_desired(
            conn, cell, spec=spec, labels=cell.labels, annotations=cell.annotations,
            spec_hash=digest(spec), manifest_hash=digest([spec, cell.labels, cell.annotations]),
            source=cell.source,
        )
        events.record(conn, kind="Cell", object_id=cell.id, name=cell.name, reason="StateChanged",
                      message=f"desired state {cell.spec.get('state')} -> {state}")
    return Change("Cell", cell.name, "configured", cell.id, needs_reconcile=True)


def delete(db: Database, kind: str, ref: str, *, reason: str = "Deleting") -> Change:
    """Ask for an object's deletion; refused for a snapshot that a live fork still names."""
    with db.write() as conn:
        record = objects.require(conn, kind, ref)
        if kind == "Snapshot":
            forks = [r[0] for r in conn.execute(
                "SELECT name FROM cells WHERE forked_from = ? AND deleted_at IS NULL "
                "ORDER BY name", (record.id,))]
            if forks:
                from devcell.errors import Conflict

                raise Conflict(
                    f'snapshot "{record.name}" cannot be deleted: cell(s) {", ".join(forks)} '
                    "were forked from it and still name it; delete those cells first")
        if record.deleting:
            return Change(kind, record.name, "deleted", record.id, needs_reconcile=True)
        objects.request_delete(conn, record)
        events.record(conn, kind=kind, object_id=record.id, name=record.name, reason=reason,
                      message="deletion requested" if reason == "Deleting" else
                      "its manifest is gone from the watched directory")
    return Change(kind, record.name, "pruned" if reason == "Pruned" else "deleted", record.id,
                  needs_reconcile=True)
