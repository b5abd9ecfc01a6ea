"""Temporary and trash directories that name their owner, so a dead owner's can be removed.

A volume or checkpoint is built in `.tmp-<id>-<owner>-<random>` and renamed into place; a
removal renames to `.trash-<owner>-<random>` first. `<owner>` is the process id and its start
time (from /proc, so a recycled pid is not taken for the owner). A process killed mid-copy
leaves its directory behind: recovery removes every one whose owner is provably dead (that
process no longer exists, so its operation was interrupted) and keeps those of a live one,
which may still be copying. A name without an owner is an earlier DevCell's when it has
the shape of one (`.tmp-<id>-<hex>`) and is removed like a dead owner's; any other (a
directory someone named `.tmp-notes`) is not known to be DevCell's and is kept.
An entry that is not a real directory (a link, a file) is unlinked, never entered: nothing
it points to is unmounted or removed.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from devcell.backends.host import treecopy

TMP = ".tmp-"
TRASH = ".trash-"
_OWNER = re.compile(r"-(\d+)\.(\d+)-[0-9a-f]+\Z")
_LEGACY = re.compile(r"\.tmp-[a-z]+_[0-9a-z]+(?:-[a-z]+)*-[0-9a-f]{4,}|\.trash-[0-9a-f]{6,}")
"""Temporary and trash names of DevCell before owners were recorded: `.tmp-<id>-<hex>`
(an id is `<kind>_<base32>`), `.trash-<hex>`."""


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return 0
    fields = stat.rpartition(b")")[2].split()
    return int(fields[19]) if len(fields) > 19 else 0


def owner() -> str:
    """This process, as temporary names carry it."""
    pid = os.getpid()
    return f"{pid}.{_start_time(pid) or 0}"


def temp_name(resource_id: str) -> str:
    return f"{TMP}{resource_id}-{owner()}-{os.urandom(4).hex()}"


def trash(parent: Path) -> Path:
    return parent / f"{TRASH}{owner()}-{os.urandom(6).hex()}"


def owner_alive(name: str) -> bool:
    """Whether the process named in `name` may still be working on it."""
    found = _OWNER.search(name)
    if found is None:
        # no owner recorded: an earlier DevCell's temporary (its id's shape) is removed; any
        # other name (a user's `.tmp-notes`) is not known to be DevCell's and is kept
        return _LEGACY.fullmatch(name) is None
    pid, started = int(found.group(1)), int(found.group(2))
    now = _start_time(pid)
    if now is None:
        return False
    return started == 0 or now in (0, started)


def remove_dead(parent: Path, prefix: str | None = None) -> list[str]:
    """Remove the temporary and trash directories under `parent` whose owner is dead
    (only those starting with `prefix`, if given); returns their names."""
    if prefix is None:
        prefixes: tuple[str, ...] = (TMP, TRASH)
    else:
        prefixes = (prefix,)
    try:
        names = [e.name for e in os.scandir(parent) if e.name.startswith(prefixes)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in names:
        if owner_alive(name):
            continue
        try:
            entry = os.lstat(parent / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(entry.st_mode):
            os.unlink(parent / name)  # a link is removed itself: its target never touched
        elif name.startswith(TRASH):
            # a mount left inside (a checkpoint's view, a fork's overlay) is detached first:
            # never removed through, nor left behind
            treecopy.detach_mounts_under(parent / name)
            from devcell.backends.host import removal  # `rm`: subprocess only here

            removal.remove_quietly(parent / name)
        else:
            treecopy.remove_tree(parent / name, trash(parent))
        removed.append(name)
    return removed
