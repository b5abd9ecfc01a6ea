"""DevCell as a library is silent; the applications (the CLI, the daemon) turn its logs on."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LIBRARY_USE = {
    "runs": """
from devcell.runs import create_file_snapshot_store, create_sqlite_snapshot_store
from tests.runs.helpers import make_snapshot
for store in (create_sqlite_snapshot_store(path=sys.argv[1] + "/runs.db"),
              create_file_snapshot_store(root=sys.argv[1])):
    store.save(make_snapshot("op_0001")); store.load("op_0001"); store.delete("op_0001")
    store.close()
""",
    "reconciler": """
from pathlib import Path
from devcell.api import apply as api
report = api.apply(Path(sys.argv[1]) / "state", [sys.argv[2]])
assert report.ok, report
api.delete(Path(sys.argv[1]) / "state", "Cell", "api")
""",
}


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys\n" + code, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_the_library_writes_nothing_to_stderr(tmp_path: Path) -> None:
    for name, code in LIBRARY_USE.items():
        done = _run(code, str(tmp_path / name), str(REPO / "examples" / "api.yaml"))
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", (name, done.stderr)


def test_the_cli_still_logs_when_asked(tmp_path: Path) -> None:
    import os

    done = subprocess.run(
        [sys.executable, "-m", "devcell", "apply", "-v", "-v", "-f",
         str(REPO / "examples" / "api.yaml")], cwd=REPO, capture_output=True, text=True,
        env=dict(os.environ, DEVCELL_HOME=str(tmp_path / "state")), timeout=120)
    assert done.returncode == 0, done.stderr
    assert " DEBUG " in done.stderr and " INFO " in done.stderr


def test_every_module_logs_through_devcell_log() -> None:
    """Importing loguru directly would log before the library is silenced (devcell.log)."""
    direct = []
    for path in (REPO / "devcell").rglob("*.py"):
        if path == REPO / "devcell" / "log.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "loguru" or \
                    isinstance(node, ast.Import) and any(a.name == "loguru" for a in node.names):
                direct.append(str(path.relative_to(REPO)))
    assert direct == []
