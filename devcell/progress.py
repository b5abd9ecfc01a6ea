"""Progress of long backend work (workspace copies), shown while it runs.

Backends report through `track()`; what happens to the reports is the process's choice,
installed once with `install()`: the CLI shows rich progress bars on a terminal, the daemon
and scripts (no terminal) see nothing. Without a reporter `track()` costs one function call.
Reports may come from several threads at once (parallel convergence): reporters are
thread-safe.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

Advance = Callable[[int], None]
"""Report that `n` more units (bytes) are done."""


class Reporter(Protocol):
    def begin(self, description: str, total: int, *, small: bool = False) -> Any:
        """Start a task of `total` bytes; returns a handle for advance/end. `small`: show it
        whatever its size (one of several parts shown together, e.g. an image's layers)."""

    def advance(self, handle: Any, amount: int) -> None: ...

    def end(self, handle: Any) -> None: ...


_reporter: Reporter | None = None


def active() -> bool:
    """Whether anything receives reports (extra work to measure progress is worth doing)."""
    return _reporter is not None


def write(text: str) -> None:
    """Write a log line to stderr without tearing a progress bar that is being drawn."""
    reporter = _reporter
    if isinstance(reporter, TerminalBars) and reporter.write(text):
        return
    sys.stderr.write(text)
    sys.stderr.flush()


def install(reporter: Reporter | None) -> Reporter | None:
    """Make `reporter` receive every task from now on; returns the one it replaces."""
    global _reporter
    previous, _reporter = _reporter, reporter
    return previous


def _ignore(amount: int) -> None:
    return None


@contextmanager
def track(description: str, total: int, *, small: bool = False) -> Iterator[Advance]:
    """A task of `total` bytes; call the yielded function with each amount done. `small`:
    drawn whatever its size (see Reporter.begin)."""
    reporter = _reporter
    if reporter is None:
        yield _ignore
        return
    handle = reporter.begin(description, total, small=small)
    try:
        yield lambda amount: reporter.advance(handle, amount)
    finally:
        reporter.end(handle)


Step = Callable[[int, int, str], None]
"""Report that step `n` of `total` began, with its text (an image build's `RUN ...`)."""


def _no_step(number: int, total: int, text: str) -> None:
    return None


@contextmanager
def track_steps(description: str) -> Iterator[Step]:
    """A task counted in steps whose number is learnt as it runs (an image build); drawn
    only by a reporter that draws steps (TerminalBars), else each report costs one call."""
    reporter: Any = _reporter
    if reporter is None or not hasattr(reporter, "begin_steps"):
        yield _no_step
        return
    handle = reporter.begin_steps(description)
    try:
        yield lambda number, total, text: reporter.step(handle, number, total, text)
    finally:
        reporter.end_steps(handle)


class TerminalBars:
    """rich progress bars on stderr for tasks of at least `min_bytes` (small copies finish
    before a bar would be readable; rich loads only when the first big task starts)."""

    def __init__(self, min_bytes: int = 64 * 2**20) -> None:
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        self._progress: Any = None
        self._active = 0

    def begin(self, description: str, total: int, *, small: bool = False) -> Any:
        if total < self.min_bytes and not small:
            return None
        with self._lock:
            if self._progress is None:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    DownloadColumn,
                    Progress,
                    TextColumn,
                    TimeRemainingColumn,
                    TransferSpeedColumn,
                )

                self._progress = Progress(
                    TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), transient=True)
                self._progress.start()
            self._active += 1
            return self._progress.add_task(description, total=total)

    def begin_steps(self, description: str) -> Any:
        """A bar of steps (an image build), drawn at once: each step is worth seeing."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        bar.start()
        return bar, bar.add_task(description, total=None), description

    def step(self, handle: Any, number: int, total: int, text: str) -> None:
        from devcell.names import printable

        bar, task, description = handle
        shown = printable(text if len(text) <= 50 else text[:47] + "...")
        bar.update(task, total=total, completed=number - 1,
                   description=f"{description}: {shown}")

    def end_steps(self, handle: Any) -> None:
        handle[0].stop()

    def write(self, text: str) -> bool:
        """Print `text` above the bars while they are drawn; False when none are."""
        with self._lock:
            if self._progress is None:
                return False
            from rich.text import Text

            self._progress.console.print(Text.from_ansi(text.rstrip("\n")))
            return True

    def advance(self, handle: Any, amount: int) -> None:
        if handle is not None:
            self._progress.advance(handle, amount)

    def end(self, handle: Any) -> None:
        if handle is None:
            return
        with self._lock:
            self._progress.remove_task(handle)
            self._active -= 1
            if self._active == 0:
                self._progress.stop()
                self._progress = None
