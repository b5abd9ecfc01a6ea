"""`op resume` and `op cancel`: arguments in, one devcell.api call, its report printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from devcell.api import ops
from devcell.api.reports import Recorded
from devcell.cli import converge_output as output
from devcell.store import db as dbmod


def run_op_resume(args: argparse.Namespace) -> int:
    return output.exit_code(ops.resume(
        dbmod.resolve_state_dir(args.state_dir), args.operation, inputs=args.input or [],
        input_files=args.input_file or [], options=output.options(args),
        hooks=output.hooks(args, _said("approved"))))


def run_op_cancel(args: argparse.Namespace) -> int:
    return output.exit_code(ops.cancel(
        dbmod.resolve_state_dir(args.state_dir), args.operation, options=output.options(args),
        hooks=output.hooks(args, _said("cancelled"))))


def _said(word: str) -> Callable[[Recorded], None]:
    def show(recorded: Recorded) -> None:
        sys.stdout.write(f"operation/{recorded.operation} {word}\n")
        sys.stdout.flush()
    return show
