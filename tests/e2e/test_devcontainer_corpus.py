"""Real teams' devcontainer.json files (tests/data/devcontainer_corpus: the specification's
templates and images, microsoft/vscode-remote-try-*, projects such as cpython, django, dotnet,
rails), each imported with `devcell import devcontainer` and dry-run with `devcell apply
--dry-run`, the files they reference laid down by the harness (tests/devcontainer_corpus.py),
the Features they name served by a local registry (a minimal Feature of the specification's
format per reference, ghcr.io mirrored to it), under a configuration granting what a team's
administrator would (tests/devcontainer_corpus.GRANTS) and allowing the project's folder.

At least 90% convert and apply; every other one is refused naming its fields (never a
traceback, never an error naming no field); and no converted file had a field changed
silently (each top-level field is carried into the manifest or named on stderr). The
per-file table is printed (pytest -s; bench/devcontainer_corpus.py prints it by hand).

The 114 commands run in two worker processes, each running them in-process
(corpus.run_all): the same commands, arguments, working directory and environment, without
an interpreter's start and DevCell's imports for each (the CLI's own start-up is covered by
the other e2e tests; bench/devcontainer_corpus.py still runs each as a process).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import devcontainer_corpus as corpus

pytestmark = pytest.mark.e2e


def test_the_corpus_converts_and_applies_or_is_refused_by_name(tmp_path: Path) -> None:
    chosen = corpus.entries()
    assert len(chosen) >= 50, "the corpus is missing from tests/data/devcontainer_corpus"
    registry = corpus.serve_features(tmp_path / "registry", corpus.corpus_features())
    try:
        outcomes = corpus.run_all([
            (entry, tmp_path / f"p{i}", tmp_path / f"s{i}",
             corpus.corpus_config(tmp_path / f"p{i}", grant=True, mirror=registry.address))
            for i, entry in enumerate(chosen)])
    finally:
        registry.stop()
    table = corpus.table(outcomes) + "\n" + corpus.summary(outcomes)
    print(table)
    failed = [o for o in outcomes if o.status == "failed"]
    assert not failed, table
    silent = [o for o in outcomes if o.silent]
    assert not silent, table
    assert all(o.refused for o in outcomes if o.status == "refused"), table
    converted = sum(o.status == "converted" for o in outcomes)
    assert converted >= 0.9 * len(outcomes), table
