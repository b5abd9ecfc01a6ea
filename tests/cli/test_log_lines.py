"""`devcell logs --tail/--since/--timestamps` over the lines the supervisor stamps; the file is
the cell's to write, so the reads stay bounded and unstamped lines are shown, not trusted."""

from __future__ import annotations

import io
import os
import sys
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devcell.api import log_lines
from devcell.cli.cmd_logs import _Tail

LOG = (b"2026-01-02T03:04:05Z [devcell] starting web\n"
       b"2026-01-02T03:04:05Z one\n"
       b"2026-01-02T03:04:07Z two\n"
       b"a line a cell wrote without a stamp\n"
       b"2026-01-02T03:05:00Z three\n")


def shown(path: Path, monkeypatch: pytest.MonkeyPatch, **options: object) -> bytes:
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    tail = options.pop("tail", None)
    tail_obj = _Tail(path, b"", lines=log_lines.LineFilter(**options),  # type: ignore[arg-type]
                     tail=tail)  # type: ignore[arg-type]
    with ExitStack() as stack:
        tail_obj.pump(stack, final=True)
    sys.stdout.flush()
    return out.getvalue()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "web.log"
    path.write_bytes(LOG)
    return path


def test_stamps_are_dropped_unless_asked_for(log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert shown(log, monkeypatch) == (b"[devcell] starting web\none\ntwo\n"
                                       b"a line a cell wrote without a stamp\nthree\n")
    assert shown(log, monkeypatch, timestamps=True) == LOG


def test_since_keeps_the_lines_of_that_second_on_and_unstamped_ones_after_them(
        log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert shown(log, monkeypatch, since="2026-01-02T03:04:07") == (
        b"two\na line a cell wrote without a stamp\nthree\n")
    assert shown(log, monkeypatch, since="2026-01-02T03:06:00") == b""


def test_tail_counts_lines_from_the_end_with_or_without_a_last_newline(
        log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert shown(log, monkeypatch, tail=2) == b"a line a cell wrote without a stamp\nthree\n"
    assert shown(log, monkeypatch, tail=0) == b""
    assert shown(log, monkeypatch, tail=99) == shown(log, monkeypatch)
    log.write_bytes(LOG + b"2026-01-02T03:05:01Z partial")
    assert shown(log, monkeypatch, tail=1) == b"partial"


def test_tail_never_reads_more_than_its_limit_of_a_file_without_newlines(tmp_path: Path) -> None:
    path = tmp_path / "flood.log"
    with path.open("wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of NULs, no newline
    reads: list[int] = []
    real_read = os.read

    def counting(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    fd = os.open(path, os.O_RDONLY)
    try:
        os.read, saved = counting, os.read  # type: ignore[assignment]
        try:
            start = log_lines.tail_start(fd, 64 << 20, 10, 1 << 20)
        finally:
            os.read = saved
    finally:
        os.close(fd)
    assert start == (64 << 20) - (1 << 20)
    assert sum(reads) <= (1 << 20) + 1


def test_since_takes_a_duration_or_an_rfc3339_time() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert log_lines.since_cutoff("90s", now) == "2026-01-02T03:02:35"
    assert log_lines.since_cutoff("1h30m", now) == "2026-01-02T01:34:05"
    assert log_lines.since_cutoff("2026-01-02T05:00:00+02:00", now) == "2026-01-02T03:00:00"
    assert log_lines.since_cutoff("2026-01-02T03:00:00Z", now) == "2026-01-02T03:00:00"
    for bad in ("yesterday", "2026-01-02T03:00:00", "5x"):
        with pytest.raises(ValueError, match="invalid --since"):
            log_lines.since_cutoff(bad, now)
