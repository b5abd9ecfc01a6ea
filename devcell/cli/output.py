"""The standard output when it cannot take what a command prints: a pipe closed by its
reader (`| head`), a full disk or /dev/full.

A closed pipe is the reader's choice, not a failure: the command keeps the exit code it had
decided (main.py says nothing). One whose exit code is an answer decides it before printing,
so that a closed pipe cannot change it (`diff` exited 0, "no difference", when `| head`
closed its pipe: attack43, F). A full output is an error said as the output's own, never as
the state database's (attack43, G).
"""

from __future__ import annotations

import errno
import os
import stat
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from devcell.api.diff import DiffReport


def discard() -> None:
    """Point the standard output at /dev/null: what is still buffered for it goes nowhere,
    and the interpreter's flush at exit raises nothing (it said "Exception ignored" and
    exited 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def write_diff(report: DiffReport) -> int:
    """`devcell diff`'s report printed; its exit code, 1 when it differs, also when the
    reader closed the pipe before the end (git's `diff --exit-code | head` dies of SIGPIPE,
    141; kubectl's answer is its diff program's): the answer was decided before printing,
    and 0 would say "no difference"."""
    from devcell.api import diff

    answer = 1 if report.differs else 0
    try:
        diff.write(report, sys.stdout, sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:
        discard()
    return answer


def failed(exc: OSError) -> bool:
    """Whether `exc`, which names no file, was met writing the standard output: data it
    could not take is still buffered, and a flush fails alike; or, unbuffered, an empty write
    to it fails alike (/dev/full), or it is a file on a file system with no space left."""
    if exc.filename is not None:
        return False
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
    except OSError as again:  # io.UnsupportedOperation (a StringIO's fileno) is one too
        return again.errno is not None and again.errno == exc.errno
    except ValueError:  # closed
        return False
    try:
        os.write(fd, b"")
    except OSError as again:
        return again.errno == exc.errno
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return False
    try:  # a terminal's or a pipe's file system has no blocks either: files only
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.fstatvfs(fd).f_bavail == 0
    except OSError:
        return False
