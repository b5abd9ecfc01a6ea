"""`devcell logs CELL [SERVICE] [-f] [--tail N] [--since D] [--timestamps]`: a cell's service
logs, read as hostile files in bounded amounts, printed escaped."""

from __future__ import annotations

import argparse
import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from devcell import names, safeio
from devcell.backends import log_source
from devcell.backends.base import CellRef
from devcell.backends.log_source import LogSource, ServiceLogs
from devcell.cli import log_lines
from devcell.cli.cell_open import open_cell
from devcell.errors import NotFound, UsageError

if TYPE_CHECKING:
    from devcell.api.attach import Attached

FOLLOW_POLL_S = 0.2


class _Tail:
    """One service's log, printed as it grows, whole lines only (prefixed if asked).

    The log is the cell's to write, so it is read through a backend's LogSource (a host file
    opened without following links, or a file in a vm's guest read through its agent; either
    refused when not a regular file) in bounded amounts: at first only its last INITIAL_MAX
    bytes, then at most PUMP_MAX at a time up to the size it had when the turn began (printed
    before the next is read, at most PUMP_ROUNDS a turn), and a line longer than LINE_MAX is
    printed in pieces rather than held. A log that shrank (truncated, rotated) is read again
    from its start.
    """

    INITIAL_MAX = 8 << 20
    PUMP_MAX = 4 << 20
    PUMP_ROUNDS = 16
    LINE_MAX = 1 << 20

    def __init__(self, source: LogSource | Path, prefix: bytes, *,
                 lines: log_lines.LineFilter | None = None, tail: int | None = None) -> None:
        self.owned = isinstance(source, Path)
        self.source: LogSource = log_source.HostLog(source) if isinstance(source, Path) \
            else source
        self.prefix = prefix
        self.lines = lines or log_lines.LineFilter(timestamps=True)  # as written
        self.tail = tail
        self.pos: int | None = None
        self.refused = False
        self.partial = b""

    def _size(self, stack: ExitStack | None) -> int | None:
        try:
            size = self.source.size()
        except safeio.UnsafeFile as exc:
            self.refused = True
            sys.stderr.write(f"devcell: skipping {names.printable(str(exc))}\n")
            return None
        if size is not None and self.pos is None:
            if self.owned and stack is not None and isinstance(self.source, log_source.HostLog):
                stack.callback(self.source.close)
            self.pos = self._start(size)
        return size

    def _start(self, size: int) -> int:
        label = names.printable(self.source.label)
        if self.tail is not None:
            start = log_lines.tail_offset(self.source.read, size, self.tail, self.INITIAL_MAX,
                                          block=self.source.block)
            if self.tail > 0 and start > 0 and size - start >= self.INITIAL_MAX:
                sys.stderr.write(f"devcell: {label}: its last {self.tail} lines hold more "
                                 f"than {self.INITIAL_MAX >> 20} MiB; showing the lines of "
                                 "its last 8 MiB\n")
            return start
        if size > self.INITIAL_MAX:
            sys.stderr.write(f"devcell: {label}: showing its last {self.INITIAL_MAX >> 20} MiB "
                             f"of {size} bytes\n")
            return size - self.INITIAL_MAX
        return 0

    def pump(self, stack: ExitStack | None = None, *, final: bool = False) -> None:
        if self.refused:
            return
        try:
            self._pump(stack, final=final)
        finally:
            self.source.release()  # one log open at a time, however many the cell made

    def _pump(self, stack: ExitStack | None, *, final: bool) -> None:
        size = self._size(stack)
        if size is None:
            return
        assert self.pos is not None
        if self.pos > size:
            self.pos = 0  # truncated (rotated): from the start again
        for _ in range(self.PUMP_ROUNDS):  # a cell writing without pause cannot keep us here
            want = min(self.PUMP_MAX, size - self.pos)
            chunk = self.source.read(self.pos, want)[:want] if want > 0 else b""
            self.pos += len(chunk)
            last = self.pos >= size or len(chunk) < want
            self._print(self.partial + chunk, final=final and last)
            if last:
                return

    def _print(self, data: bytes, *, final: bool) -> None:
        lines = data.splitlines(keepends=True)
        keep = lines and not lines[-1].endswith(b"\n") and not final
        self.partial = lines.pop() if keep else b""
        if len(self.partial) > self.LINE_MAX:
            lines.append(self.partial)
            self.partial = b""
        shown = [self.prefix + _shown(kept) for kept in map(self.lines, lines) if kept is not None]
        if shown:
            sys.stdout.buffer.write(b"".join(shown))
            sys.stdout.buffer.flush()


_NUL_RUN = re.compile("\x00{8,}")


def _shown(line: bytes) -> bytes:
    """A log line as printed: the cell wrote it, so control characters (an ESC sequence, a
    carriage return forging a line) are escaped like every other string from a cell; tabs and
    the line's end (\n or \r\n) are kept."""
    end = b"\r\n" if line.endswith(b"\r\n") else b"\n" if line.endswith(b"\n") else b""
    text = line[:len(line) - len(end)].decode("utf-8", "backslashreplace")
    if not text.replace("\t", "").isprintable():
        text = _NUL_RUN.sub(lambda run: f"<{len(run.group())} NUL bytes>", text)  # sparse holes
        text = "\t".join(names.printable(part) for part in text.split("\t"))
    return text.encode() + end


def run_logs(args: argparse.Namespace) -> int:
    try:
        since = (None if args.since is None
                 else log_lines.since_cutoff(args.since, time.time()))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    attached = open_cell(args, verb="showing its logs as last written")
    try:
        if args.sidecar is not None:
            _print_sidecar(args, attached, since)
            return 0
        _say_sidecars(attached.ref)
        _print_logs(args, attached.ref, attached.interactive().log_sources(attached.ref), since)
    except KeyboardInterrupt:  # Ctrl-C ends a follow normally, also while the backlog prints
        if not args.follow:
            raise
    finally:
        attached.close()
    return 0


def _sidecar_names(ref: CellRef) -> list[str]:
    return [str(s.get("name")) for s in ref.spec.get("sidecars") or [] if isinstance(s, dict)]


def _say_sidecars(ref: CellRef) -> None:
    """Which sidecars the cell has: their output is the engine's, not in these logs."""
    found = _sidecar_names(ref)
    if found:
        shown = ", ".join(names.printable(n) for n in found)
        sys.stderr.write(f"devcell: cell {names.printable(ref.name)} has sidecars ({shown}): "
                         f"devcell logs {names.printable(ref.name)} --sidecar NAME shows "
                         "one's output\n")


def _print_sidecar(args: argparse.Namespace, attached: Attached, since: str | None) -> None:
    """A sidecar's output through the engine, in whole lines (a line longer than LINE_MAX in
    pieces), escaped like a service's (the sidecar wrote it)."""
    import calendar

    from devcell.backends import interactive

    ref = attached.ref
    if args.service is not None:
        raise UsageError("give a SERVICE or --sidecar NAME, not both")
    if args.sidecar not in _sidecar_names(ref):
        known = ", ".join(names.printable(n) for n in _sidecar_names(ref)) or "none"
        raise NotFound(f"cell {names.printable(ref.name)} has no sidecar "
                       f"{names.printable(args.sidecar)!r} (sidecars: {known})")
    reader = interactive.sidecar_logs(attached.backend, attached.backend_name)
    cutoff = None if since is None else calendar.timegm(
        time.strptime(since[:19], "%Y-%m-%dT%H:%M:%S"))
    partial = b""
    for chunk in reader.sidecar_logs(ref, args.sidecar, tail=None if args.tail < 0
                                     else args.tail, since=cutoff, timestamps=args.timestamps,
                                     follow=args.follow):
        lines = (partial + chunk).splitlines(keepends=True)
        partial = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        if len(partial) > _Tail.LINE_MAX:
            lines.append(partial)
            partial = b""
        if lines:
            sys.stdout.buffer.write(b"".join(_shown(line) for line in lines))
            sys.stdout.buffer.flush()
    if partial:
        sys.stdout.buffer.write(_shown(partial))
        sys.stdout.buffer.flush()


def _print_logs(args: argparse.Namespace, ref: CellRef, service_logs: ServiceLogs,
                since: str | None) -> None:
    sources = service_logs.sources
    if args.service is not None:
        if args.service not in sources:
            known = ", ".join(names.printable(n) for n in sources) or "none"
            raise NotFound(f"cell {ref.name} has no service {args.service!r} (services: {known})")
        sources = {args.service: sources[args.service]}
    many = len(sources) > 1
    # Names found in the log directory are the cell's to choose: escaped before printing.
    tails = [_Tail(source, f"[{names.printable(name)}] ".encode() if many else b"",
                   lines=log_lines.LineFilter(timestamps=args.timestamps, since=since),
                   tail=None if args.tail < 0 else args.tail)
             for name, source in sources.items()]
    try:
        with service_logs.round():
            for tail in tails:
                tail.pump(final=not args.follow)
        while args.follow:
            time.sleep(FOLLOW_POLL_S)
            with service_logs.round():
                for tail in tails:
                    tail.pump()
    finally:
        service_logs.close()
