"""`apply -f` and `delete` through a server (cli/remote.py).

apply: the files are read here (every problem of reading them said as `apply -f` says it),
sent as one manifest stream (POST /api/v1/apply: recorded all or nothing, validated as
`apply -f` validates), and each problem the server finds is said at its own file and line:
the stream's lines are mapped back to the files they came from (cli/remote_sources.py, which
also says what a file unreadable on its own gets). What was recorded is printed by
converge_output's printer, the words `apply` prints; with --wait (the default) each
object is then waited for as `apply` waits for a running daemon: Ready, or gone.

--prune: the server is told which of the paths given each part of the stream was read from
(`from`), and prunes what this user applied from them before and the files no longer
declare (store.client_sets), with -l and --keep-pruned as on a state directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace
from typing import Any

from devcell.cli import converge_output as output
from devcell.cli import remote_sources
from devcell.errors import ManifestError, NotFound, Problem, UsageError
from devcell.names import printable


def _refuse(args: argparse.Namespace, flags: tuple[tuple[str, str], ...]) -> None:
    for attr, flag in flags:
        if getattr(args, attr, None):
            raise UsageError(f"{flag} is not served through the DevCell API yet: run the "
                             "command on the server's machine, or without it")


def run_apply(args: argparse.Namespace) -> int:
    from devcell.cli import arguments
    from devcell.manifests import loader

    if args.selector:
        if not args.prune:
            raise UsageError("-l on apply selects what --prune may delete: use it with --prune")
        from devcell.manifests import selectors

        selectors.parse(args.selector)  # refused here, as on a state directory
    keep = arguments.keep_seconds(args.keep_pruned) if args.keep_pruned is not None else None
    _refuse(args, (("approve", "--approve"), ("workers", "--workers")))
    sent = remote_sources.Sent(loader.read_sources(args.filename))
    origins = _origins(args, sent.stream.origins(args.filename))
    doc = sent.ask(lambda body, as_json, only_problems: args.remote.apply(
        body, dry_run=args.dry_run or only_problems, as_json=as_json, source=origins,
        prune=args.prune, selector=args.selector or None, keep_pruned=keep))
    shown = output.changes(" (dry run)" if args.dry_run else "")
    shown(_recorded(doc))
    if args.dry_run or not args.wait:
        return _settled(shown, doc, {})
    return _settled(shown, doc, _wait(args, doc))


MAX_ORIGINS_BYTES = 8 << 10
"""What the paths given may take in the request's query (`from`): a server reads a request's
line and headers up to 16 KiB (uvicorn's h11)."""


def _origins(args: argparse.Namespace, origins: list[tuple[int, str]]
             ) -> list[tuple[int, str]]:
    """The paths to name to the server, when they fit in a request's line: beyond, a prune
    is refused (it could not say where to prune), and an apply is sent without them (said
    once: a later prune through a server will not prune what it records)."""
    import urllib.parse

    size = len(urllib.parse.urlencode([("from", f"{n}:{p}") for n, p in origins]))
    if size <= MAX_ORIGINS_BYTES:
        return origins
    if args.prune:
        raise UsageError(f"--prune through a server: the paths given take {size} bytes of the "
                         f"request, more than {MAX_ORIGINS_BYTES}: give fewer paths (their "
                         "folder), or run it on the server's machine")
    from devcell.cli import remote

    remote.warn(f"the paths given take {size} bytes of the request, more than "
                f"{MAX_ORIGINS_BYTES}: the server is not told where the manifests were read, "
                "and a later `apply --prune` through a server will not prune these objects")
    return []


def run_diff(args: argparse.Namespace) -> int:
    """`devcell diff -f` through the server: the same diff, each manifest's file named as
    on a state directory (the stream's lines mapped back to the files)."""
    from devcell.api import diff
    from devcell.manifests import loader

    sent = remote_sources.Sent(loader.read_sources(args.filename))
    doc = sent.ask(lambda body, as_json, _: args.remote.diff(body, as_json=as_json))
    from devcell.cli import output

    return output.write_diff(diff.DiffReport.of_document(doc, sent.stream.file_at))


def run_delete(args: argparse.Namespace) -> int:
    from devcell.cli.cmd_get import NAMES_AND_SELECTOR

    if args.filename and (args.kind or args.names or args.selector):
        raise UsageError("give either -f PATH or KIND NAME... / KIND -l SELECTOR, not both")
    if not args.filename and not (args.kind and (args.names or args.selector)):
        raise UsageError("delete needs -f PATH, KIND NAME... or KIND -l SELECTOR "
                         "(e.g. devcell delete cell api)")
    if args.names and args.selector:
        raise UsageError(NAMES_AND_SELECTOR)
    _refuse(args, (("approve", "--approve"), ("workers", "--workers")))
    client = args.remote
    plural = {"Cell": "cells", "Snapshot": "snapshots"}
    if args.filename:
        targets = _declared(args.filename)
    elif args.selector:
        from devcell.manifests import selectors

        selectors.parse(args.selector)  # refused here, as on a state directory
        listed = client.rows(plural[args.kind], selector=args.selector)
        targets = [(args.kind, item["row"]["name"]) for item in listed.get("items", [])
                   if item["row"].get("deleted_at") is None]
    else:
        targets = [(args.kind, name) for name in dict.fromkeys(args.names)]
    changes: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    one = len(targets) == 1 and not args.filename and not args.selector
    for kind, name in targets:
        try:
            changes += client.delete(plural[kind], name)["changes"]
        except NotFound:
            if one:  # `delete cell NAME` says it as an error, with a "did you mean"
                raise
            missing.append({"kind": kind, "name": name})
    doc = {"changes": changes, "missing": missing, "results": [], "expired": [], "ok": True}
    shown = output.changes()
    shown(_recorded(doc))
    code = _settled(shown, doc, _wait(args, doc))
    if not args.filename and not args.names and not changes:
        sys.stderr.write("No resources found\n")
    return code or (1 if missing and not args.filename else 0)


def _declared(paths: list[str]) -> list[tuple[str, str]]:
    """(kind, name) of each object the files declare, as `delete -f` reads them."""
    from devcell.manifests import loader, validate

    targets: list[tuple[str, str]] = []
    problems: list[Problem] = []
    for source in loader.read_sources(paths):
        found, bad = validate.parse_source(source)
        problems.extend(bad)
        targets.extend((m.kind, m.name) for m in found)
    if problems:
        raise ManifestError(problems)
    return targets


def _recorded(doc: dict[str, Any]) -> Any:
    """The server's answer as the record converge_output prints."""
    return SimpleNamespace(
        missing=[(m["kind"], m["name"]) for m in doc.get("missing", [])],
        changes=[SimpleNamespace(kind=c["kind"], name=c["name"], outcome=c["outcome"])
                 for c in doc.get("changes", [])])


def _wait(args: argparse.Namespace, doc: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """Each changed object waited for (Ready; a deletion: gone) within --timeout, as `apply`
    waits for a running daemon; (kind, name) -> how one did not settle (remote_wait.Waited:
    why, and whether an operation of it waits for approval)."""
    from devcell.cli import remote_wait

    deadline = time.monotonic() + args.timeout
    unsettled: dict[tuple[str, str], Any] = {}
    for c in doc.get("changes", []):
        if c["kind"] not in remote_wait.PLURAL:
            continue
        gone = c["outcome"] in output.DELETIONS
        done = remote_wait.until(args.remote, c["kind"], c["name"],
                                 condition="delete" if gone else "Ready", want="True",
                                 deadline=deadline, timeout=args.timeout)
        if done.failed is not None:
            unsettled[(c["kind"], c["name"])] = done
    return unsettled


def _settled(shown: Any, doc: dict[str, Any], unsettled: dict[tuple[str, str], Any]) -> int:
    """The deferred deletions printed as converging ended, an error line for each object
    that did not settle; the exit code `apply` and `delete` give."""
    from devcell.api.reports import Status

    objects = [SimpleNamespace(kind=kind, name=name, status=Status.WAITING,
                               awaiting_approval=True if done.gated else None)
               for (kind, name), done in unsettled.items()]
    shown.settled(SimpleNamespace(converged=SimpleNamespace(
        objects=objects, expired=list(doc.get("expired", [])))))
    for (kind, name), done in unsettled.items():
        sys.stderr.write(printable(f"error: {kind.lower()}/{name}: {done.failed}") + "\n")
    return 0 if doc.get("ok", True) and not unsettled else 1
