"""Processes a test starts: each is ended by the test, whatever happens.

- `child_setup` (Popen's preexec_fn): the child gets the default disposition of SIGINT and
  SIGTERM whatever the test runner's (a CI shell running pytest in the background ignores
  SIGINT, and an ignored signal stays ignored across exec, so Python would never raise
  KeyboardInterrupt in the child), and dies with the test process (PR_SET_PDEATHSIG) if
  pytest itself is killed.
- `end(proc)`: kill and reap a Popen that is still running.
- `forked(child)`: os.fork() for a child function, killed and reaped when the block exits.
- `live_children()`: the test process's live child processes; the root conftest checks that a
  test leaves none behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this process when its parent thread exits."""
    with suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def child_setup() -> None:
    """preexec_fn for a test's child: default SIGINT/SIGTERM, killed with its parent."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()


def end(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 10) -> None:
    """Kill `proc` if it still runs and reap it; its pipes are closed."""
    if proc.poll() is None:
        proc.kill()
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with suppress(OSError):
                stream.close()


@dataclass
class Forked:
    pid: int
    status: int | None = None

    def kill(self) -> int:
        """SIGKILL the child and reap it; its wait status."""
        if self.status is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            _, self.status = os.waitpid(self.pid, 0)
        return self.status


@contextmanager
def forked(child: Callable[[], object]) -> Iterator[Forked]:
    """Fork; the child runs `child()` then `os._exit` (never returns into pytest, exit 70 if it
    raised); the parent's block gets the child, which is killed and reaped when the block
    exits, however it exits."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 70
        try:
            die_with_parent()
            child()
            code = 0
        finally:
            os._exit(code)
    proc = Forked(pid)
    try:
        yield proc
    finally:
        proc.kill()


def live_children(pid: int | None = None) -> dict[int, str]:
    """pid -> command line of the live (not zombie) children of `pid` (default: this process)."""
    pid = os.getpid() if pid is None else pid
    found: dict[int, str] = {}
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with suppress(OSError):
            for word in children.read_text().split():
                child = int(word)
                with suppress(OSError):
                    stat = Path(f"/proc/{child}/stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] == "Z":
                        continue
                    cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                    found[child] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


def leftovers(before: set[int], grace_s: float = 3.0) -> dict[int, str]:
    """Children started since `before` still alive after `grace_s`; each is killed."""
    deadline = time.monotonic() + grace_s
    while True:
        left = {pid: cmd for pid, cmd in live_children().items() if pid not in before}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return left
