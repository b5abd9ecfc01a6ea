"""Reading a vm snapshot's files (snapshot export): the bounded walk vs `debugfs rdump`.

An ext4 image holding `--files` small files in `--dirs` directories, `--links` symbolic links
in one directory (half of them past 60 bytes: slow links) and one 8 MiB file is read out
`--runs` times each way, in turns:
  walk    vm_extract.extract: batches of debugfs requests, a few runs per level of the tree,
          every host file made with O_EXCL|O_NOFOLLOW, times to the nanosecond (DevCell)
  rdump   `debugfs -R "rdump / DIR"`: one process (what the first vm slice did; unsafe with a
          crafted disk, see docs/backends.md)
Same run, medians, ratio. Run by hand:

    .venv/bin/python bench/vm_extract.py --files 1000 --runs 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devcell.backends.vm import extract as vm_extract  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--dirs", type=int, default=20)
    parser.add_argument("--links", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="devcell-bench-extract-") as tmp:
        root = Path(tmp)
        tree = root / "tree"
        for n in range(args.files):
            directory = tree / f"d{n % args.dirs}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"f{n}.txt").write_text(f"file {n}\n" * 20)
        (tree / "big.bin").write_bytes(os.urandom(8 << 20))
        (tree / "links").mkdir()
        for n in range(args.links):
            os.symlink(f"target-{n}" + ("x" * 70 if n % 2 else ""), tree / "links" / f"l{n}")
        image = root / "disk.ext4"
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(image), "256M"],
                       check=True)
        walk, rdump = [], []
        runs = _count_debugfs_runs()
        for n in range(args.runs):
            out = root / f"walk{n}"
            out.mkdir()
            began = time.perf_counter()
            vm_extract.extract(image, out, budget=1 << 30)
            walk.append(time.perf_counter() - began)
            shutil.rmtree(out)
            out = root / f"rdump{n}"
            out.mkdir()
            began = time.perf_counter()
            subprocess.run(["debugfs", "-R", f'rdump / "{out}"', str(image)], check=True,
                           capture_output=True)
            rdump.append(time.perf_counter() - began)
            shutil.rmtree(out)
    w, r = statistics.median(walk), statistics.median(rdump)
    print(f"{args.files} files in {args.dirs} directories, {args.links} links + 8 MiB, "
          f"{args.runs} runs, medians; walk: {len(runs) // args.runs} debugfs processes a run")
    print(f"| walk (DevCell) | {w:.2f} s | rdump | {r:.2f} s | walk / rdump | {w / r:.1f}x |")


def _count_debugfs_runs() -> list[object]:
    """The debugfs processes the walk starts (the old walk had no batches: counted as 0)."""
    runs: list[object] = []
    try:
        from devcell.backends.vm import debugfs
    except ImportError:
        return runs
    real = debugfs._read

    def counted(argv: list[str], **kw: object) -> bytes:
        runs.append(argv)
        return real(argv, **kw)  # type: ignore[arg-type]

    debugfs._read = counted  # type: ignore[assignment]
    return runs


if __name__ == "__main__":
    main()
