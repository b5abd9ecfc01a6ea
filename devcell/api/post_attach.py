"""spec.hooks.postAttach: commands run in the cell each time a developer attaches to it
(devcontainer.json's postAttachCommand, which an editor runs when it connects).

Attaching is an interactive session: a `devcell ssh` shell (not a command, scp or sftp: a
tool's connection is no developer arriving) and `devcell exec -t`. The hooks run before the
session's own command, as its user and in its directory, without a terminal; their output
goes to the session's error stream. A failure, or a hook past hooks.timeoutSeconds (then
killed with what it started), is said there and the session goes on: a broken greeting must
not lock the developer out of the cell.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any, BinaryIO

from devcell import names
from devcell.backends.base import CellRef
from devcell.backends.interactive import ExecOptions, Interactive
from devcell.errors import DevCellError

HOOK_TIMEOUT_S = 60.0


def commands(spec: dict[str, Any]) -> list[list[str]]:
    """The cell's postAttach commands (none: nothing to run)."""
    return [list(map(str, argv)) for argv in (spec.get("hooks") or {}).get("postAttach") or []]


class _Lines:
    """A session's raw terminal wants CR LF: the hooks' plain output, made to show right."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def write(self, data: bytes) -> int:
        self.out.write(bytes(data).replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def run(backend: Interactive, cell: CellRef, *, out: BinaryIO,
        options: ExecOptions | None = None, raw_terminal: bool = False) -> int:
    """Run the postAttach hooks; the number that failed (each said on `out`). `options`: the
    session's (its environment, directory, user, and hang-up: a client gone ends them)."""
    argvs = commands(cell.spec)
    if not argvs:
        return 0
    sink: Any = _Lines(out) if raw_terminal else out
    limit = float((cell.spec.get("hooks") or {}).get("timeoutSeconds", HOOK_TIMEOUT_S))
    session = options or ExecOptions()
    failed = 0
    for argv in argvs:
        stop = threading.Event()
        expired = threading.Event()
        watcher = threading.Thread(target=_watch, args=(stop, expired, session.hang_up, limit),
                                   daemon=True, name="devcell-post-attach")
        watcher.start()
        try:
            code = backend.exec(cell, argv, stdout=sink, stderr=sink,
                                options=dataclasses.replace(session, hang_up=stop))
            why = None if code == 0 else f"exited with status {code}"
        except DevCellError as exc:
            why = f"could not run: {exc}"
        finally:
            stop.set()
            watcher.join()
        if expired.is_set():
            why = f"ran past its time limit of {limit:g}s and was killed"
        if why is not None:
            failed += 1
            sink.write(f"devcell: postAttach hook {names.printable(' '.join(argv))[:200]} "
                       f"{names.printable(why)}; the session goes on\n".encode())
            sink.flush()
    return failed


def _watch(stop: threading.Event, expired: threading.Event,
           hang_up: threading.Event | None, limit: float) -> None:
    """End the hook (set `stop`) past `limit` seconds, or when the session hangs up."""
    deadline = time.monotonic() + limit
    while not stop.wait(0.1):
        if hang_up is not None and hang_up.is_set():
            stop.set()
        elif time.monotonic() >= deadline:
            expired.set()
            stop.set()
