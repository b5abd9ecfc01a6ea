"""Entry point of `devcell`: parse the command line, run the command's handler from the
command table (cli/commands.py), and map errors to exit codes.

A command's module is imported only when it runs, so `devcell get` pays for nothing it does
not use. `devcell exec` on a running container cell is tried first without the parser or the
command table (cli/exec_fast.py): that is why this module imports them, and the error
classes, only where they are used. Exit codes: 0 success, 1 failure, 2 usage.
"""

from __future__ import annotations

import _signal  # `signal` builds its enums at import (with enum, ~4 ms): the C module here
import errno
import gc
import os
import sys

TYPE_CHECKING = False  # typing costs ~2 ms to import; mypy reads this as True
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence


def _dispatch(args: argparse.Namespace) -> int:
    import importlib

    from devcell.cli import commands

    verb = getattr(args, "verb", None)
    module, _, function = commands.handler_of(args.command, verb).partition(":")

    def handler(parsed: argparse.Namespace) -> int:
        # Imported only when it runs here: a command sent to a server never loads its local
        # handler (snapshot create's brought admission and the reconciler, ~60 ms).
        run: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"devcell.cli.{module}"), function)
        return int(run(parsed))

    if not commands.uses_state(args.command, verb):
        return handler(args)
    if args.server is not None or args.context is not None or _contexts_file_exists():
        from devcell.cli import remote  # a server asked for, or perhaps configured

        code = remote.dispatch(args)
        if code is not None:
            return code
    from devcell.store import db, state_dir

    path = db.resolve_state_dir(args.state_dir)
    state_dir.check(path)  # one line if it cannot be used
    if not commands.needs_records(args.command, verb):
        return handler(args)
    with db.recorded_only(path):  # usage errors first; then no database is made here
        return handler(args)


def _contexts_file_exists() -> bool:
    """Whether the contexts file (cli/contexts.py) is there: one stat, so that a CLI with no
    server configured imports nothing more than it did."""
    given = os.environ.get("DEVCELL_CONTEXTS")
    if given:
        return os.path.lexists(given)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".config")
    return os.path.lexists(os.path.join(base, "devcell", "contexts.json"))


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
    _signal.signal(_signal.SIGTERM, _terminate)  # the daemon sets its own when it starts
    if "exec" in given and not _contexts_file_exists():  # a context may name a server
        from devcell.cli import exec_fast

        request = exec_fast.parse(list(given))
        if request is not None:
            fast = _guarded(lambda: exec_fast.run(request), request.state_dir)
            if fast is not None:
                global _ended_fast
                _ended_fast = True
                return fast
    from devcell.cli.parser import parse

    return _run(parse(given))


def process_main() -> int:
    """The `devcell` program (its console script and `python -m devcell`): main(), then the
    process ends. Frozen first: the interpreter's exit would otherwise walk every object of
    the ~200 modules a command imported looking for reference cycles, ~10-15 ms of a
    `snapshot create` (bench/snapshot_process.py), for memory the exit gives back anyway.
    What must reach the disk was written, flushed and synced before main() returned; the
    exit still runs atexit handlers and flushes stdout and stderr. Not in main() itself,
    which in-process callers (tests) run many times.

    After `exec`'s fast path the process ends at once, past the interpreter's finalization
    (~5 ms of CPU, a tenth of what that path may cost beside `docker exec`): it holds no
    file, sink or thread that needs it (its only thread, feeding stdin, is a daemon the
    finalization would abandon too). What it wrote is flushed and atexit's handlers run
    (a coverage run's, in tests) before os._exit. Any other command ends the same way when
    no other thread is left and its output was flushed (`_end_now`)."""
    _closed_streams()
    code = main()
    if _ended_fast and not _watched():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass  # a closed pipe: what it would have said has nowhere to go
        _end_now(code)
    if _alone() and not _watched() and _streams_flushed():
        _end_now(code)
    gc.freeze()
    return code


def _closed_streams() -> None:
    """A standard output or error the process was started without (`devcell ... >&-`): the
    interpreter gives None for it, and every command printing or flushing met AttributeError,
    a traceback (attack44); and the descriptor, free, would be the next file opened (a
    child's output then written into it). It is held open on /dev/null: read-only for the
    output, so that what a command prints fails as on a closed descriptor (EBADF, said as
    "cannot write the output"), write-only for the error stream (what is said goes nowhere;
    the exit code still tells)."""
    for fd, name, mode in ((1, "stdout", os.O_RDONLY), (2, "stderr", os.O_WRONLY)):
        if getattr(sys, name) is not None:
            continue
        held = os.open(os.devnull, mode)
        if held != fd:
            os.dup2(held, fd, inheritable=False)
            os.close(held)
        setattr(sys, name, open(fd, "w", encoding="utf-8", errors="backslashreplace",
                                closefd=False))


def _alone() -> bool:
    """Whether the main thread is the process's only Python thread: the interpreter's exit
    would wait for any other that is not a daemon (and a daemon thread may still be writing),
    so only then may the process end past the finalization. `threading` is not imported to
    ask: a command that never imported it started no thread."""
    threading = sys.modules.get("threading")
    return threading is None or threading.active_count() == 1


def _watched() -> bool:
    """Whether a profiler or a tracer runs this process (`python -m cProfile -o FILE -m
    devcell`, bench/_common.profile, a debugger): those write their results after the program
    returns, which an early end would never let them do."""
    return sys.getprofile() is not None or sys.gettrace() is not None


def _streams_flushed() -> bool:
    """stdout and stderr flushed. False if either could not be (a closed pipe): the
    interpreter's own exit then reports it and sets the exit code, as it always did."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            return False
    return True


def _end_now(code: int) -> None:
    """End the process with `code` after atexit's handlers (a coverage run's, loguru's, the
    temporary directories' finalizers), skipping the interpreter's finalization: tearing
    down the ~200 modules a command imported costs ~3-6 ms (`snapshot create`, strace), for
    memory the exit gives back anyway. Every file a command writes is written and closed
    (the state database committed, synced and closed) before main() returns."""
    import atexit

    atexit._run_exitfuncs()
    os._exit(code & 0xFF)


_ended_fast = False
"""Whether main() ran `exec`'s fast path to its end (process_main may then end the process
without the interpreter's finalization)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, as Ctrl-C's KeyboardInterrupt is: an operation
    in flight records itself and runs its compensations (a frozen cell resumed, a stopped one
    started) before the command exits 143. Python's default ended the process on the spot."""

    signal_name = "SIGTERM"


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _ignore_further_signals() -> None:
    for signum in (_signal.SIGINT, _signal.SIGTERM):
        _signal.signal(signum, _signal.SIG_IGN)


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


ERRORS_ABOVE_ONE = frozenset({"diff"})
"""Commands whose exit code 1 is an answer (diff: they differ), so that an error exits 2
(kubectl's convention: a script tells "differs" from "could not diff")."""


def _run(args: argparse.Namespace) -> int:
    code = _guarded(lambda: _flushed(_dispatch(args)), getattr(args, "state_dir", None),
                    error_floor=2 if getattr(args, "command", None) in ERRORS_ABOVE_ONE else 1)
    assert code is not None
    return code


def _flushed(code: int) -> int:
    """`code`, once what the command printed has left (its errors then said as the command's:
    at the interpreter's exit a closed pipe or a full output was "Exception ignored", 120)."""
    sys.stdout.flush()
    return code


def _guarded(work: Callable[[], int | None], state_dir: str | None, *,
             error_floor: int = 1) -> int | None:
    """`work()`, its errors said as one line each and mapped to exit codes (an error's at
    least `error_floor`)."""
    try:
        return work()
    except Exception as exc:  # the error classes are imported only when one is raised
        code = _said(exc, state_dir)
        return code if code == 0 else max(code, error_floor)
    except KeyboardInterrupt as exc:
        _ignore_further_signals()  # a second Ctrl-C while exiting ends nothing half-way
        # what was interrupted may say more: a change sent to a server (devcell/client.py)
        said = f": {exc.args[0]}" if exc.args and isinstance(exc.args[0], str) else ""
        if isinstance(exc, Terminated):
            sys.stderr.write(f"terminated{said}\n")
            return 143
        sys.stderr.write(f"interrupted{said}\n")
        return 130


def _said(exc: Exception, state_dir: str | None) -> int:
    """Say the error in one line (each of a manifest's problems in one); its exit code.
    Anything that is not a DevCell error, a closed pipe or an OSError it knows is raised."""
    from devcell.errors import DevCellError, ManifestError
    from devcell.names import printable_lines

    if isinstance(exc, ManifestError):
        for problem in exc.problems:
            sys.stderr.write(f"error: {problem}\n")
        count = len(exc.problems)
        sys.stderr.write(f"{count} problem{'s' if count != 1 else ''} found; nothing was "
                         "changed\n")
        return exc.exit_code
    if isinstance(exc, DevCellError):
        sys.stderr.write(f"error: {printable_lines(str(exc))}\n")
        return exc.exit_code
    if isinstance(exc, BrokenPipeError):  # the reader's choice (`| head`): cli/output.py
        from devcell.cli import output

        output.discard()
        return 0
    if isinstance(exc, OSError):
        return _os_error(exc, state_dir)
    raise exc


def _os_error(exc: OSError, state_dir: str | None) -> int:
    """A full or read-only disk met outside the database, a process limit, a path given that
    cannot be used: one line, not a bug (anything else is raised again)."""
    from devcell.cli import output
    from devcell.names import printable_lines
    from devcell.store import db, faults

    if output.failed(exc):  # not the state database's: it named no file (attack43, G)
        output.discard()
        sys.stderr.write(f"error: cannot write the output: {exc.strerror}\n")
        return 1
    machine = faults.from_os_error(exc, db.resolve_state_dir(state_dir))
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
    raise exc
