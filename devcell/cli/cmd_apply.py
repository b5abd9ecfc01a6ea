"""`apply`, `delete` and `diff`: arguments in, one devcell.api call, its report printed."""

from __future__ import annotations

import argparse
import sys

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


def run_diff(args: argparse.Namespace) -> int:
    """Unified diff of recorded vs. given desired state; exit 1 when they differ, 2 when it
    cannot say (as kubectl: main maps its errors above 1)."""
    from devcell.api import diff
    from devcell.cli import output

    report = diff.diff_sources(dbmod.resolve_state_dir(args.state_dir),
                               loader.read_sources(args.filename))
    return output.write_diff(report)  # its answer kept when the reader closes the pipe
