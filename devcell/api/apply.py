"""`apply` and `delete`: record what manifest files (or a kind and a name) ask for, converge.

An apply validates everything before it writes anything: a first apply (no state database
yet) is checked against an empty in-memory state first, so bad input leaves no state
directory behind, and a dry run of it creates nothing at all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell import admission
from devcell.api import converging
from devcell.api.converging import DEFAULTS, NO_HOOKS, Hooks, Options
from devcell.api.reports import Recorded, Report
from devcell.errors import ManifestError
from devcell.manifests import loader
from devcell.store import db as dbmod
from devcell.store import desired, prunes

if TYPE_CHECKING:
    from devcell.manifests.model import SourceFile
    from devcell.manifests.selectors import Selector
    from devcell.store import client_sets


def apply(state_dir: Path, paths: Sequence[str], *, dry_run: bool = False, prune: bool = False,
          prune_selector: Selector | None = None, options: Options = DEFAULTS,
          hooks: Hooks = NO_HOOKS, keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS) -> Report:
    """Record the objects in `paths` (files, directories, `-` for stdin), all or nothing, then
    converge those that need it.

    prune: also delete objects applied from these paths whose documents are gone (only those
    whose labels match `prune_selector`, when one is given); a pruned cell's workspace is
    kept as a safety snapshot for `keep_pruned` seconds (0: not kept). A dry run
    reports what would change and converges nothing.
    """
    files = loader.read_sources(list(paths))
    roots = [os.path.abspath(p) for p in paths if p != "-"] if prune else None
    return apply_sources(state_dir, files, dry_run=dry_run, prune_roots=roots,
                         prune_selector=prune_selector, options=options, hooks=hooks,
                         keep_pruned=keep_pruned)


def apply_sources(state_dir: Path, files: list[SourceFile], *, dry_run: bool = False,
                  prune_roots: list[str] | None = None, prune_selector: Selector | None = None,
                  options: Options = DEFAULTS, hooks: Hooks = NO_HOOKS,
                  keep_pruned: int = prunes.DEFAULT_KEEP_SECONDS,
                  client_set: client_sets.ClientSet | None = None) -> Report:
    """`apply` of manifests already read (files, or a stream the HTTP API received, with
    `client_set` saying where its client read it and whether it prunes: store.client_sets)."""
    roots = prune_roots
    parsed: dict[str, Any] = {}
    if not (state_dir / dbmod.DB_FILENAME).exists():
        empty = dbmod.Database(state_dir, memory=True)
        try:
            checked = admission.apply(empty, files, dry_run=True, parse_cache=parsed,
                                      require_objects=True)
        finally:
            empty.close()
        if dry_run:
            return _dry(checked, hooks)
    db = dbmod.open_database(state_dir)
    try:
        result = admission.apply(db, files, dry_run=dry_run, prune_roots=roots,
                                 prune_selector=prune_selector, keep_pruned=keep_pruned,
                                 parse_cache=parsed, require_objects=True,
                                 client_set=client_set)
        if dry_run:
            recorded, _ = converging.judge_builds(db, Recorded(tuple(result.changes)),
                                                  record=False)
            return _dry(desired.ApplyResult(list(recorded.changes)), hooks)
        return converging.finish(db, Recorded(tuple(result.changes)), trigger="apply",
                                 options=options, hooks=hooks)
    finally:
        db.close()


def _dry(result: desired.ApplyResult, hooks: Hooks) -> Report:
    recorded = Recorded(tuple(result.changes))
    if hooks.on_recorded is not None:
        hooks.on_recorded(recorded)
    return Report(recorded)


def delete(state_dir: Path, kind: str, name: str, *, options: Options = DEFAULTS,
           hooks: Hooks = NO_HOOKS) -> Report:
    """Ask for one object's deletion (NotFound if there is none) and converge it away."""
    return _delete(state_dir, [(kind, name)], skip_missing=False, options=options, hooks=hooks)


def delete_many(state_dir: Path, kind: str, names: Sequence[str], *,
                selector: Selector | None = None, options: Options = DEFAULTS,
                hooks: Hooks = NO_HOOKS) -> Report:
    """Ask for the deletion of the objects of `kind` named and of those whose labels match
    `selector`, and converge them away. As kubectl does, a name not recorded does not stop
    the others: it is reported in `Recorded.missing`."""
    wanted = list(dict.fromkeys(names))
    if selector is not None and (state_dir / dbmod.DB_FILENAME).exists():
        from devcell.store import views

        db = dbmod.open_database(state_dir)
        try:
            wanted += [n for n in views.names_matching(db.conn, kind, selector)
                       if n not in wanted]
        finally:
            db.close()
    if not wanted:
        return Report(Recorded(()))
    return _delete(state_dir, [(kind, n) for n in wanted], skip_missing=True, options=options,
                   hooks=hooks)


def delete_files(state_dir: Path, paths: Sequence[str], *, options: Options = DEFAULTS,
                 hooks: Hooks = NO_HOOKS) -> Report:
    """Delete the objects the manifests in `paths` declare; those not recorded are skipped
    (reported in `Recorded.missing`)."""
    from devcell.manifests import validate

    targets: list[tuple[str, str]] = []
    problems = []
    place = desired.validator_place_of(state_dir)
    for source in loader.read_sources(list(paths)):
        found, bad = validate.parse_source(source, place)
        problems.extend(bad)
        targets.extend((m.kind, m.name) for m in found)
    if problems:
        raise ManifestError(problems)
    return _delete(state_dir, targets, skip_missing=True, options=options, hooks=hooks)


def _delete(state_dir: Path, targets: list[tuple[str, str]], *, skip_missing: bool,
            options: Options, hooks: Hooks) -> Report:
    from devcell.store import objects

    db = dbmod.open_database(state_dir)
    try:
        missing = [(kind, name) for kind, name in targets
                   if skip_missing and objects.get(db.conn, kind, name) is None]
        wanted = [target for target in targets if target not in missing]
        changes = desired.delete_all(db, wanted)  # all or nothing
        recorded = Recorded(tuple(changes), missing=tuple(missing))
        return converging.finish(db, recorded, trigger="delete", options=options, hooks=hooks,
                                 condition="delete")
    finally:
        db.close()
