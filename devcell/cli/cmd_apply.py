"""`apply`, `delete` and `diff`."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any

from devcell import admission
from devcell.cli.converge_output import converge_and_report
from devcell.errors import UsageError
from devcell.manifests import loader
from devcell.store import db as dbmod
from devcell.store import desired


def run_apply(args: argparse.Namespace) -> int:
    files = loader.read_sources(args.filename)
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    roots = [os.path.abspath(p) for p in args.filename if p != "-"] if args.prune else None
    parsed: dict[str, Any] = {}
    if not (state_dir / dbmod.DB_FILENAME).exists():
        # First apply: validate against an empty in-memory state, so bad input creates nothing.
        result = admission.apply(dbmod.Database(state_dir, memory=True), files, dry_run=True,
                               parse_cache=parsed)
        if args.dry_run:
            _print_changes(result, " (dry run)")
            return 0
    db = dbmod.open_database(state_dir)
    result = admission.apply(db, files, dry_run=args.dry_run, prune_roots=roots,
                           parse_cache=parsed)
    _print_changes(result, " (dry run)" if args.dry_run else "")
    if args.dry_run:
        return 0
    return converge_and_report(db, result.to_reconcile, verbose=args.verbose,
                               timeout=args.timeout, trigger="apply", wait=args.wait,
                               run_store=args.run_store, approve=args.approve,
                               workers=args.workers)


def _print_changes(result: desired.ApplyResult, suffix: str) -> None:
    out = sys.stdout
    out.write("".join(f"{c.kind.lower()}/{c.name} {c.outcome}{suffix}\n" for c in result.changes))
    out.flush()


def run_delete(args: argparse.Namespace) -> int:
    if args.filename and (args.kind or args.name):
        raise UsageError("give either -f PATH or KIND NAME, not both")
    targets: list[tuple[str, str]] = []
    if args.filename:
        from devcell.errors import ManifestError
        from devcell.manifests import validate

        problems = []
        for source in loader.read_sources(args.filename):
            found, bad = validate.parse_source(source)
            problems.extend(bad)
            targets.extend((m.kind, m.name) for m in found)
        if problems:
            raise ManifestError(problems)
    elif args.kind and args.name:
        targets.append((args.kind, args.name))
    else:
        raise UsageError("delete needs -f PATH or KIND NAME (e.g. devcell delete cell api)")
    db = dbmod.open_database(args.state_dir)
    from devcell.store import objects

    changes = []
    for kind, name in targets:
        if args.filename and objects.get(db.conn, kind, name) is None:
            sys.stdout.write(f"{kind.lower()}/{name} not found\n")
            continue
        changes.append(desired.delete(db, kind, name))
    for c in changes:
        sys.stdout.write(f"{c.kind.lower()}/{c.name} deleted\n")
    sys.stdout.flush()
    keys = [(c.kind, c.object_id) for c in changes if c.object_id]
    return converge_and_report(db, keys, verbose=args.verbose, timeout=args.timeout,
                               trigger="delete", run_store=args.run_store, approve=args.approve,
                               condition="delete", workers=args.workers)


def _yaml_lines(doc: dict[str, Any]) -> list[str]:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False).splitlines(keepends=True)


def run_diff(args: argparse.Namespace) -> int:
    """Unified diff of recorded vs. given desired state; exit 1 when they differ (as kubectl)."""
    from devcell.errors import ManifestError
    from devcell.manifests import validate
    from devcell.store import objects, views

    manifests = []
    problems = []
    for source in loader.read_sources(args.filename):
        found, bad = validate.parse_source(source)
        manifests.extend(found)
        problems.extend(bad)
    if problems:
        raise ManifestError(problems)
    db = dbmod.open_database(args.state_dir)
    differs = False
    for m in manifests:
        new = {"metadata": {"name": m.name, "labels": m.labels, "annotations": m.annotations},
               "spec": views.redact_spec(m.spec)}
        existing = objects.get(db.conn, m.kind, m.name)
        old_lines: list[str] = []
        if existing is not None:
            old = {"metadata": {"name": existing.name, "labels": existing.labels,
                                "annotations": existing.annotations},
                   "spec": views.redact_spec(existing.spec)}
            old_lines = _yaml_lines(old)
        label = f"{m.kind.lower()}/{m.name}"
        diff = list(difflib.unified_diff(old_lines, _yaml_lines(new),
                                         fromfile=f"recorded/{label}", tofile=f"{m.file}/{label}"))
        if diff:
            differs = True
            sys.stdout.writelines(diff)
    return 1 if differs else 0
