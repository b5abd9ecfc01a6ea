"""`devcell context list|use|set|delete`: the contexts file (cli/contexts.py), as kubectl's
`config get-contexts|use-context|set-context|delete-context` keep a kubeconfig."""

from __future__ import annotations

import argparse
import os
import sys

from devcell.api import render
from devcell.cli import contexts
from devcell.errors import NotFound, UsageError
from devcell.names import printable


def run_list(args: argparse.Namespace) -> int:
    doc = contexts.load()
    if args.output == "json":
        import json

        sys.stdout.write(json.dumps({"current": doc["current"], "contexts": doc["contexts"]},
                                    indent=2, sort_keys=True) + "\n")
        return 0
    if not doc["contexts"]:
        sys.stderr.write(f"No contexts in {printable(str(contexts.path()))} (devcell context "
                         "set NAME --server URL).\n")
        return 0
    render.table(["CURRENT", "NAME", "SERVER", "TOKEN-FILE", "CERTIFICATE-AUTHORITY"],
                 [["*" if name == doc["current"] else " ", name, ctx["server"],
                   ctx.get("tokenFile"), ctx.get("certificateAuthority")]
                  for name, ctx in sorted(doc["contexts"].items())])
    return 0


def run_use(args: argparse.Namespace) -> int:
    doc = contexts.load()
    if args.none:
        if args.name is not None:
            raise UsageError("give NAME or --none, not both")
        if doc["current"] is not None:  # nothing to write (and no file made) otherwise
            doc["current"] = None
            contexts.save(doc)
        sys.stdout.write("no current context: commands use the state directory\n")
        return 0
    if args.name is None:
        raise UsageError("context use needs NAME (or --none to use the state directory)")
    if args.name not in doc["contexts"]:
        raise NotFound(f"context {printable(args.name)!r} not found in "
                       f"{printable(str(contexts.path()))}")
    doc["current"] = args.name
    contexts.save(doc)
    sys.stdout.write(printable(f"current context: {args.name}") + "\n")
    return 0


def run_set(args: argparse.Namespace) -> int:
    from devcell.cli import remote

    _check_name(args.name)
    doc = contexts.load()
    ctx = dict(doc["contexts"].get(args.name, {}))
    if args.server is not None:
        ctx["server"] = remote.check_url(args.server)
    for key, given in (("tokenFile", args.token_file),
                       ("certificateAuthority", args.certificate_authority)):
        if given == "":
            ctx.pop(key, None)
        elif given is not None:
            ctx[key] = os.path.abspath(given)
    if "server" not in ctx:
        raise UsageError(f"context {printable(args.name)!r} is new: give its --server URL")
    if ctx.get("tokenFile"):
        remote.read_token(ctx["tokenFile"])  # a file that cannot be used is refused now
    made = args.name not in doc["contexts"]
    doc["contexts"][args.name] = ctx
    if args.use:
        doc["current"] = args.name
    where = contexts.save(doc)
    sys.stdout.write(printable(f"context {args.name} {'created' if made else 'configured'} "
                               f"in {where}") + (" (current)" if args.use else "") + "\n")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    doc = contexts.load()
    if args.name not in doc["contexts"]:
        raise NotFound(f"context {printable(args.name)!r} not found in "
                       f"{printable(str(contexts.path()))}")
    del doc["contexts"][args.name]
    if doc["current"] == args.name:
        doc["current"] = None
    contexts.save(doc)
    sys.stdout.write(printable(f"context {args.name} deleted") + "\n")
    return 0


def _check_name(name: str) -> None:
    if not name or len(name) > 253 or not name.isprintable() or name.strip() != name:
        raise UsageError(f"context name {printable(name)!r}: 1 to 253 printable characters, "
                         "no spaces around it")
