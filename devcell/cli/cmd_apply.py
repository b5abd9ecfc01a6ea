"""`apply`, `delete` and `diff`: arguments in, one devcell.api call, its report printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from devcell.api import apply as api
from devcell.cli import arguments
from devcell.cli import converge_output as output
from devcell.errors import UsageError
from devcell.manifests import loader
from devcell.store import db as dbmod


def run_apply(args: argparse.Namespace) -> int:
    prune_selector = None
    if args.selector:
        if not args.prune:
            raise UsageError("-l on apply selects what --prune may delete: use it with --prune")
        from devcell.manifests import selectors

        prune_selector = selectors.parse(args.selector)
    shown = output.changes(" (dry run)" if args.dry_run else "")
    try:
        report = api.apply(
            dbmod.resolve_state_dir(args.state_dir), args.filename, dry_run=args.dry_run,
            prune=args.prune, prune_selector=prune_selector,
            keep_pruned=arguments.keep_seconds(args.keep_pruned),
            options=output.options(args, wait=args.wait, approve=args.approve,
                                   workers=args.workers),
            hooks=output.hooks(args, shown))
    except BaseException:  # interrupted while converging: say what was recorded
        shown.unsettled()
        raise
    return output.exit_code(report, shown)


def run_delete(args: argparse.Namespace) -> int:
    if args.filename and (args.kind or args.names or args.selector):
        raise UsageError("give either -f PATH or KIND NAME... / KIND -l SELECTOR, not both")
    if not args.filename and not (args.kind and (args.names or args.selector)):
        raise UsageError("delete needs -f PATH, KIND NAME... or KIND -l SELECTOR "
                         "(e.g. devcell delete cell api)")
    if args.names and args.selector:
        from devcell.cli.cmd_get import NAMES_AND_SELECTOR

        raise UsageError(NAMES_AND_SELECTOR)
    selector = None
    if args.selector:
        from devcell.manifests import selectors

        selector = selectors.parse(args.selector)
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    how = output.options(args, approve=args.approve, workers=args.workers)
    shown = output.changes()
    show = output.hooks(args, shown)
    try:
        if args.filename:
            report = api.delete_files(state_dir, args.filename, options=how, hooks=show)
        elif len(args.names) == 1 and selector is None:
            report = api.delete(state_dir, args.kind, args.names[0], options=how, hooks=show)
        else:
            report = api.delete_many(state_dir, args.kind, args.names, selector=selector,
                                     options=how, hooks=show)
    except BaseException:  # interrupted while converging: say what was recorded
        shown.unsettled()
        raise
    code = output.exit_code(report, shown)
    if not args.filename and not args.names and not report.recorded.changes:
        sys.stderr.write("No resources found\n")
    # kubectl: a name that is not there fails the command, after the others are deleted
    return code or (1 if report.recorded.missing and not args.filename else 0)


def _yaml_lines(doc: dict[str, Any]) -> list[str]:
    import yaml

    # Keys sorted: the order a spec was written in (or get printed it in) is no change.
    return yaml.safe_dump(doc, sort_keys=True).splitlines(keepends=True)


def _build_images(db: dbmod.Database, existing: Any, m: Any, label: str
                  ) -> tuple[str, str] | None:
    """(the image the cell's runtime was made from, the one its build names now), the same
    twice when they agree or nothing was recorded; None (with a warning) when the build's
    inputs cannot be judged."""
    from devcell.errors import BackendError
    from devcell.names import printable
    from devcell.reconciler import build_inputs

    try:
        moved = build_inputs.compare(db, existing.id, m.name, existing.extra["backend"],
                                     m.spec, m.source, existing.status)
    except BackendError as exc:
        sys.stderr.write(printable(f"warning: {label}: cannot say whether its build's inputs "
                                   f"changed: {exc}") + "\n")
        return None
    return moved or ("", "")


def _sidecar_images(db: dbmod.Database, existing: Any, m: Any, label: str
                    ) -> dict[str, tuple[str, str]] | None:
    """Each built sidecar whose image moved: (the image it runs, the one its build names
    now); None (with a warning) when that cannot be judged."""
    from devcell.errors import BackendError
    from devcell.names import printable
    from devcell.reconciler import build_inputs

    try:
        return build_inputs.compare_sidecars(db, existing.id, m.name, existing.extra["backend"],
                                             m.spec, m.source, existing.status)
    except BackendError as exc:
        sys.stderr.write(printable(f"warning: {label}: cannot say whether a sidecar's build "
                                   f"inputs changed: {exc}") + "\n")
        return None


def run_diff(args: argparse.Namespace) -> int:
    """Unified diff of recorded vs. given desired state; exit 1 when they differ (as kubectl)."""
    import difflib  # diff only: `apply` shares this module

    from devcell.errors import ManifestError
    from devcell.manifests import secrets, validate
    from devcell.names import printable
    from devcell.store import desired, objects, preconditions

    manifests = []
    problems = []
    place = desired.validator_place_of(dbmod.resolve_state_dir(args.state_dir))
    for source in loader.read_sources(args.filename):
        found, bad = validate.parse_source(source, place)
        manifests.extend(found)
        problems.extend(bad)
    if problems:
        raise ManifestError(problems)
    db = dbmod.open_database(args.state_dir)
    manifests, hidden = preconditions.unredacted(db.conn, manifests)  # as apply takes them
    if hidden:
        raise ManifestError(hidden)
    differs = False
    for m in manifests:
        existing = objects.get(db.conn, m.kind, m.name)
        if existing is None and desired.expired_again(db.conn, m):
            continue  # an apply would not take it again: nothing would change
        old_lines: list[str] = []
        if existing is not None:
            # Secrets never printed: a changed one shows as `<secret changed>`.
            old_spec, new_spec = secrets.redact_pair(existing.spec, m.spec)
            old = {"metadata": {"name": existing.name, "labels": existing.labels,
                                "annotations": existing.annotations}, "spec": old_spec}
            old_lines = _yaml_lines(old)
        else:
            new_spec = secrets.redact(m.spec)
        new = {"metadata": {"name": m.name, "labels": m.labels, "annotations": m.annotations},
               "spec": new_spec}
        label = f"{m.kind.lower()}/{m.name}"
        if existing is not None and m.kind == "Cell" and (
                m.spec.get("build") is not None or m.spec.get("features")):
            images = _build_images(db, existing, m, label)
            if images is None:
                differs = True  # cannot say: never "no difference"
            elif images[0] != images[1]:  # the build's inputs changed, the manifest need not
                old["status"] = {"build": {"image": images[0]}}
                new["status"] = {"build": {"image": images[1]}}
                old_lines = _yaml_lines(old)
        if existing is not None and m.kind == "Cell" and any(
                s.get("build") is not None for s in m.spec.get("sidecars") or []):
            sidecars = _sidecar_images(db, existing, m, label)
            if sidecars is None:
                differs = True
            elif sidecars:  # a sidecar's build inputs changed: as the cell's own, shown
                for side, which in ((old, 0), (new, 1)):
                    build = side.setdefault("status", {}).setdefault("build", {})
                    build["sidecars"] = {n: pair[which] for n, pair in sidecars.items()}
                old_lines = _yaml_lines(old)
        diff = list(difflib.unified_diff(old_lines, _yaml_lines(new), fromfile=f"recorded/{label}",
                                         tofile=f"{printable(m.file)}/{label}"))
        if diff:
            differs = True
            sys.stdout.writelines(diff)
        if existing is not None and m.kind == "Cell":
            _say_hold(existing, m.spec, label)
    return 1 if differs else 0


def _say_hold(existing: Any, spec: dict[str, Any], label: str) -> None:
    """A held cell (store/holds.py): which state an apply of this manifest leaves it in. Said
    as a comment, after the diff: a hold is no difference of the manifest (the exit code
    does not count it), but a reader must see that the running cell is not what it says."""
    from devcell.names import printable
    from devcell.store import holds

    hold = holds.of(existing)
    if hold is None:
        return
    declared = holds.declared_state(spec)
    if declared != holds.declared_state(existing.spec):
        what = f"an apply ends it: the manifest's state {declared} wins"
    else:
        what = f"an apply leaves it {hold.state} (the manifest says {declared})"
    sys.stdout.write(printable(f"# {label}: {hold.describe()}; {what}") + "\n")
