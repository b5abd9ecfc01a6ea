"""The package's public surface, its place in the layers, and what importing it costs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

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
        if isinstance(node, ast.ImportFrom) and node.module == "devcell":
            found.update(f"devcell.{a.name}" for a in node.names)  # from devcell import x
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("devcell"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("devcell"))
    return found


def test_runs_depends_only_on_errors() -> None:
    """runs/ sits beside the reconciler: it must not import the layers that will use it (the
    table of what storage errors mean is shared with the state database, below both)."""
    for path in PACKAGE.glob("*.py"):
        for module in _devcell_imports(path):
            assert module in ("devcell.errors", "devcell.log", "devcell.storage_causes") \
                or module.startswith("devcell.runs"), \
                (path, module)


def test_importing_the_package_imports_no_adapter() -> None:
    code = ("import sys, devcell.runs; "
            "print(sorted(m for m in ('jsonschema', 'sqlite3', 'devcell.runs.file_store', "
            "'devcell.runs.sqlite_store') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_open_store_picks_the_store_by_name_flag_then_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devcell.errors import UsageError
    from devcell.runs import file_store, open_store, sqlite_store

    monkeypatch.delenv("DEVCELL_RUN_STORE", raising=False)
    default = open_store(tmp_path)
    assert isinstance(default, sqlite_store.SqliteSnapshotStore)
    assert default.path == tmp_path / "state.db"
    assert isinstance(open_store(tmp_path, "file"), file_store.FileSnapshotStore)
    monkeypatch.setenv("DEVCELL_RUN_STORE", "file")
    assert isinstance(open_store(tmp_path), file_store.FileSnapshotStore)
    assert isinstance(open_store(tmp_path, "sqlite"), sqlite_store.SqliteSnapshotStore)
    with pytest.raises(UsageError, match="unknown run store 'tape'"):
        open_store(tmp_path, "tape")
