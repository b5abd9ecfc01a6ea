"""Named crash points for tests: `DEVCELL_FAILPOINT=name[:nth]` SIGKILLs the process there.

The crash-point matrix kills DevCell at every step boundary and checks what a restart finds.
With no variable set, `hit()` is one dict lookup.
"""

from __future__ import annotations

import os
import signal
import sys

_spec = os.environ.get("DEVCELL_FAILPOINT", "")
_name, _, _nth = _spec.partition(":")
_target = int(_nth) if _nth else 1
_hits = 0


def hit(name: str) -> None:
    """Die here (SIGKILL, no cleanup) if this is the chosen failpoint's nth hit."""
    global _hits
    if not _name or name != _name:
        return
    _hits += 1
    if _hits == _target:
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
