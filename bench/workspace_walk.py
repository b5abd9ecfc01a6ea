#!/usr/bin/env python3
"""The workspace change check (`delete`'s approval gate, `treecopy.signature`) and the copy's
scan (`treecopy.measure`) over a tree of 20,000 files in 200 directories, walked by
`treewalk` (no recursion, one descriptor, safe on trees a cell made hostile), against the
walk they replaced (`os.fwalk` into a set of tuples), in the same process.

Run by hand: .venv/bin/python bench/workspace_walk.py [--runs 7]
"""

from __future__ import annotations

import os
import shutil
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from devcell.backends.host import treecopy


def fwalk_signature(root: Path) -> set[tuple[str, str, int, int, int]]:
    """The signature before issue 10 (recursive os.fwalk, full relative paths in a set)."""
    out: set[tuple[str, str, int, int, int]] = set()
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        rel = os.path.relpath(dirpath, root)
        prefix = "" if rel == "." else rel + os.sep
        for name in dirnames + filenames:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            kind = "d" if stat.S_ISDIR(st.st_mode) else "f"
            out.add((prefix + name, kind, st.st_size, st.st_mtime_ns, st.st_mode))
    return out


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 7
    root = Path(tempfile.mkdtemp(prefix="devcell-bench-walk-"))
    try:
        for d in range(200):
            sub = root / f"d{d:03d}"
            sub.mkdir()
            for f in range(100):
                (sub / f"f{f:03d}").write_bytes(b"x" * 100)
        rows = [("signature (treewalk, digest)", median_ms(lambda: treecopy.signature(root), runs)),
                ("signature before (os.fwalk, set)", median_ms(lambda: fwalk_signature(root), runs)),
                ("measure (treewalk)", median_ms(lambda: treecopy.measure(root), runs))]
        for name, ms in rows:
            print(f"{name:36s} median {ms:7.1f} ms over {runs} runs (20,000 files)")
        print(f"ratio new/old signature: {rows[0][1] / rows[1][1]:.2f}")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
