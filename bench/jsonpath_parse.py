#!/usr/bin/env python3
"""Parsing a 24 KB `-o jsonpath` template: this build's parser vs. another git ref's, same run.

Two templates of about 24 KB: a long path inside 63 nested filters (the worst case of a parser
that scans each filter's text again at every level), and the same path without nesting. Each
parser parses each template --runs times, alternating; medians and ratios are printed. The
peer parser is the file `devcell/cli/jsonpath.py` at --peer-ref (default main), loaded from
git into this process, so both run on the same interpreter, machine and moment.
Run by hand: .venv/bin/python bench/jsonpath_parse.py [--runs 5] [--peer-ref main]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devcell.cli import jsonpath  # noqa: E402


def peer_parser(ref: str) -> Callable[[str], object]:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:devcell/cli/jsonpath.py"],
                            check=True, capture_output=True, text=True).stdout
    module = types.ModuleType(f"jsonpath_at_{ref}")
    exec(compile(source, f"{ref}:devcell/cli/jsonpath.py", "exec"), module.__dict__)
    parse: Callable[[str], object] = module.parse
    return parse


def templates() -> dict[str, str]:
    depth = jsonpath.MAX_NESTING - 1
    nested = "{.a" + "[?(@.a" * depth + ".b" * 11_800 + ")]" * depth + "}"
    flat = "{.a" + ".b" * ((len(nested) - 4) // 2) + "}"
    return {"nested filters, 63 deep": nested, "flat path": flat}


def timed(parse: Callable[[str], object], template: str) -> float:
    started = time.perf_counter()
    try:
        parse(template)
    except Exception:  # a parser may refuse the template: time it all the same
        pass
    return time.perf_counter() - started


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--peer-ref", default="main")
    args = p.parse_args()
    peer = peer_parser(args.peer_ref)
    print(f"| template ({len(next(iter(templates().values())))} chars) | this build (ms, median) "
          f"| {args.peer_ref} (ms, median) | this/{args.peer_ref} |")
    print("| --- | --- | --- | --- |")
    for name, template in templates().items():
        ours, theirs = [], []
        for _ in range(args.runs):
            ours.append(timed(jsonpath.parse, template))
            theirs.append(timed(peer, template))
        a, b = statistics.median(ours) * 1000, statistics.median(theirs) * 1000
        print(f"| {name} | {a:.1f} | {b:.1f} | {a / b:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
