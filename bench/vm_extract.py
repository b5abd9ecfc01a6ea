"""Reading a vm snapshot's files (snapshot export): the bounded walk vs `debugfs rdump`.

An ext4 image holding `--files` small files in `--dirs` directories (plus one 8 MiB file) is
read out `--runs` times each way, in turns:
  walk    vm_extract.extract: one debugfs request per directory and per file, every host file
          made with O_EXCL|O_NOFOLLOW (what DevCell does)
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
        image = root / "disk.ext4"
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(image), "256M"],
                       check=True)
        walk, rdump = [], []
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
    print(f"{args.files} files in {args.dirs} directories + 8 MiB, {args.runs} runs, medians")
    print(f"| walk (DevCell) | {w:.2f} s | rdump | {r:.2f} s | walk / rdump | {w / r:.1f}x |")


if __name__ == "__main__":
    main()
