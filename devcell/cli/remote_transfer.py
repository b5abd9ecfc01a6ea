"""`devcell --server URL snapshot export|import|push|pull`: the archive streamed from or to
the server (GET /api/v1/snapshots/NAME/archive, POST /api/v1/snapshots/import), or pushed and
pulled by the server with its own registry logins (an admin's), with the lines, files and
exit codes the commands have on the state directory (cli/cmd_transfer.py).

The archive is written where the local export writes it (standard output, or a file made
whole or not at all: safeio.destination), read from where the local import reads it (a file,
or `-` for standard input), and is never held whole on either side. What the export
recorded (its figures) is read from its operation once the archive has arrived.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcell import safeio
from devcell.errors import UsageError
from devcell.names import printable


def run_snapshot_export(args: argparse.Namespace) -> int:
    if args.output == "-":
        if sys.stdout.isatty():
            raise UsageError("refusing to write an archive to a terminal; use -o FILE or "
                             "redirect standard output")
        done = args.remote.export_snapshot(args.snapshot, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        where, report = "standard output", sys.stderr
    else:
        target = Path(args.output)
        if target.is_dir():
            raise UsageError(f"{printable(args.output)} is a directory; -o names the archive file")
        with safeio.destination(target) as stream:
            done = args.remote.export_snapshot(args.snapshot, stream)
        where, report = printable(args.output), sys.stdout
    report.write(f"snapshot/{printable(done['name'])} exported to {where} ({done['entries']} "
                 f"entries, {done['bytes']} bytes, sha256 {printable(done['sha256'])})\n")
    if done["skipped"]:
        sys.stderr.write(f"warning: {done['skipped']} FIFOs, sockets or device nodes in the "
                         "checkpoint were left out (an archive carries no special files)\n")
    return 0


def run_snapshot_import(args: argparse.Namespace) -> int:
    if args.file == "-":
        done = args.remote.import_snapshot(sys.stdin.buffer, name=args.name, origin="-")
    else:
        with safeio.read_given(args.file) as source:
            done = args.remote.import_snapshot(source, name=args.name,
                                               origin=str(Path(args.file).absolute()))
    files = f"{done['files']} file{'' if done['files'] == 1 else 's'}"
    sys.stdout.write(f"snapshot/{printable(done['name'])} imported ({files}, "
                     f"{done['bytes']} bytes, backend {printable(done['backend'])}, sha256 "
                     f"{printable(done['sha256'])})\n")
    return 0


def run_snapshot_push(args: argparse.Namespace) -> int:
    """`snapshot push` by the server, with its registry logins (an admin's); no progress
    lines: the server does not stream them."""
    done = args.remote.push_snapshot(args.snapshot, args.target, compression=args.compression)
    sys.stdout.write(f"snapshot/{printable(done['name'])} pushed to {printable(done['ref'])}@"
                     f"{printable(done['digest'])} ({done['entries']} entries, {done['bytes']} "
                     f"bytes; layer {done['layerBytes']} bytes)\n")
    return 0


def run_snapshot_pull(args: argparse.Namespace) -> int:
    """`snapshot pull` by the server, with its registry logins (an admin's)."""
    done = args.remote.pull_snapshot(args.source, name=args.name)
    files = f"{done['files']} file{'' if done['files'] == 1 else 's'}"
    sys.stdout.write(f"snapshot/{printable(done['name'])} pulled from {printable(done['ref'])}@"
                     f"{printable(done['digest'])} ({files}, {done['bytes']} bytes, backend "
                     f"{printable(done['backend'])})\n")
    return 0
