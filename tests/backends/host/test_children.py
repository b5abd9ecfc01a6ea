"""Every process DevCell starts goes through devcell/backends/host/children.py, which makes it die
with DevCell (PR_SET_PDEATHSIG) in its own process group: a spawn site that bypasses it is the
leak item 9 of issue 10 was about (cp children copying on after a kill -9)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

HELPER = REPO / "devcell" / "backends" / "host" / "children.py"
SPAWNING = {"subprocess", "multiprocessing", "pty", "concurrent.futures.process"}
OS_SPAWNING = {"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe",
               "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnlp", "posix_spawn",
               "posix_spawnp"}


def _spawn_sites(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in SPAWNING]
        elif isinstance(node, ast.ImportFrom) and node.module in SPAWNING:
            found.append(f"from {node.module} import ...")
        elif (isinstance(node, ast.Attribute) and node.attr in OS_SPAWNING
              and isinstance(node.value, ast.Name) and node.value.id == "os"):
            found.append(f"os.{node.attr}")
    return [f"{path.relative_to(root)}:{site}" for site in found]


def test_only_the_children_module_starts_processes() -> None:
    sites = [site for path in sorted((REPO / "devcell").rglob("*.py")) if path != HELPER
             for site in _spawn_sites(path)]
    assert sites == [], ("start processes with devcell.backends.host.children.run (they must die "
                         f"with DevCell): {sites}")


def test_the_check_sees_a_spawn_site(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("import subprocess\nimport os\nfrom multiprocessing import Pool\n"
                       "os.system('true')\n")
    assert _spawn_sites(planted, tmp_path) == [
        "planted.py:import subprocess", "planted.py:from multiprocessing import ...",
        "planted.py:os.system"]
