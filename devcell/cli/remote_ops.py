"""`op resume` and `op cancel` through a server (cli/remote.py).

The gate's answers are read here as `op resume` reads them (--input KEY=VALUE, --input-file
FILE: the same refusals), sent as JSON; the server checks them against the gate's question
(a wrong answer: the same located problems, the operation still suspended). A resume then
waits, within --timeout, for the operation to end as the daemon continues it, and says how it
ended; a cancel is done when recorded.
"""

from __future__ import annotations

import argparse
import sys
import time

from devcell.names import printable

POLL_SECONDS = 0.2


def run_op_resume(args: argparse.Namespace) -> int:
    from devcell.api import ops

    given = ops.parse_inputs(args.input or [], args.input_file or [])
    doc = args.remote.resume_operation(args.operation, given)
    op_id = str(doc.get("id", args.operation))
    sys.stdout.write(printable(f"operation/{op_id} approved") + "\n")
    sys.stdout.flush()
    deadline = time.monotonic() + float(args.timeout)
    while doc.get("status") in ("Suspended", "Running", "Pending"):
        if time.monotonic() >= deadline:
            sys.stderr.write(printable(
                f"error: operation {op_id} is still {doc.get('status')} after "
                f"{float(args.timeout):g}s: the daemon goes on with it (devcell get "
                f"operations, devcell describe op {op_id})") + "\n")
            return 1
        time.sleep(POLL_SECONDS)
        doc = args.remote.get("operations", op_id)
    if doc.get("status") == "Succeeded":
        return 0
    said = doc.get("message") or doc.get("reason") or "failed"
    sys.stderr.write(printable(f"error: operation {op_id} {doc.get('status')}: {said}") + "\n")
    return 1


def run_op_cancel(args: argparse.Namespace) -> int:
    doc = args.remote.cancel_operation(args.operation)
    sys.stdout.write(printable(f"operation/{doc.get('id', args.operation)} cancelled") + "\n")
    return 0
