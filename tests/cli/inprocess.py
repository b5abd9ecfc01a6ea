"""The `devcell` command run in this process, as a user's shell would run it but in
milliseconds: its own standard input (empty), output and error captured, a time limit (an
alarm raises an exception the CLI does not catch), and the process's signal handlers and
streams put back afterwards. For tests that run many command lines (tests/cli/test_fuzz.py)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TIME_LIMIT = 5
"""Seconds a run may take before it counts as a hang."""


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


@contextlib.contextmanager
def _environ(env: dict[str, str] | None) -> Iterator[None]:
    """os.environ as `env` for the run (the process's put back afterwards)."""
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _no_fifo_wait(loader: Any) -> Iterator[None]:
    """A FIFO given with -f is not waited on for a writer (loader.FIFO_WAIT_S, 10 s): the
    runs here name FIFOs nobody writes, and each wait would read as a hang."""
    saved = loader.FIFO_WAIT_S
    loader.FIFO_WAIT_S = 0.0
    try:
        yield
    finally:
        loader.FIFO_WAIT_S = saved


def run(argv: list[str], cwd: Path, *, env: dict[str, str] | None = None,
        time_limit: float = TIME_LIMIT) -> tuple[int | str, str, str]:
    """(exit code, or "hang" or the exception's name; stdout; stderr) of one command line,
    in `env` (the whole environment, as a subprocess's) when given."""
    from devcell.cli import main
    from devcell.manifests import loader

    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]  # real files: a fileno
    out, err = (io.TextIOWrapper(f, encoding="utf-8", errors="backslashreplace",
                                 write_through=True) for f in files)
    with _process_state(), _environ(env), contextlib.chdir(cwd), _no_fifo_wait(loader), \
            open(os.devnull, encoding="utf-8") as null:
        sys.stdin, sys.stdout, sys.stderr = null, out, err
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, time_limit)
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
    from devcell import log

    log.disable()  # -v gave a sink on this run's stderr
    texts = []
    for wrapper in (out, err):
        with wrapper.detach() as raw:  # flushed, and the file left open to be read
            raw.seek(0)
            texts.append(raw.read().decode(errors="replace"))
    return code, texts[0], texts[1]
