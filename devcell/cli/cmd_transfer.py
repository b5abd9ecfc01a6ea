"""`snapshot export`/`import` and `push`/`pull`: arguments in, one devcell.api.transfer (or
snapshot_registry) call, a line out (on stderr when the archive itself goes to standard
output; progress of a push or pull on stderr)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcell import safeio
from devcell.api import transfer
from devcell.errors import UsageError
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
        with safeio.read_given(args.file) as source:
            done = transfer.import_(state_dir, source, name=args.name,
                                    origin=str(Path(args.file).absolute()))
    files = f"{done.files} file{'' if done.files == 1 else 's'}"
    sys.stdout.write(f"snapshot/{printable(done.name)} imported ({files}, "
                     f"{done.bytes} bytes, backend {done.backend}, sha256 {done.sha256})\n")
    return 0


class _Progress:
    """Bytes moved, on stderr: one line redrawn on a terminal, else a line every 10 s (a
    log keeps a trace of a long push without thousands of lines)."""

    def __init__(self, verb: str) -> None:
        self.verb = verb
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        import time

        moment = time.monotonic()
        if moment - self.last < (0.2 if self.tty else 10.0) and done != total:
            return
        self.last = moment
        text = f"{self.verb}: {done / 2**20:.1f} MiB"
        if total:
            text += f" of {total / 2**20:.1f} MiB ({100 * done // max(total, 1)}%)"
        if self.tty:
            sys.stderr.write(f"\r{text}\x1b[K")
            self.drawn = True
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def end(self) -> None:
        if self.drawn:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def run_snapshot_push(args: argparse.Namespace) -> int:
    from devcell.api import snapshot_registry

    state_dir = dbmod.resolve_state_dir(args.state_dir)
    shown = printable(args.snapshot)
    bar = _Progress(f"pushing snapshot/{shown} (archive written)")
    try:
        done = snapshot_registry.push(state_dir, args.snapshot, args.target,
                                      compression=args.compression, progress=bar)
    finally:
        bar.end()
    sys.stdout.write(f"snapshot/{printable(done.name)} pushed to {printable(done.ref)}@"
                     f"{done.digest} ({done.entries} entries, {done.bytes} bytes; layer "
                     f"{done.layer_bytes} bytes)\n")
    return 0


def run_snapshot_pull(args: argparse.Namespace) -> int:
    from devcell.api import snapshot_registry

    state_dir = dbmod.resolve_state_dir(args.state_dir)
    bar = _Progress(f"pulling {printable(args.source)}")
    try:
        pulled = snapshot_registry.pull(state_dir, args.source, name=args.name, progress=bar)
    finally:
        bar.end()
    done = pulled.imported
    files = f"{done.files} file{'' if done.files == 1 else 's'}"
    sys.stdout.write(f"snapshot/{printable(done.name)} pulled from {printable(pulled.ref)}@"
                     f"{pulled.digest} ({files}, {done.bytes} bytes, backend {done.backend})\n")
    return 0
