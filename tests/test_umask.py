"""No module of DevCell sets the process's umask: it is the whole process's, shared by the API
server's threads, and two overlapping set-and-restore pairs once left it at 077 for good, after
which every file made (a feature's install.sh, a vm cell's supervisor.sh) lost its group and
other bits. Modes are given explicitly instead (mkdir/open then chmod, fchmod)."""

from __future__ import annotations

import re
from pathlib import Path

import devcell

SETS_UMASK = re.compile(r"\bos\.umask\b|\bimport\s+umask\b|\.umask\s*\(")


def test_no_module_sets_the_umask() -> None:
    root = Path(devcell.__file__).parent
    found = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), start=1)
             if SETS_UMASK.search(line.split("#", 1)[0])]
    assert found == []
