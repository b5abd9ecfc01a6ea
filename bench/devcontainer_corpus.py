#!/usr/bin/env python3
"""Real teams' devcontainer.json files through `devcell import devcontainer` and
`devcell apply --dry-run`: the per-file table (converted / refused: the field and why / failed)
and how many files each field refuses. The harness is tests/devcontainer_corpus.py (the test
tests/api/test_devcontainer_corpus.py asserts on the same outcomes).

The Features the corpus names are served by a local registry (Debian's docker-registry on
127.0.0.1, as the tests run it) when `--registry` is given and DevCell's features support is
there: each is a minimal feature of the specification's format pushed under the same
repository name, and DevCell's configuration sends ghcr.io to it (images.registryMirrors).

Run by hand: .venv/bin/python bench/devcontainer_corpus.py [--corpus DIR] [--registry]
(~1 min; --corpus /work/shared/devcontainer_corpus for the copy the issue was measured on).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import devcontainer_corpus as corpus  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=corpus.CORPUS)
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--registry", action="store_true",
                        help="serve the corpus's Features from a local registry")
    parser.add_argument("--only", help="only the files whose folder contains this")
    parser.add_argument("--grant", action="store_true",
                        help="with the allowances a team would grant (tests/devcontainer_corpus."
                             "GRANTS: capabilities, security options, privileged, devices, "
                             "host commands)")
    args = parser.parse_args()
    chosen = [e for e in corpus.entries(args.corpus)
              if not args.only or args.only in e.folder]
    with tempfile.TemporaryDirectory(prefix="devcell-corpus-") as tmp:
        base = Path(tmp)

        def one(indexed: tuple[int, corpus.Entry]) -> corpus.Outcome:
            i, entry = indexed
            root = base / f"p{i}"
            return corpus.run(entry, root, base / f"s{i}",
                              config=corpus.corpus_config(root, grant=args.grant))

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            outcomes = list(pool.map(one, enumerate(chosen)))
    print(corpus.table(outcomes))
    print()
    print(corpus.summary(outcomes))
    for key, count in corpus.refused_fields(outcomes).items():
        print(f"  refused by {key}: {count}")
    silent = [o for o in outcomes if o.silent]
    for o in silent:
        print(f"  {o.folder}: silently dropped {', '.join(o.silent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
