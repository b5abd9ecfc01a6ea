"""The package's public surface, its place in the layers, and what importing it costs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import devcell.runs
from tests.conftest import REPO

PACKAGE = REPO / "devcell" / "runs"


def test_public_api() -> None:
    from devcell.runs import (  # noqa: F401
        RunSnapshot,
        StorageError,
        create_file_snapshot_store,
        create_in_memory_snapshot_store,
        create_sqlite_snapshot_store,
    )
    assert set(devcell.runs.__all__) >= {
        "RunSnapshot", "StorageError", "create_file_snapshot_store",
        "create_sqlite_snapshot_store", "create_in_memory_snapshot_store"}


def _devcell_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("devcell"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("devcell"))
    return found


def test_runs_depends_only_on_errors() -> None:
    """runs/ sits beside the reconciler: it must not import the layers that will use it."""
    for path in PACKAGE.glob("*.py"):
        for module in _devcell_imports(path):
            assert module in ("devcell.errors", "devcell.log") or module.startswith("devcell.runs"), \
                (path, module)


def test_importing_the_package_imports_no_adapter() -> None:
    code = ("import sys, devcell.runs; "
            "print(sorted(m for m in ('jsonschema', 'sqlite3', 'devcell.runs.file_store', "
            "'devcell.runs.sqlite_store') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == "[]"
