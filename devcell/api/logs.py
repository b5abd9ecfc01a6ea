"""A cell's service logs (and a sidecar's output), read as hostile files in bounded amounts,
escaped, written to a Sink: `devcell logs` prints them, the HTTP API streams them.

The logs are the cell's to write, so they are read through a backend's LogSource (a host file
opened without following links, or a file in a vm's guest read through its agent; either
refused when not a regular file) in bounded amounts, and every line is escaped (names.printable)
before anyone sees it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from devcell import names, safeio
from devcell.api import log_lines
from devcell.backends import log_source
from devcell.backends.base import CellRef
from devcell.backends.log_source import LogSource, ServiceLogs
from devcell.errors import NotFound, UsageError
from devcell.records import Record

FOLLOW_POLL_S = 0.2


def _stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _stderr(text: str) -> None:
    sys.stderr.write(text)


class Sink(Record):
    """Where a log goes: `out` takes its lines (escaped, whole lines but for the last of a
    log that ends without one), `note` DevCell's own words about it (a file skipped, only
    its last 8 MiB shown)."""

    out: Callable[[bytes], None] = _stdout
    note: Callable[[str], None] = _stderr


CONSOLE = Sink()
"""This process's standard output and error (found at each write: a test may swap them)."""


class Options(Record):
    """What to show, as `devcell logs` takes it: one service (None: all), the last `tail`
    lines (None: all), the lines from `since` (an RFC 3339 UTC string, log_lines), with
    their timestamps, and whether to follow."""

    service: str | None = None
    tail: int | None = None
    since: str | None = None
    timestamps: bool = False
    follow: bool = False


class Tail:
    """One service's log, written as it grows, whole lines only (prefixed if asked).

    At first only its last INITIAL_MAX bytes are read, then at most PUMP_MAX at a time up to
    the size it had when the turn began (written before the next is read, at most PUMP_ROUNDS
    a turn), and a line longer than LINE_MAX is written in pieces rather than held. A log that
    shrank (truncated, rotated) is read again from its start.
    """

    INITIAL_MAX = 8 << 20
    PUMP_MAX = 4 << 20
    PUMP_ROUNDS = 16
    LINE_MAX = 1 << 20

    def __init__(self, source: LogSource | Path, prefix: bytes, *,
                 lines: log_lines.LineFilter | None = None, tail: int | None = None,
                 sink: Sink = CONSOLE) -> None:
        self.owned = isinstance(source, Path)
        self.source: LogSource = log_source.HostLog(source) if isinstance(source, Path) \
            else source
        self.prefix = prefix
        self.lines = lines or log_lines.LineFilter(timestamps=True)  # as written
        self.tail = tail
        self.sink = sink
        self.pos: int | None = None
        self.refused = False
        self.partial = b""

    def _size(self, stack: ExitStack | None) -> int | None:
        try:
            size = self.source.size()
        except safeio.UnsafeFile as exc:
            self.refused = True
            self.sink.note(f"devcell: skipping {names.printable(str(exc))}\n")
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
                self.sink.note(f"devcell: {label}: its last {self.tail} lines hold more "
                               f"than {self.INITIAL_MAX >> 20} MiB; showing the lines of "
                               "its last 8 MiB\n")
            return start
        if size > self.INITIAL_MAX:
            self.sink.note(f"devcell: {label}: showing its last {self.INITIAL_MAX >> 20} MiB "
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
            self._write(self.partial + chunk, final=final and last)
            if last:
                return

    def _write(self, data: bytes, *, final: bool) -> None:
        lines = data.splitlines(keepends=True)
        keep = lines and not lines[-1].endswith(b"\n") and not final
        self.partial = lines.pop() if keep else b""
        if len(self.partial) > self.LINE_MAX:
            lines.append(self.partial)
            self.partial = b""
        shown = [self.prefix + escaped(kept) for kept in map(self.lines, lines)
                 if kept is not None]
        if shown:
            self.sink.out(b"".join(shown))


_NUL_RUN = re.compile("\x00{8,}")


def escaped(line: bytes) -> bytes:
    """A log line as shown: the cell wrote it, so control characters (an ESC sequence, a
    carriage return forging a line) are escaped like every other string from a cell; tabs and
    the line's end (\\n or \\r\\n) are kept."""
    end = b"\r\n" if line.endswith(b"\r\n") else b"\n" if line.endswith(b"\n") else b""
    text = line[:len(line) - len(end)].decode("utf-8", "backslashreplace")
    if not text.replace("\t", "").isprintable():
        text = _NUL_RUN.sub(lambda run: f"<{len(run.group())} NUL bytes>", text)  # sparse holes
        text = "\t".join(names.printable(part) for part in text.split("\t"))
    return text.encode() + end


def services(ref: CellRef, service_logs: ServiceLogs, options: Options, *,
             sink: Sink = CONSOLE, stop: Callable[[], bool] = lambda: False) -> None:
    """Write the cell's service logs (one service's, or all prefixed by their names) to
    `sink`; following, until `stop()` says so (or forever: the CLI's Ctrl-C)."""
    sources = service_logs.sources
    if options.service is not None:
        if options.service not in sources:
            known = ", ".join(names.printable(n) for n in sources) or "none"
            raise NotFound(f"cell {ref.name} has no service {options.service!r} (services: "
                           f"{known})")
        sources = {options.service: sources[options.service]}
    many = len(sources) > 1
    # Names found in the log directory are the cell's to choose: escaped before written.
    tails = [Tail(source, f"[{names.printable(name)}] ".encode() if many else b"",
                  lines=log_lines.LineFilter(timestamps=options.timestamps,
                                             since=options.since),
                  tail=options.tail, sink=sink)
             for name, source in sources.items()]
    try:
        with service_logs.round():
            for tail in tails:
                tail.pump(final=not options.follow)
        while options.follow and not stop():
            time.sleep(FOLLOW_POLL_S)
            with service_logs.round():
                for tail in tails:
                    tail.pump()
    finally:
        service_logs.close()


def sidecar_names(ref: CellRef) -> list[str]:
    return [str(s.get("name")) for s in ref.spec.get("sidecars") or [] if isinstance(s, dict)]


def sidecar(attached: Any, name: str, options: Options, *, sink: Sink = CONSOLE,
            stop: Callable[[], bool] = lambda: False) -> None:
    """A sidecar's output through the engine, in whole lines (a line longer than LINE_MAX in
    pieces), escaped like a service's (the sidecar wrote it). `attached`: api.attach's."""
    import calendar

    from devcell.backends import interactive

    ref = attached.ref
    if options.service is not None:
        raise UsageError("give a SERVICE or --sidecar NAME, not both")
    if name not in sidecar_names(ref):
        known = ", ".join(names.printable(n) for n in sidecar_names(ref)) or "none"
        raise NotFound(f"cell {names.printable(ref.name)} has no sidecar "
                       f"{names.printable(name)!r} (sidecars: {known})")
    reader = interactive.sidecar_logs(attached.backend, attached.backend_name)
    cutoff = None if options.since is None else calendar.timegm(
        time.strptime(options.since[:19], "%Y-%m-%dT%H:%M:%S"))
    partial = b""
    for chunk in reader.sidecar_logs(ref, name, tail=options.tail, since=cutoff,
                                     timestamps=options.timestamps, follow=options.follow):
        lines = (partial + chunk).splitlines(keepends=True)
        partial = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        if len(partial) > Tail.LINE_MAX:
            lines.append(partial)
            partial = b""
        if lines:
            sink.out(b"".join(escaped(line) for line in lines))
        if stop():
            return
    if partial:
        sink.out(escaped(partial))
