"""A clone's progress (host/git_progress.py): on a terminal (a progress reporter installed)
git's phases and percentages reach the reporter as steps, escaped when drawn, from a git
server on 127.0.0.1; without one the clone is quiet and reports nothing; a failed clone with
progress still says why and leaves nothing; a server that never stops talking is cut off at
the deadline."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell import progress
from devcell.backends.host import git_progress, git_source
from devcell.backends.host.git_source import GitSource
from devcell.errors import BackendRefused
from tests import git_servers


class Steps:
    """A reporter that draws steps (as TerminalBars does), recording each."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int, str]] = []
        self.ended = 0

    def begin(self, description: str, total: int, *, small: bool = False) -> None:
        return None

    def advance(self, handle: Any, amount: int) -> None:
        return None

    def end(self, handle: Any) -> None:
        return None

    def begin_steps(self, description: str) -> str:
        return description

    def step(self, handle: str, number: int, total: int, text: str) -> None:
        self.seen.append((handle, number, total, text))

    def end_steps(self, handle: str) -> None:
        self.ended += 1


@pytest.fixture
def reporter() -> Iterator[Steps]:
    steps = Steps()
    previous = progress.install(steps)
    try:
        yield steps
    finally:
        progress.install(previous)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("work")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for n in range(300):
        (work / f"f{n}.txt").write_bytes(os.urandom(64).hex().encode())
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    repos = tmp_path_factory.mktemp("repos")
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repos / "p.git")],
                   check=True)
    with git_servers.git_daemon(repos) as base:
        yield f"{base}/p.git"


def test_a_clone_on_a_terminal_reports_git_phases(served: str, reporter: Steps,
                                                  tmp_path: Path) -> None:
    git_source.clone(GitSource(served, "main", None), tmp_path / "ws")
    assert (tmp_path / "ws" / "f0.txt").exists()
    assert reporter.ended == 1
    texts = [text for _, _, _, text in reporter.seen]
    assert any(t.startswith("Receiving objects") for t in texts), texts
    assert all(total == 100 and 1 <= n <= 100 for _, n, total, _ in reporter.seen)
    assert {handle for handle, *_ in reporter.seen} == {f"cloning {served} at main"}
    assert texts[-1].endswith("100%")


def test_without_a_terminal_nothing_is_reported(served: str, tmp_path: Path) -> None:
    assert not progress.active()
    git_source.clone(GitSource(served, None, None), tmp_path / "ws")
    assert (tmp_path / "ws" / "f0.txt").exists()


def test_a_failed_clone_with_progress_says_why_and_leaves_nothing(
        served: str, reporter: Steps, tmp_path: Path) -> None:
    with pytest.raises(BackendRefused, match="the ref nosuch is not in the repository"):
        git_source.clone(GitSource(served, "nosuch", 1), tmp_path / "ws")
    assert list(tmp_path.iterdir()) == [] and reporter.ended == 1


def test_a_server_that_never_stops_talking_is_cut_off_at_the_deadline(
        reporter: Steps) -> None:
    """A program flooding its progress (no newline, escapes in it) costs a bounded line
    and is killed at the deadline."""
    argv = ["sh", "-c", "printf 'Receiving objects:  7%% \\033[2J'; exec cat /dev/zero >&2"]
    with pytest.raises(subprocess.TimeoutExpired):
        git_progress.run(argv, env={}, timeout=1.0, description="flood")
    assert reporter.ended == 1


def test_a_progress_line_is_parsed_without_trusting_it() -> None:
    seen: list[tuple[int, int, str]] = []
    for line in (b"Receiving objects:  45% (450/1000)", b"remote: Counting objects: 100% (3/3)",
                 b"Resolving deltas: 999% (1/1)", b"\x1b[2JFake: 10%", b"fatal: nope"):
        git_progress._report(line, lambda n, t, text: seen.append((n, t, text)))
    assert seen == [(45, 100, "Receiving objects 45%"), (100, 100, "Counting objects 100%"),
                    (100, 100, "Resolving deltas 100%")]


def test_a_failing_program_answers_as_run_bytes_does_with_a_bounded_tail(
        reporter: Steps) -> None:
    script = ("echo 'Receiving objects: 50%' >&2; head -c 200000 /dev/zero | tr '\\0' x >&2;"
              " echo; echo 'fatal: the end' >&2; exit 3")
    done = git_progress.run(["sh", "-c", script], env={}, timeout=10, description="x")
    assert done.returncode == 3 and done.stdout == b""
    assert done.stderr.endswith(b"fatal: the end\n") and len(done.stderr) == git_progress.TAIL
    assert reporter.seen == [("x", 50, 100, "Receiving objects 50%")]
