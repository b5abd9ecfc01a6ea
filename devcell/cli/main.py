"""Entry point of `devcell`: parse the command line, run the command's handler from the
command table (cli/commands.py), and map errors to exit codes.

A command's module is imported only when it runs, so `devcell get` pays for nothing it does
not use. Exit codes: 0 success, 1 failure, 2 usage.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from devcell.cli import commands
from devcell.cli.parser import parse
from devcell.errors import DevCellError, ManifestError
from devcell.names import printable_lines


def _dispatch(args: argparse.Namespace) -> int:
    verb = getattr(args, "verb", None)
    module, _, function = commands.handler_of(args.command, verb).partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"devcell.cli.{module}"), function)
    if not commands.uses_state(args.command, verb):
        return int(handler(args))
    from devcell.store import db, state_dir

    path = db.resolve_state_dir(args.state_dir)
    state_dir.check(path)  # one line if it cannot be used
    if not commands.needs_records(args.command, verb):
        return int(handler(args))
    with db.recorded_only(path):  # usage errors first; then no database is made here
        return int(handler(args))


def celld(argv: Sequence[str] | None = None) -> int:
    """`celld`: the daemon on its own (same as `devcell controller run`)."""
    from devcell.cli.parser import celld_parser

    args = celld_parser().parse_args(argv)
    args.command, args.verb = "controller", "run"
    return _run(args)


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["__complete"]:  # a TAB press in a shell (devcell completion)
        from devcell.cli import completion

        return completion.run_hidden(given[1:])
    signal.signal(signal.SIGTERM, _terminate)  # the daemon sets its own when it starts
    return _run(parse(given))


def process_main() -> int:
    """The `devcell` program (its console script and `python -m devcell`): main(), then the
    process ends. Frozen first: the interpreter's exit would otherwise walk every object of
    the ~200 modules a command imported looking for reference cycles, ~10-15 ms of a
    `snapshot create` (bench/snapshot_process.py), for memory the exit gives back anyway.
    What must reach the disk was written, flushed and synced before main() returned; the
    exit still runs atexit handlers and flushes stdout and stderr. Not in main() itself,
    which in-process callers (tests) run many times."""
    code = main()
    gc.freeze()
    return code


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, as Ctrl-C's KeyboardInterrupt is: an operation
    in flight records itself and runs its compensations (a frozen cell resumed, a stopped one
    started) before the command exits 143. Python's default ended the process on the spot."""

    signal_name = "SIGTERM"


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _ignore_further_signals() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


_LIMITS = {
    errno.EMFILE: "this process ran out of open files: raise its limit (`ulimit -n`) and retry",
    errno.ENFILE: "the machine ran out of open files: close some programs and retry",
    errno.ENOMEM: "the machine ran out of memory: free some and retry",
    errno.EIO: "a disk or filesystem failed to read or write (an I/O error): check the "
               "machine's disk (`dmesg`) before retrying",
}
"""A faulty machine or process limit, said as such (never a traceback, never a file's fault)."""
_PATH_ERRORS = {errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENOENT,
                errno.EACCES, errno.EPERM, errno.EROFS, errno.ENXIO, errno.ETXTBSY}
"""A path given on the command line that cannot be used as asked: one line naming it, the
last net under the commands' own checks (the CLI fuzz test found a name past NAME_MAX)."""


def _run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except ManifestError as exc:
        for problem in exc.problems:
            sys.stderr.write(f"error: {problem}\n")
        count = len(exc.problems)
        sys.stderr.write(f"{count} problem{'s' if count != 1 else ''} found; nothing was changed\n")
        return exc.exit_code
    except DevCellError as exc:
        sys.stderr.write(f"error: {printable_lines(str(exc))}\n")
        return exc.exit_code
    except KeyboardInterrupt as exc:
        _ignore_further_signals()  # a second Ctrl-C while exiting ends nothing half-way
        if isinstance(exc, Terminated):
            sys.stderr.write("terminated\n")
            return 143
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as exc:  # a full or read-only disk met outside the database: not a bug
        from devcell.store import db, faults

        machine = faults.from_os_error(exc, db.resolve_state_dir(getattr(args, "state_dir", None)))
        if machine is not None:
            sys.stderr.write(f"error: {machine}\n")
            return machine.exit_code
        if exc.errno in _LIMITS:
            sys.stderr.write(f"error: {_LIMITS[exc.errno]} ({exc.strerror}); nothing the "
                             "command had recorded is lost\n")
            return 1
        if exc.errno in _PATH_ERRORS and isinstance(exc.filename, str):
            shown = printable_lines(exc.filename[:120] + ("..." if len(exc.filename) > 120
                                                          else ""))
            sys.stderr.write(f"error: {shown}: {exc.strerror}\n")
            return 1
        raise
