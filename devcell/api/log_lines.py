"""The lines of a service log as `devcell logs` shows them: `--timestamps`, `--since`, `--tail`.

The cell's supervisor writes each line of a service's output as `TIMESTAMP SP TEXT`, the
timestamp RFC 3339 in UTC to the second (`2026-01-02T03:04:05Z`), its own notes as
`TIMESTAMP [devcell] starting web` (backends/supervisor.py). The file lies in a directory the
cell can write, so a line is only a claim: whatever does not start with a timestamp is shown
as it is, and belongs to the time of the last line that did (a line a log written by an older
DevCell, or by an image without awk, carries no time at all: `--since` leaves it out).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime

STAMP = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z) ")
"""The timestamp the supervisor puts before every line, and the space after it."""
TAIL_BLOCK = 64 << 10


class LineFilter:
    """Turns a file's lines into what is printed: the stamp dropped or kept, lines older than
    `since` (an RFC 3339 UTC string to the second) left out. Keeps the last stamp seen, for
    the lines that carry none (the continuation of a line longer than the reader's cap)."""

    def __init__(self, *, timestamps: bool = False, since: str | None = None) -> None:
        self.timestamps, self.since = timestamps, since
        self.last: bytes | None = None

    def __call__(self, line: bytes) -> bytes | None:
        found = STAMP.match(line)
        if found is not None:
            self.last = found.group(1)
            if not self.timestamps:
                line = line[found.end():]
        if self.since is not None and (self.last is None
                                       or self.last[:19].decode() < self.since):
            return None
        return line


def since_cutoff(value: str, now: float) -> str:
    """`--since 5m` (kubectl's duration) or `--since 2026-01-02T03:04:05Z` (RFC 3339, any
    offset) -> the earliest second to show, as the supervisor writes it. ValueError otherwise."""
    seconds = _duration(value)
    if seconds is not None:
        moment = datetime.fromtimestamp(now - seconds, UTC)
    else:
        try:
            moment = datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"invalid --since {value!r}: a duration (30s, 5m, 1h30m) or an "
                             "RFC 3339 time (2026-01-02T03:04:05Z)") from None
        if moment.tzinfo is None:
            raise ValueError(f"invalid --since {value!r}: an RFC 3339 time needs its offset "
                             "(Z for UTC, or +02:00)")
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise ValueError(f"invalid --since {value!r}: in UTC it falls outside year 1 to 9999; "
                         "give a time in that range") from None
    return moment.isoformat(timespec="seconds")[:19]  # strftime's %Y drops year 1's zeros


def _duration(text: str) -> float | None:
    """A kubectl duration's seconds (30s, 5m, 1h30m, 250ms, plain seconds), None when it is
    not one: cli.arguments.duration's reading (that one is argparse's, above this layer)."""
    import threading

    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        seconds = sum(float(n) * scale[u] for n, u in parts)
    return seconds if seconds <= threading.TIMEOUT_MAX else None


def tail_start(fd: int, size: int, lines: int, limit: int) -> int:
    """Where the last `lines` lines of the open file begin (see `tail_offset`)."""
    def read(offset: int, count: int) -> bytes:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, count)
    return tail_offset(read, size, lines, limit)


def tail_offset(read: Callable[[int, int], bytes], size: int, lines: int, limit: int, *,
                block: int = TAIL_BLOCK) -> int:
    """Where the last `lines` lines of a log of `size` bytes begin, reading backwards in
    blocks with `read(offset, count)` and never more than `limit` bytes (a hostile file may
    hold no newline at all)."""
    if lines <= 0:
        return size
    end = size
    if end > 0 and read(end - 1, 1) == b"\n":  # a last line without its newline is a line
        end -= 1
    pos, wanted = end, lines
    while pos > 0 and size - pos < limit:
        step = min(block, pos, limit - (size - pos))
        data = read(pos - step, step)[:step]
        index = len(data)
        while True:
            index = data.rfind(b"\n", 0, index)
            if index < 0:
                break
            wanted -= 1
            if wanted == 0:
                return pos - step + index + 1
        pos -= step
    return max(pos, size - limit)
