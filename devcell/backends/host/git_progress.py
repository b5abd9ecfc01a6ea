"""git's progress shown while a clone runs on a terminal (a workspace's source, dotfiles).

git writes its progress to standard error (`Receiving objects:  45% (450/1000)`, redrawn
with carriage returns) when asked with `--progress`; this reads it as it comes and hands each
phase and percentage to DevCell's progress mechanism (devcell/progress.py), which draws it
only when a terminal shows it: with no reporter installed the clone is run quietly, as
before. What git writes is read in bounded pieces (a line is cut at MAX_LINE, only the last
TAIL bytes kept for the error message) and the text shown is escaped by the reporter, so a
hostile server's progress text forges nothing on the terminal.
"""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable, Mapping, Sequence

from devcell import progress
from devcell.backends.host import children

MAX_LINE = 4096
TAIL = 64 * 1024
_PHASE = re.compile(rb"^(?:remote: )?([A-Za-z][A-Za-z ]{0,40}):\s+(\d{1,3})%")


def run(argv: Sequence[str], *, env: Mapping[str, str], timeout: float,
        description: str, watch: Callable[[], str | None] | None = None,
        inherit: bool = True) -> children.CompletedProcess[bytes]:
    """Run git (`argv` holding --progress) with its progress shown under `description`;
    as children.run_bytes returns (stdout empty, stderr its last TAIL bytes). Past
    `timeout` seconds git is killed and TimeoutExpired raised; `watch` (asked about every
    second) stops it the same way, children.Stopped with its reason; `inherit` as
    children.stderr_reader's."""
    deadline = time.monotonic() + timeout
    tail = bytearray()
    line = bytearray()
    with progress.track_steps(description) as step, \
            children.stderr_reader(argv, env=env, inherit=inherit) as proc:
        assert proc.stderr is not None
        fd = proc.stderr.fileno()
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise children.TimeoutExpired(list(argv), timeout)
                why = watch() if watch is not None else None
                if why is not None:
                    raise children.Stopped(why)
                if not select.select([fd], [], [], min(left, 1.0))[0]:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                tail = (tail + chunk)[-TAIL:]
                for byte in chunk:
                    if byte in b"\r\n":
                        _report(bytes(line), step)
                        line.clear()
                    elif len(line) < MAX_LINE:
                        line.append(byte)
            code = proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return children.CompletedProcess(list(argv), code, b"", bytes(tail))


def _report(line: bytes, step: progress.Step) -> None:
    found = _PHASE.match(line)
    if found is None:
        return
    percent = min(int(found.group(2)), 100)
    phase = found.group(1).decode("ascii")
    step(max(percent, 1), 100, f"{phase} {percent}%")
