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


LAZY = """
import sys
from devcell import log
from devcell.log import logger

lines = []
log.configure(lambda real: real.add(lambda m: lines.append(m.record), level="WARNING",
                                    format="{message}"), level="WARNING")
logger.bind(cell="c1").info("not shown {}", 1)
logger.debug("not shown either")
assert "loguru" not in sys.modules, "a record no sink takes imported loguru"


def caller():
    logger.bind(cell="c1").warning("shown {}", 2)
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")


caller()
assert "loguru" in sys.modules and log.loaded()
from loguru import logger as real
assert len(real._core.handlers) == 1, "the default sink was built although replaced"
print([(r["message"], r["level"].name, r["name"], r["function"], r["extra"],
        r["exception"] is not None) for r in lines])
print(len(lines))
"""


def test_loguru_is_imported_only_when_a_record_reaches_a_sink() -> None:
    """A command that logs nothing (at the CLI's default level, warnings) never imports loguru;
    the first record a sink takes imports it, with the caller's module and function, its bound
    context, and its exception, as loguru's own logger would record them."""
    done = _run(LAZY)
    assert done.returncode == 0, done.stderr
    records, count = done.stdout.splitlines()
    assert records == str([("shown 2", "WARNING", "__main__", "caller", {"cell": "c1"}, False),
                           ("failed", "ERROR", "__main__", "caller", {}, True)])
    assert count == "2"


def test_the_library_stays_silent_without_configure() -> None:
    """Without an application's sinks nothing imports loguru, whatever is logged; once loguru
    is imported by someone else, DevCell's records go to it, disabled until enabled."""
    done = _run("""
from devcell.log import logger
from devcell import log
logger.error("nobody listens")
assert "loguru" not in sys.modules
from loguru import logger as real
real.remove()
seen = []
real.add(lambda m: seen.append(m.record["message"]))
in_devcell = {"__name__": "devcell.somewhere", "logger": logger}  # what disable() silences
exec('logger.warning("disabled")', in_devcell)
log.enable()
exec('logger.warning("enabled {}", "now")', in_devcell)
print(seen)
""")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['enabled now']"
