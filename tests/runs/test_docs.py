"""docs/runs.md stays true: its example runs, and its table lists exactly the error codes."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from devcell.runs import StorageError
from tests.conftest import REPO

DOC = (REPO / "docs" / "runs.md").read_text()


def test_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the example's mkdtemp()
    blocks = re.findall(r"```python\n(.*?)```", DOC, re.S)
    assert blocks, "docs/runs.md has no python example"
    for code in blocks:
        exec(compile(code, "docs/runs.md", "exec"), {"__name__": "docs_example"})


def test_every_error_code_is_documented() -> None:
    section = DOC.split("\n## Errors\n", 1)[1]
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", section, re.M))
    assert documented == set(StorageError.CODES)
