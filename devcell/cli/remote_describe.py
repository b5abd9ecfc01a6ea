"""`describe` through a server (cli/remote.py): each object's text as the server's
api.describe makes it (GET /api/v1/KIND/NAME/describe, the code `describe` runs on a state
directory), printed in the same order with the same separators, a name not found said and
counted as `describe` says and counts it."""

from __future__ import annotations

import argparse
import sys

from devcell.errors import NotFound

PLURAL = {"Cell": "cells", "Snapshot": "snapshots", "Operation": "operations"}


def run_describe(args: argparse.Namespace) -> int:
    from devcell.cli.cmd_get import check_describe_args

    check_describe_args(args)
    client = args.remote
    names = list(dict.fromkeys(args.names))
    if args.selector:
        from devcell.manifests import selectors

        selectors.parse(args.selector)  # refused here, as on a state directory
        listed = client.rows(PLURAL[args.kind], selector=args.selector)
        names = [item["row"]["name"] for item in listed.get("items", [])
                 if item["row"].get("deleted_at") is None]
    missing = 0
    for i, name in enumerate(names):
        if i:
            sys.stdout.write("\n\n")
        try:
            sys.stdout.write(client.describe(PLURAL[args.kind], name))
        except NotFound as exc:
            sys.stdout.flush()
            sys.stderr.write(f"error: {exc}\n")
            missing += 1
    if not names:
        sys.stderr.write("No resources found.\n")
    return NotFound.exit_code if missing else 0
