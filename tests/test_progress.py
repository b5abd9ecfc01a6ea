"""Progress reports: backends report, the process decides whether anything is shown."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest

from devcell import progress
from devcell.backends.host import treecopy
from devcell.errors import BackendError


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: dict[int, dict[str, Any]] = {}

    def begin(self, description: str, total: int, *, small: bool = False) -> int:
        with self.lock:
            handle = len(self.tasks)
            self.tasks[handle] = {"description": description, "total": total, "done": 0,
                                  "advances": 0, "ended": False}
            return handle

    def advance(self, handle: int, amount: int) -> None:
        with self.lock:
            self.tasks[handle]["done"] += amount
            self.tasks[handle]["advances"] += 1

    def end(self, handle: int) -> None:
        self.tasks[handle]["ended"] = True


def tree(root: Path, files: int, size: int) -> int:
    for i in range(files):
        d = root / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_bytes(b"x" * size)
    return files * size


def test_without_a_reporter_tracking_costs_nothing_and_shows_nothing() -> None:
    assert progress.install(None) is None
    with progress.track("copy", 10) as advance:
        advance(10)


def test_a_parallel_copy_reports_every_byte_in_batches(tmp_path: Path) -> None:
    total = tree(tmp_path / "src", 2 * treecopy.BATCH + 10, 1000)
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        stats = treecopy.copy_tree(tmp_path / "src", tmp_path / "dst", description="api: copy")
    finally:
        progress.install(previous)
    assert stats.size_bytes == total
    [task] = recorder.tasks.values()
    assert task["description"] == "api: copy" and task["total"] == total
    assert task["done"] == total and task["ended"]
    assert task["advances"] >= 3  # one per finished batch, not one at the end


def test_a_small_copy_reports_once(tmp_path: Path) -> None:
    total = tree(tmp_path / "src", 5, 10)
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        treecopy.copy_tree(tmp_path / "src", tmp_path / "dst")
    finally:
        progress.install(previous)
    [task] = recorder.tasks.values()
    assert task["done"] == task["total"] == total and task["advances"] == 1


def test_a_failed_copy_still_ends_its_task(tmp_path: Path, monkeypatch: Any) -> None:
    def broken(argv: list[str], cwd: Path) -> None:
        raise BackendError("copying failed: disk full (simulated)")

    monkeypatch.setattr(treecopy, "_cp", broken)
    tree(tmp_path / "src", 3, 1)
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        with pytest.raises(BackendError, match="disk full"):
            treecopy.copy_tree(tmp_path / "src", tmp_path / "dst")
    finally:
        progress.install(previous)
    [task] = recorder.tasks.values()
    assert task["ended"]


def test_terminal_bars_skip_small_tasks_and_draw_big_ones(monkeypatch: Any) -> None:
    import rich.console

    out = io.StringIO()
    real = rich.console.Console
    monkeypatch.setattr(rich.console, "Console",
                        lambda **kw: real(file=out, force_terminal=True, width=100))
    bars = progress.TerminalBars(min_bytes=1000)
    assert bars.begin("tiny", 10) is None
    handle = bars.begin("api: checkpoint snap_1", 4000)
    bars.advance(handle, 2000)
    bars.advance(handle, 2000)
    bars.end(handle)
    assert "api: checkpoint snap_1" in out.getvalue()
    assert bars._progress is None  # stopped when the last task ended


def test_a_few_big_files_report_every_byte(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"big{i}").write_bytes(b"\0" * (6 * 2**20))
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        treecopy.copy_tree(src, tmp_path / "dst")
    finally:
        progress.install(previous)
    [task] = recorder.tasks.values()
    assert task["done"] == task["total"] == 18 * 2**20 and task["ended"]


def test_log_lines_go_above_the_bars_while_they_are_drawn(monkeypatch: Any) -> None:
    import rich.console

    out = io.StringIO()
    real = rich.console.Console
    monkeypatch.setattr(rich.console, "Console",
                        lambda **kw: real(file=out, force_terminal=True, width=100))
    bars = progress.TerminalBars(min_bytes=1)
    previous = progress.install(bars)
    try:
        handle = bars.begin("api: checkpoint snap_1", 10)
        progress.write("12:00:00.000 WARNING Cell/api - slow disk\n")
        bars.end(handle)
    finally:
        progress.install(previous)
    assert "WARNING Cell/api - slow disk" in out.getvalue()


def test_build_steps_are_reported_only_to_a_reporter_that_draws_steps() -> None:
    """An image build's `Step N/M` reports: nothing happens without a reporter (or with one
    that draws only byte counts); TerminalBars gets each step with its total."""
    previous = progress.install(None)
    try:
        with progress.track_steps("building") as step:
            step(1, 3, "FROM base")  # no reporter: a no-op
        progress.install(Recorder())
        with progress.track_steps("building") as step:
            step(1, 3, "FROM base")  # a byte reporter has no begin_steps: a no-op

        class Steps:
            def __init__(self) -> None:
                self.seen: list[tuple[int, int, str]] = []
                self.ended = False

            def begin_steps(self, description: str) -> str:
                return description

            def step(self, handle: str, number: int, total: int, text: str) -> None:
                self.seen.append((number, total, text))

            def end_steps(self, handle: str) -> None:
                self.ended = True

        steps = Steps()
        progress.install(steps)  # type: ignore[arg-type]
        with progress.track_steps("building") as step:
            step(1, 2, "FROM base")
            step(2, 2, "RUN make")
        assert steps.seen == [(1, 2, "FROM base"), (2, 2, "RUN make")] and steps.ended
        bars = progress.TerminalBars()
        handle = bars.begin_steps("building image for cell api")
        bars.step(handle, 2, 5, "RUN \x1b[31mmake")
        task = handle[0].tasks[0]
        assert (task.total, task.completed) == (5, 1)
        assert "\x1b" not in task.description and "RUN \\x1b[31mmake" in task.description
        bars.end_steps(handle)
    finally:
        progress.install(previous)
