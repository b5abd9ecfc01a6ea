"""spec.hooks.hostInitialize: a manifest's commands run on the host before its cell starts
(devcontainer.json's initializeCommand: fetch a secret into a file, write a .env, log in to
a registry).

Allowed only by DevCell's configuration (security.allowHostCommands), checked at admission
and again here (the configuration may have changed since). Each command is run as written
(an argv: a shell only when the manifest names one), as the user DevCell runs as, in the
manifest's directory, in its own process group with standard input closed. It is said
before it runs; its output is shown as it comes, at most MAX_SHOWN bytes (a chatty or
hostile command cannot fill the terminal or a log), and the last TAIL bytes name a
failure. Past the time limit the whole group is killed and the start fails; when the command
ends, whatever it left running in its group is killed too (a background process with its
output elsewhere would otherwise run on, unbounded).
"""

from __future__ import annotations

import os
import selectors
import shlex
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from devcell import names
from devcell.backends.host import children
from devcell.errors import BackendError

MAX_SHOWN = 64 * 1024
TAIL = 2048


class HostCommandFailed(BackendError):
    """A host command exited non-zero, could not start, or ran past its time limit."""


@dataclass(frozen=True)
class Ran:
    commands: int
    seconds: float


def shown(argv: list[str]) -> str:
    """The command as a user would type it, escaped for a terminal."""
    return names.printable(shlex.join(argv))


def run_all(commands: list[list[str]], *, cwd: str, timeout: float, cell: str,
            say: Callable[[str], None]) -> Ran:
    """Run each command in turn, saying it first through `say` (a line of text); the first
    failure raises HostCommandFailed naming it, its status and its output's tail."""
    began = time.monotonic()
    if not os.path.isdir(cwd):
        raise HostCommandFailed(f"hooks.hostInitialize of cell {cell}: its directory {cwd} "
                                "is gone")
    for argv in commands:
        say(f"cell {names.printable(cell)}: running on the host (hooks.hostInitialize, in "
            f"{names.printable(cwd)}): {shown(argv)}\n")
        code, tail = _run(argv, cwd=cwd, timeout=timeout, say=say)
        if code != 0:
            why = (f"ran past its time limit of {timeout:g}s and was killed" if code is None
                   else f"exited with status {code}")
            raise HostCommandFailed(
                f"hooks.hostInitialize {shown(argv)} of cell {names.printable(cell)} {why}"
                + (f": {names.printable(tail.strip())}" if tail.strip() else ""))
    return Ran(len(commands), time.monotonic() - began)


def _run(argv: list[str], *, cwd: str, timeout: float,
         say: Callable[[str], None]) -> tuple[int | None, str]:
    """(exit status or None when killed for its time, the output's last TAIL bytes)."""
    try:
        process = children.output_reader(argv, cwd=cwd)
    except OSError as exc:
        raise HostCommandFailed(f"hooks.hostInitialize {shown(argv)}: cannot run it: "
                                f"{exc.strerror or exc}") from None
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    shown_bytes = 0
    tail = b""
    killed = False
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                killed = True
                break
            if not selector.select(min(left, 1.0)):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            tail = (tail + chunk)[-TAIL:]
            if shown_bytes < MAX_SHOWN:
                part = chunk[:MAX_SHOWN - shown_bytes]
                shown_bytes += len(part)
                say(names.printable_lines(part.decode(errors="replace")))
                if shown_bytes >= MAX_SHOWN:
                    say("\n[output cut at 64 KiB]\n")
    if not killed and not _exited(process.pid, deadline):
        killed = True
    _kill(process)  # what it left running in its group ends with it, even when it succeeded
    process.stdout.close()
    return (None if killed else process.returncode), tail.decode(errors="replace")


def _exited(pid: int, deadline: float) -> bool:
    """Whether the command `pid` ended before `deadline`, left unreaped (a zombie keeps its
    process group's id from being reused until _kill has signalled the group)."""
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.02))


def _kill(process: children.Machine) -> None:
    """The command and everything it started (its own process group)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
