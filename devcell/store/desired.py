"""Record an apply: validated manifests in, desired state written all-or-nothing.

The rules a manifest must pass against recorded state (immutable fields, references to
snapshots and cells, the same name twice, the security policy) are admission's
(devcell.admission), run through the `Admit` hook before the write and again under the write
lock; one problem anywhere means nothing is recorded. One rule stays here: a snapshot that a
live fork still names cannot be deleted (`delete`), because every caller that deletes, the
daemon's prune included, must get it. Files whose bytes match what was last applied, and whose
objects are unchanged and converged, are not parsed again (the no-op fast path: no YAML
parse, no write, no backend call).
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any, Protocol

from devcell import failpoints, kinds
from devcell.errors import ManifestError, Problem
from devcell.manifests import quantities
from devcell.manifests.model import Manifest, SourceFile, field_path
from devcell.records import MutableRecord, Record, field
from devcell.store import (
    events,
    faults,
    holds,
    objects,
    preconditions,
    prunes,
    retention,
    sources,
)
from devcell.store.db import Database

if TYPE_CHECKING:
    from pathlib import Path

    from devcell.manifests.selectors import Selector
    from devcell.manifests.validator_cache import Place
    from devcell.store import client_sets

SETTLED_PHASES = objects.SETTLED_PHASES
IMPERATIVE = "cli"
"""The source of objects an imperative verb recorded (`snapshot create`): asked for now, so
taken even under the name of an expired snapshot (a manifest's is not taken again)."""


class Change(Record):
    """What recording one object did (its outcome), and whether it must be reconciled."""

    kind: str
    name: str
    outcome: str  # created | configured | unchanged | pruned | deleted | expired
    # (the verbs then say rebuilt or repaired for an unchanged cell: api.converging)
    object_id: str | None = None
    needs_reconcile: bool = False
    adopted_from: str | None = None
    """Where the object was applied from before this apply took it over (said by an event;
    the daemon logs it), None when it was not adopted."""


class ApplyResult(MutableRecord):
    """What an apply recorded, object by object."""

    changes: list[Change] = field(default_factory=list)

    @property
    def to_reconcile(self) -> list[tuple[str, str]]:
        return [(c.kind, c.object_id) for c in self.changes
                if c.needs_reconcile and c.object_id is not None]


class _Live(Record):
    """A recorded live object, as an apply compares a manifest with it."""

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
    for kind in kinds.KINDS.values():
        names = sorted(n for k, n in keys if k == kind.name)
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]
            # A cell built from a Dockerfile takes this path too: whether its build's inputs
            # changed is judged after recording (api.converging.judge_builds, a walk with
            # lstat), never by parsing its unchanged manifest again.
            for row in conn.execute(
                f"SELECT id, name, manifest_hash, source, generation, observed_generation, "
                f"phase, deleting_at FROM {kind.table} WHERE deleted_at IS NULL "
                f"AND name IN ({','.join('?' for _ in chunk)})", chunk
            ):
                converged = row[4] == row[5] and row[6] in SETTLED_PHASES
                index[(kind.name, row[1])] = _Live(row[0], row[2], row[3], converged,
                                              row[7] is not None)
    return index


def _fast_entries(
    files: list[SourceFile], recorded: dict[str, tuple[str, list[sources.Entry]]],
    live: dict[tuple[str, str], _Live], key: bytes,
) -> dict[str, list[sources.Entry]]:
    """Files that need no parsing: same bytes as last applied, every object unchanged."""
    fast: dict[str, list[sources.Entry]] = {}
    for f in files:
        if f.key == "-" or f.key not in recorded:
            continue
        digest, entries = recorded[f.key]
        if digest != sources.seal(key, f.digest):
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


def problem_at(m: Manifest, path: tuple[str | int, ...], message: str) -> Problem:
    line, col = m.where(*path)
    return Problem(m.file, message, line=line, column=col, kind=m.kind, name=m.name,
                   field=field_path(path) or None)


class Admit(Protocol):
    """The rules a manifest must pass against recorded state before it is recorded
    (devcell.admission). Recording calls it inside its write transaction, so the rules see
    exactly the state the write changes (a dry run calls it without writing)."""

    def __call__(self, conn: sqlite3.Connection, manifests: list[Manifest],
                 defined: dict[tuple[str, str], str]) -> list[Problem]: ...


def _write(conn: sqlite3.Connection, manifests: list[Manifest], result: ApplyResult,
           key: bytes) -> None:
    """Insert/update in dependency order: a snapshot needs its cell's id, a fork its snapshot's."""
    pending = list(manifests)
    while pending:
        waiting = []
        for m in pending:
            extra = _lineage(conn, m)
            if extra is None:
                waiting.append(m)
                continue
            result.changes.append(_record_one(conn, m, extra, key))
        if len(waiting) == len(pending):
            raise ManifestError([
                problem_at(m, ("spec",), "circular reference between cells and snapshots")
                for m in waiting
            ])
        pending = waiting


def _lineage(conn: sqlite3.Connection, m: Manifest) -> dict[str, Any] | None:
    if m.kind == "Snapshot":
        cell = objects.get(conn, "Cell", m.spec["cell"])
        if cell is None and objects.get(conn, "Snapshot", m.name) is not None:
            return {}  # recorded already (an imported one has no cell here): lineage is kept
        # its cell's owner as it is taken (resources.recorded: once that cell is gone)
        return {"cell_id": cell.id, "owner": cell.extra.get("owner")} if cell else None
    source = m.spec.get("workspace", {}).get("from")
    extra: dict[str, Any] = {"backend": m.spec["backend"], "owner": owner_of_new(m)}
    if source is not None:
        snap = objects.get(conn, "Snapshot", source["snapshot"])
        if snap is None:
            return None
        extra["forked_from"] = snap.id
    return extra


def _record_one(conn: sqlite3.Connection, m: Manifest, extra: dict[str, Any], key: bytes
                ) -> Change:
    existing = objects.get(conn, m.kind, m.name)
    spec_hash, manifest_hash = m.spec_hash(key), m.manifest_hash(key)
    if existing is None and expired_again(conn, m):
        gone = retention.expired_named(conn, m.name)
        assert gone is not None
        return Change(m.kind, m.name, "expired", gone.id)
    if existing is None:
        object_id = objects.insert(
            conn, kind=m.kind, name=m.name, spec=m.spec, labels=m.labels,
            annotations=m.annotations, spec_hash=spec_hash, manifest_hash=manifest_hash,
            source=m.source, extra=extra,
        )
        events.record(conn, kind=m.kind, object_id=object_id, name=m.name, reason="Applied",
                      message=f"created from {m.file}")
        return Change(m.kind, m.name, "created", object_id, needs_reconcile=True)
    converged = (existing.observed_generation == existing.generation
                 and existing.phase in SETTLED_PHASES)
    new_owner = m.kind == "Cell" and m.owner is not None \
        and m.owner != existing.extra.get("owner")
    if new_owner:
        assert m.owner is not None
        objects.set_owner(conn, existing.id, m.owner)
        events.record(conn, kind=m.kind, object_id=existing.id, name=m.name,
                      reason="OwnerChanged", message=f"owner is now {m.owner} (was "
                      f"{existing.extra.get('owner') or 'nobody'}) from {m.file}")
    if existing.manifest_hash == manifest_hash and existing.source == m.source:
        return Change(m.kind, m.name, "configured" if new_owner else "unchanged", existing.id,
                      needs_reconcile=not converged)
    adopted = _adopted_from(conn, existing, m)
    if m.kind == "Cell" and holds.manifest_wins(conn, existing, m.spec):
        converged = False  # the hold's state is no longer the one to reach
    objects.update_desired(
        conn, existing, spec=m.spec, labels=m.labels, annotations=m.annotations,
        spec_hash=spec_hash, manifest_hash=manifest_hash, source=m.source,
    )
    if existing.spec_hash != spec_hash:
        events.record(conn, kind=m.kind, object_id=existing.id, name=m.name, reason="Applied",
                      message=f"spec changed (generation {existing.generation + 1}) from {m.file}")
        return Change(m.kind, m.name, "configured", existing.id, needs_reconcile=True,
                      adopted_from=adopted)
    return Change(m.kind, m.name, "configured", existing.id, needs_reconcile=not converged,
                  adopted_from=adopted)


def owner_of_new(m: Manifest) -> str:
    """A new cell's owner: its manifest's metadata.owner, else who creates it (store.actor)."""
    from devcell.store import actor  # here: a no-op apply never imports it

    return m.owner if m.owner is not None else actor.current()


def _adopted_from(conn: sqlite3.Connection, existing: objects.ObjectRecord, m: Manifest
                  ) -> str | None:
    """Where an object was applied from before this manifest took it over (None: from the
    same place). Said by an event: the file that now holds it decides its spec and, under a
    watched directory, its prune."""
    if existing.source == m.source:
        return None
    before = _where(existing.source)
    events.record(conn, kind=m.kind, object_id=existing.id, name=m.name, reason="Adopted",
                  message=f"now applied from {_where(m.source)}; it was applied from {before}")
    return before


def _where(source: str | None) -> str:
    if source == IMPERATIVE:
        return "the command line (an imperative verb)"
    if not source or source == "-":
        return "standard input"
    return source


def expired_again(conn: sqlite3.Connection, m: Manifest) -> bool:
    """Whether `m` declares a snapshot that expired: a re-apply of its manifest must not take
    it again (apply, its dry run and diff all say so; an imperative create may)."""
    return (m.kind == "Snapshot" and m.source != IMPERATIVE
            and retention.expired_named(conn, m.name) is not None)


def _under(source: str | None, roots: list[str]) -> bool:
    if not source or source == "-":
        return False
    return any(source == r or source.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def validator_place(db: Database) -> Place | None:
    """Where the state of `db` keeps compiled validators (none for an in-memory check)."""
    from devcell.manifests import validator_cache

    return None if db.memory else validator_cache.at(db.state_dir, db.hash_key)


def validator_place_of(state_dir: Path) -> Place | None:
    """The same for a state directory not opened: none until it has its key (nothing made)."""
    from devcell.manifests import validator_cache
    from devcell.store import hashkey

    return validator_cache.at(state_dir, hashkey.existing(state_dir))


def apply(
    db: Database, files: list[SourceFile], *, dry_run: bool = False,
    admit: Admit, prune_roots: list[str] | None = None, prune_selector: Selector | None = None,
    parse_cache: dict[str, tuple[list[Manifest], list[Problem]]] | None = None,
    require_objects: bool = False, keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS,
    client_set: client_sets.ClientSet | None = None,
) -> ApplyResult:
    """Validate every file, check against recorded state, then record all of it or nothing.

    require_objects: files that hold no object at all are an error (`devcell apply -f` of
    comment-only files: as kubectl says, no objects passed to apply).

    keep_pruned: seconds a pruned cell's workspace is kept as a safety snapshot (0: none).

    client_set: an apply through the API (store.client_sets): what it declares is recorded
    under the client's paths, and its prune deletes what the caller applied there before.

    `parse_cache` (digest -> parse result) lets a caller that validates twice (a first apply
    checks against an empty in-memory state before creating anything) parse each file once.
    """
    conn = db.conn
    recorded = sources.recorded(conn, [f.key for f in files])
    live = _live_index(conn, {(k, n) for _, entries in recorded.values() for k, n, _ in entries})
    key = db.hash_key
    fast = _fast_entries(files, recorded, live, key)
    manifests: list[Manifest] = []
    problems: list[Problem] = []
    parsed: dict[str, list[Manifest]] = {}
    cache = parse_cache if parse_cache is not None else {}

    def parse(f: SourceFile) -> list[Manifest]:
        if f.digest + f.key not in cache:
            from devcell.manifests import validate  # only when a file must be parsed

            cache[f.digest + f.key] = validate.parse_source(f, validator_place(db))
        return cache[f.digest + f.key][0]

    # An unchanged file that defines an object a changed file defines too is parsed as well,
    # so "defined twice" blames the later file in the order given, whichever was recorded.
    named = {(m.kind, m.name) for f in files if f.key not in fast for m in parse(f)}
    for path in [k for k, entries in fast.items() if any((e[0], e[1]) in named for e in entries)]:
        del fast[path]
    for f in files:
        if f.key in fast:
            continue
        parse(f)
        found, bad = cache[f.digest + f.key]
        manifests.extend(found)
        problems.extend(bad)
        parsed[f.key] = found
    by_key = {f.key: f for f in files}
    defined = {(kind, name): by_key[path].display
               for path, entries in fast.items() for kind, name, _ in entries}
    manifests, hidden = preconditions.unredacted(conn, manifests)  # get's output applied
    problems.extend(hidden)
    if manifests and (dry_run or problems):  # else checked once, under the write lock
        problems.extend(admit(conn, manifests, defined))
    if require_objects and not problems and not manifests and not fast:
        shown = ", ".join(f.display for f in files) or "no files"
        problems.append(Problem(shown, "no objects passed to apply (the files hold only "
                                       "comments or empty documents)"))
    if problems:
        raise ManifestError(problems)

    if dry_run:
        preconditions.check_versions(conn, manifests)
    result = ApplyResult()
    for entries in fast.values():
        for kind, name, _ in entries:
            obj = live[(kind, name)]
            result.changes.append(Change(kind, name, "unchanged", obj.id,
                                         needs_reconcile=not obj.converged))
    if dry_run:
        for m in manifests:
            existing = objects.get(conn, m.kind, m.name)
            outcome = ("expired" if existing is None and expired_again(conn, m) else
                       "created" if existing is None else
                       "unchanged" if existing.manifest_hash == m.manifest_hash(key)
                       else "configured")
            result.changes.append(Change(m.kind, m.name, outcome,
                                         existing.id if existing else None))
        if prune_roots:
            result.changes.extend(prune_candidates(conn, prune_roots, _keep(fast, manifests),
                                                   prune_selector))
        result.changes.extend(_client_prunes(conn, client_set, _keep(fast, manifests)))
        return result
    if not manifests and not prune_roots and not (client_set and client_set.prune):
        return result  # nothing to write: the no-op fast path ends here
    with db.write() as wconn:
        failpoints.hit("apply.before-write")
        # Every rule that depends on recorded state is checked here, under the write lock,
        # so no concurrent apply can record anything between the check and the write
        # (raising rolls this one back: nothing is recorded).
        late = admit(wconn, manifests, defined) if manifests else []
        if late:
            raise ManifestError(late)
        preconditions.check_versions(wconn, manifests)
        _write(wconn, manifests, result, key)
        for path, found in parsed.items():
            if path != "-":
                sources.remember(wconn, path, sources.seal(key, by_key[path].digest),
                                 [(m.kind, m.name, m.manifest_hash(key)) for m in found])
        if prune_roots:
            for change in prune_candidates(wconn, prune_roots, _keep(fast, manifests),
                                           prune_selector):
                _prune(wconn, change, result, keep_pruned)
            _forget_vanished(wconn, prune_roots, files)
        if client_set is not None:
            for change in _client_prunes(wconn, client_set, _keep(fast, manifests)):
                _prune(wconn, change, result, keep_pruned)
            from devcell.store import client_sets  # API applies alone (import-sets)

            ids = {(c.kind, c.name): c.object_id for c in result.changes}
            client_sets.remember(wconn, client_set, [
                (m.line, m.kind, m.name, ids.get((m.kind, m.name)) or "") for m in manifests])
        failpoints.hit("apply.before-commit")
    failpoints.hit("apply.after-commit")
    return result


def _prune(wconn: sqlite3.Connection, change: Change, result: ApplyResult,
           keep_pruned: int) -> None:
    """Ask for the deletion of what a prune found (in the apply's transaction)."""
    record = objects.get(wconn, change.kind, change.object_id or "")
    if record is None:
        return
    if record.deleting:
        result.changes.append(change)  # requested before a crash: finish it
        return
    objects.request_delete(wconn, record)
    keeping = prunes.record(wconn, record, keep_pruned)
    events.record(wconn, kind=record.kind, object_id=record.id, name=record.name,
                  reason="Pruned", message="its manifest is gone from the applied set"
                  + _keeping(keeping))
    result.changes.append(change)


def _client_prunes(conn: sqlite3.Connection, client_set: client_sets.ClientSet | None,
                   keep: set[tuple[str, str]]) -> list[Change]:
    """What an apply through the API prunes: each checked with its caller's right to delete
    it (a refusal refuses the whole apply)."""
    if client_set is None or not client_set.prune:
        return []
    from devcell.store import client_sets

    found = client_sets.candidates(conn, client_set, keep)
    if client_set.may_delete is not None:
        for kind, name, _ in found:
            client_set.may_delete(conn, kind, name)
    return [Change(kind, name, "pruned", object_id, needs_reconcile=True)
            for kind, name, object_id in found]


def _keep(fast: dict[str, list[sources.Entry]], manifests: list[Manifest]) -> set[tuple[str, str]]:
    keep = {(m.kind, m.name) for m in manifests}
    for entries in fast.values():
        keep.update((k, n) for k, n, _ in entries)
    return keep


def prune_candidates(conn: sqlite3.Connection, roots: list[str], keep: set[tuple[str, str]],
                     selector: Selector | None = None) -> list[Change]:
    """Live objects applied from under `roots` that are not in `keep` (and, with a selector,
    whose labels match it: `apply --prune -l`)."""
    out = []
    for kind in kinds.KINDS.values():
        # Objects already being deleted are included: a prune interrupted by a crash must be
        # finished by the next one, not forgotten.
        for row in conn.execute(
            f"SELECT id, name, source, labels FROM {kind.table} WHERE deleted_at IS NULL"
        ):
            if (kind.name, row[1]) not in keep and _under(row[2], roots) and (
                    not selector or selector.matches(faults.loads(row[3] or "{}"))):
                out.append(Change(kind.name, row[1], "pruned", row[0], needs_reconcile=True))
    return out


def _forget_vanished(conn: sqlite3.Connection, roots: list[str], files: list[SourceFile]) -> None:
    present = {f.key for f in files}
    for (path,) in conn.execute("SELECT path FROM applied_sources").fetchall():
        if _under(path, roots) and path not in present:
            sources.forget(conn, path)


def apply_objects(db: Database, manifests: list[Manifest], *, admit: Admit) -> ApplyResult:
    """Record objects made by an imperative verb (`snapshot create`, `cell fork`) like an apply."""
    result = ApplyResult()
    with db.write() as conn:
        problems = admit(conn, manifests, {})  # under the write lock, as for apply
        if problems:
            raise ManifestError(problems)
        _write(conn, manifests, result, db.hash_key)
    return result


def set_cell_state(db: Database, ref: str, state: str, *, by: str = "",
                   reason: str = "") -> Change:
    """`cell sleep` / `cell start` (and an idle sleep): hold the cell in `state`.

    A runtime decision, recorded beside the spec (store/holds.py), never in it: a re-apply of
    the unchanged manifest leaves it, a change of the manifest's `spec.state` ends it. `by`
    names who decided (default: the verb for the state), `reason` why. Records only; the
    rule that a cell being deleted keeps its state is admission's (admission.set_cell_state
    checks it in the same write transaction).
    """
    by = by or ("cell sleep" if state == "Sleeping" else "cell start" if state == "Running"
                else "cell stop")
    with db.write() as conn:
        cell = objects.require(conn, "Cell", ref)
        if not holds.hold(conn, cell, state, by=by, reason=reason):
            converged = (cell.observed_generation == cell.generation
                         and cell.phase in SETTLED_PHASES)
            return Change("Cell", cell.name, "unchanged", cell.id, needs_reconcile=not converged)
    return Change("Cell", cell.name, "configured", cell.id, needs_reconcile=True)


def delete(db: Database, kind: str, ref: str, *, reason: str = "Deleting",
           keep_pruned: int = 0) -> Change:
    """Ask for an object's deletion; refused for a snapshot that a live fork still names."""
    return delete_all(db, [(kind, ref)], reason=reason, keep_pruned=keep_pruned)[0]


def _keeping(kept: prunes.Kept | None) -> str:
    if kept is None:
        return ""
    return (f"; its workspace is kept as snapshot {kept.safety} for "
            f"{quantities.format_duration(kept.keep_seconds)}")


def delete_all(db: Database, targets: list[tuple[str, str]], *, reason: str = "Deleting",
               keep_pruned: int = 0) -> list[Change]:
    """Ask for the deletion of every target in one transaction: all of them or none.

    A snapshot stays while a fork still names it: its deletion is refused unless every live
    fork is being deleted too (in this request or before); it then waits until they are gone
    (the snapshot controller), so `delete -f` of a fork and its snapshot works in one go.
    """
    changes: list[Change] = []
    with db.write() as conn:
        records = [objects.require(conn, kind, ref) for kind, ref in targets]
        for record in records:
            if not record.deleting:
                objects.request_delete(conn, record)
                keeping = prunes.record(conn, record, keep_pruned) if reason == "Pruned" \
                    else None
                events.record(conn, kind=record.kind, object_id=record.id, name=record.name,
                              reason=reason, message="deletion requested" if reason ==
                              "Deleting" else "its manifest is gone from the watched directory"
                              + _keeping(keeping))
            changes.append(Change(record.kind, record.name,
                                  "pruned" if reason == "Pruned" else "deleted", record.id,
                                  needs_reconcile=True))
        for record in records:
            if record.kind != "Snapshot":
                continue
            kept = objects.forks_of(conn, record.id, deleting=False)
            if kept:
                from devcell.errors import Conflict

                raise Conflict(  # rolls back every deletion of this request
                    f'snapshot "{record.name}" cannot be deleted: cell(s) {", ".join(kept)} '
                    "were forked from it and still name it; delete those cells first (or in "
                    "the same request)")
    return changes
