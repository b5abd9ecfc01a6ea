"""`snapshot export` and `snapshot import`: arguments in, one devcell.api.transfer call, a line
out (on stderr when the archive itself goes to standard output)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcell import safeio
from devcell.api import transfer
from devcell.errors import DevCellError, UsageError
from devcell.names import printable
from devcell.store import db as dbmod


def run_snapshot_export(args: argparse.Namespace) -> int:
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    if args.output == "-":
        if sys.stdout.isatty():
            raise UsageError("refusing to write an archive to a terminal; use -o FILE or "
                             "redirect standard output")
        done = transfer.export(state_dir, args.snapshot, sys.stdout.buffer)
        where, report = "standard output", sys.stderr
    else:
        target = Path(args.output)
        if target.is_dir():
            raise UsageError(f"{printable(args.output)} is a directory; -o names the archive file")
        done = transfer.export(state_dir, args.snapshot, target)
        where, report = printable(args.output), sys.stdout
    report.write(f"snapshot/{printable(done.name)} exported to {where} ({done.entries} entries, "
                 f"{done.bytes} bytes, sha256 {done.sha256})\n")
    if done.skipped:
        sys.stderr.write(f"warning: {done.skipped} FIFOs, sockets or device nodes in the "
                         "checkpoint were left out (an archive carries no special files)\n")
    return 0


def run_snapshot_import(args: argparse.Namespace) -> int:
    state_dir = dbmod.resolve_state_dir(args.state_dir)
    if args.file == "-":
        done = transfer.import_(state_dir, sys.stdin.buffer, name=args.name, origin="-")
    else:
        try:
            source = open(safeio.open_given(args.file), "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise DevCellError(f"cannot read {printable(args.file)}: {exc.strerror}") from None
        with source:
            done = transfer.import_(state_dir, source, name=args.name,
                                    origin=str(Path(args.file).absolute()))
    files = f"{done.files} file{'' if done.files == 1 else 's'}"
    sys.stdout.write(f"snapshot/{printable(done.name)} imported ({files}, "
                     f"{done.bytes} bytes, backend {done.backend}, sha256 {done.sha256})\n")
    return 0
