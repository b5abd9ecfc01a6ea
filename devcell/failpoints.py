"""Named crash points for tests: `DEVCELL_FAILPOINT=name[:nth]` SIGKILLs the process there.

The crash-point matrix kills DevCell at every step boundary and checks what a restart finds.
`DEVCELL_PAUSEPOINT=name` with `DEVCELL_PAUSEPOINT_FILE=PATH` instead holds the process at
that point (it creates PATH.reached, then waits, at most 5 minutes, until PATH is removed):
fault tests do something to the machine there (stop the Docker engine mid-checkpoint).
With no variable set, `hit()` is one dict lookup.
"""

from __future__ import annotations

import os
import signal
import sys
import time

_spec = os.environ.get("DEVCELL_FAILPOINT", "")
_name, _, _nth = _spec.partition(":")
_target = int(_nth) if _nth else 1
_hits = 0
_pause = os.environ.get("DEVCELL_PAUSEPOINT", "")
_pause_file = os.environ.get("DEVCELL_PAUSEPOINT_FILE", "")
PAUSE_MAX_S = 300.0


def hit(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if this is the chosen failpoint's nth hit."""
    global _hits
    if _pause and name == _pause and _pause_file:
        _hold(_pause_file)
    if not _name or name != _name:
        return
    _hits += 1
    if _hits == _target:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _hold(path: str) -> None:
    """Say the point was reached, then wait until the test removes `path`."""
    with open(path + ".reached", "w"):
        pass
    deadline = time.monotonic() + PAUSE_MAX_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
