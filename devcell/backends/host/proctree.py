"""Kill a process and every process it started, found through /proc.

Used for commands DevCell runs inside a cell (a hook past its time limit): the engine gives
the command's host pid, and its descendants are whatever the cell's program forked. The
engine's own processes (runc, the shim) are ancestors, never descendants, so they are safe.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")
ROUNDS = 5
"""Listing and killing is repeated while new descendants appear (a fork during the kill)."""


def _parents(proc: Path = PROC) -> dict[int, int]:
    """pid -> parent pid of every process now (those that end while read are skipped)."""
    parents: dict[int, int] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "stat"), "rb") as f:
                stat = f.read(4096)
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and ')', so split after the last ')'.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) >= 2 and fields[1].isdigit():
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every process below `pid` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for child, parent in _parents(proc).items():
        children.setdefault(parent, []).append(child)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int, proc: Path = PROC) -> int:
    """SIGKILL `pid` and its descendants; how many processes were signalled."""
    killed: set[int] = set()
    for _ in range(ROUNDS):
        targets = [p for p in [pid, *descendants(pid, proc)] if p not in killed]
        if not targets:
            break
        for target in targets:
            try:
                os.kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(target)
    return len(killed)
