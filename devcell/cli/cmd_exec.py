"""`devcell exec CELL -- CMD...` and `devcell logs CELL [SERVICE] [-f]`."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from devcell import backends
from devcell.backends.base import CellRef
from devcell.backends.interactive import Interactive, interactive
from devcell.cli import logs
from devcell.errors import NotFound, UsageError
from devcell.store import objects, volumes
from devcell.store.db import open_database

FOLLOW_POLL_S = 0.2


def _open_cell(args: argparse.Namespace) -> tuple[Interactive, CellRef]:
    logs.configure(args.verbose)
    db = open_database(args.state_dir)
    try:
        cell = objects.require(db.conn, "Cell", args.cell)
        volume = volumes.for_cell(db.conn, cell.id)
    finally:
        db.close()
    backend_name = cell.extra["backend"]
    backend = backends.load(backend_name, Path(db.state_dir))
    ref = CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)
    return interactive(backend, backend_name), ref


def run_exec(args: argparse.Namespace) -> int:
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("give the command to run after --, e.g. devcell exec api -- ls -la")
    backend, ref = _open_cell(args)
    try:
        return backend.exec(ref, argv, stdout=sys.stdout.buffer, stderr=sys.stderr.buffer)
    finally:
        getattr(backend, "close", lambda: None)()


class _Tail:
    """One service's log file, printed as it grows, whole lines only (prefixed if asked)."""

    def __init__(self, path: Path, prefix: bytes) -> None:
        self.path, self.prefix = path, prefix
        self.stream: BinaryIO | None = None
        self.partial = b""

    def pump(self, stack: ExitStack, *, final: bool = False) -> None:
        if self.stream is None:
            if not self.path.exists():
                return
            self.stream = stack.enter_context(self.path.open("rb"))
        data = self.partial + self.stream.read()
        lines = data.splitlines(keepends=True)
        self.partial = lines.pop() if lines and not lines[-1].endswith(b"\n") and not final else b""
        if lines:
            sys.stdout.buffer.write(b"".join(self.prefix + line for line in lines))
            sys.stdout.buffer.flush()


def run_logs(args: argparse.Namespace) -> int:
    backend, ref = _open_cell(args)
    try:
        paths = backend.log_paths(ref)
    finally:
        getattr(backend, "close", lambda: None)()
    if args.service is not None:
        if args.service not in paths:
            known = ", ".join(paths) or "none"
            raise NotFound(f"cell {ref.name} has no service {args.service!r} (services: {known})")
        paths = {args.service: paths[args.service]}
    many = len(paths) > 1
    tails = [_Tail(path, f"[{name}] ".encode() if many else b"") for name, path in paths.items()]
    with ExitStack() as stack:
        for tail in tails:
            tail.pump(stack, final=not args.follow)
        if not args.follow:
            return 0
        try:
            while True:
                time.sleep(FOLLOW_POLL_S)
                for tail in tails:
                    tail.pump(stack)
        except KeyboardInterrupt:
            return 0
