"""Faulty disks for tests: a small tmpfs that fills up or turns read-only, a damaged state.db.

Mounting needs root (CI runs as root); tests that need a mount skip cleanly otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(where: Path, size: str = "8m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the test's duration."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(where)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def remount(where: Path, mode: str) -> None:
    """Remount the tmpfs at `where` read-only ("ro") or read-write ("rw")."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True,
                   capture_output=True)


def fill(disk: Path) -> Path:
    """Fill the file system holding `disk` to the last byte; returns the filler to remove."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
        while True:  # the last partial block
            try:
                out.write(b"\0" * 512)
            except OSError:
                break
    return filler


def page_of(db_path: Path, table: str) -> tuple[int, int]:
    """(root page number, page size) of `table` in a database file."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                            (table,)).fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return int(root), int(size)


def damage_table(db_path: Path, table: str) -> None:
    """Write garbage over the root page of `table` (the rest of the file is left alone)."""
    page, size = page_of(db_path, table)
    with open(db_path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\x0d\xff\xff\xff" * (size // 4))


def checkpoint(db_path: Path) -> None:
    """Move the WAL's pages into the database file, so damage to the file is what is read."""
    conn = sqlite3.connect(str(db_path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
