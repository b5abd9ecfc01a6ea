"""Removing a tree that an image, an archive or a cell shaped.

Such a tree can be deeper than Python's recursion limit (shutil.rmtree recurses on 3.11: a
chain 1,100 directories deep is a RecursionError, which `ignore_errors` does not catch) and
can hold links anywhere. `rm -rf --one-file-system` walks by descriptors without following a
link, at any depth, and never crosses into a mount left inside.
"""

from __future__ import annotations

import os
from pathlib import Path

from devcell.backends.host import children
from devcell.errors import BackendError
from devcell.log import logger


def remove(path: Path) -> None:
    """`path` and all it holds gone (a link is removed, never followed); BackendError if
    something stayed."""
    if not os.path.lexists(path):
        return
    done = children.run(["rm", "-rf", "--one-file-system", "--", str(path)])
    if done.returncode != 0 or os.path.lexists(path):
        raise BackendError(f"could not remove all of {path}: {done.stderr.strip()[-300:]}")


def remove_quietly(path: Path) -> bool:
    """`remove`, for clean-up on a path that is already failing: what stays is logged (a
    temporary's name lets the next sweep find it), never raised over the first error."""
    try:
        remove(path)
    except (BackendError, OSError) as exc:
        logger.warning("clean-up left {}: {}", path, exc)
        return False
    return True
