"""`devcell exec [-i] [-t] CELL -- CMD...`: a command in a running cell, its output and exit
code relayed, optionally on a pseudo-terminal."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from types import FrameType

from devcell import names
from devcell.backends.interactive import ExecOptions, Terminal
from devcell.cli.cell_open import open_cell
from devcell.errors import UsageError


def run_exec(args: argparse.Namespace) -> int:
    argv = command(args)
    if (args.stdin or args.tty) and sys.stdin is None:
        raise UsageError("-i and -t need a standard input, and this process has none")
    if args.tty and not sys.stdin.isatty():
        raise UsageError("the input device is not a terminal: -t needs one (to pipe input "
                         "into the command, use -i without -t)")
    settings = exec_options(args)
    attached = open_cell(args, verb="running the command anyway", by="exec")
    from devcell.store import activity
    from devcell.store import db as dbmod

    session = activity.open_session(dbmod.resolve_state_dir(args.state_dir), attached.ref.id,
                                    "exec")
    try:
        if args.tty:  # a developer attaching (api/post_attach.py), before the raw terminal
            from devcell.api import post_attach

            post_attach.run(attached.interactive(), attached.ref, out=sys.stderr.buffer,
                            options=settings)
        with _terminal(raw=args.stdin) if args.tty else nullcontext() as terminal:
            return attached.interactive().exec(attached.ref, argv, stdout=sys.stdout.buffer,
                                         stderr=sys.stderr.buffer,
                                         stdin=sys.stdin.buffer if args.stdin else None,
                                         terminal=terminal, options=settings)
    finally:
        if session is not None:
            session.close()
        attached.close()


def command(args: argparse.Namespace) -> list[str]:
    """The command to run, from the words after the cell (cli/exec_fast.py reads them alike)."""
    argv = list(args.argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise UsageError("give the command to run after --, e.g. devcell exec api -- ls -la")
    if "--" in argv and all(word.startswith("-") for word in argv[:argv.index("--")]):
        options = " ".join(argv[:argv.index("--")])
        raise UsageError(f"options of exec go before the cell name: devcell exec {options} "
                         f"{args.cell} -- CMD...")
    return argv


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")


def exec_options(args: argparse.Namespace) -> ExecOptions | None:
    """`-e NAME=VALUE`, `-w DIR` and `-u USER[:GROUP]` checked before the cell is opened."""
    env = []
    for item in getattr(args, "env", None) or []:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            shown = names.printable(name) + ("=…" if sep else "")  # never the value
            raise UsageError(f"-e {shown}: write NAME=VALUE (a name of letters, digits and "
                             "_, not starting with a digit)")
        if "\0" in value:
            raise UsageError(f"-e {name}: a value cannot hold a NUL byte")
        env.append((name, value))
    workdir = getattr(args, "workdir", None)
    if workdir is not None and (not workdir.startswith("/") or "\0" in workdir):
        raise UsageError(f"-w {names.printable(workdir)}: give an absolute path in the cell")
    user = getattr(args, "user", None)
    if user is not None and not _USER.fullmatch(user):
        raise UsageError(f"-u {names.printable(user)}: give a user name or uid, optionally "
                         ":GROUP")
    if not env and workdir is None and user is None:
        return None
    return ExecOptions(env=tuple(env), workdir=workdir, user=user)


@contextmanager
def _terminal(*, raw: bool) -> Iterator[Terminal]:
    """The caller's terminal while attached to a command on a pseudo-terminal in the cell.

    With `raw` (its keystrokes go to the command) the local terminal is in raw mode, so Ctrl-C
    and Ctrl-D reach the command instead of devcell. The mode is restored however the session
    ends: SIGTERM and SIGHUP exit through here rather than leave a raw terminal behind.
    SIGWINCH only sets an event; the backend resizes the cell's terminal off the handler.
    """
    fd = sys.stdin.fileno()

    def size() -> tuple[int, int] | None:
        try:
            columns, rows = os.get_terminal_size(fd)
        except OSError:
            return None
        return (rows, columns) if rows and columns else None

    def leave(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    terminal = Terminal(size)
    saved = termios.tcgetattr(fd)
    handlers = {signal.SIGWINCH: lambda signum, frame: terminal.resized.set(),
                signal.SIGTERM: leave, signal.SIGHUP: leave}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        if raw:
            tty.setraw(fd, termios.TCSADRAIN)  # keep what was typed ahead
        yield terminal
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
