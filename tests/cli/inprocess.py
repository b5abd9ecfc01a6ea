"""The `devcell` command run in this process, as a user's shell would run it but in
milliseconds: its own standard input (empty), output and error captured, a time limit (an
alarm raises an exception the CLI does not catch), and the process's signal handlers and
streams put back afterwards. For tests that run many command lines (tests/cli/test_fuzz.py)."""

from __future__ import annotations

import contextlib
import io
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

TIME_LIMIT = 5
"""Seconds a run may take before it counts as a hang."""


class _Kept(io.BytesIO):
    """A buffer that outlives the text stream wrapped around it (whose end would close it)."""

    def close(self) -> None:
        pass


class Hang(BaseException):
    """Raised by the alarm: the run did not end within TIME_LIMIT."""


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    """What main() may change for the process (signal handlers, stdio), put back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    streams = sys.stdin, sys.stdout, sys.stderr
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sys.stdin, sys.stdout, sys.stderr = streams


def run(argv: list[str], cwd: Path) -> tuple[int | str, str, str]:
    """(exit code, or "hang" or the exception's name; stdout; stderr) of one command line."""
    from devcell.cli import main

    out, err = _Kept(), _Kept()
    with _process_state(), contextlib.chdir(cwd):
        sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(out, encoding="utf-8", errors="backslashreplace",
                                      write_through=True)
        sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace",
                                      write_through=True)
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
        code: int | str
        try:
            code = main.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Hang:
            code = "hang"
        except BaseException as exc:  # noqa: BLE001 - a traceback in the real CLI
            code = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout.flush()
        sys.stderr.flush()
    return code, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")
