"""The commands that only print text DevCell ships: `schema`, `explain`, `completion`."""

from __future__ import annotations

import argparse
import sys


def run_schema(args: argparse.Namespace) -> int:
    from devcell import schemas

    sys.stdout.write(schemas.schema_text(args.kind))
    return 0


def run_explain(args: argparse.Namespace) -> int:
    from devcell.cli import explain

    sys.stdout.write(explain.explain(args.target, recursive=args.recursive))
    return 0


def run_completion(args: argparse.Namespace) -> int:
    from devcell.cli import completion

    sys.stdout.write(completion.script(args.shell))
    return 0
