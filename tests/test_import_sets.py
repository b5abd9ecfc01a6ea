"""What each everyday command imports, kept as exact lists: growth is a reviewed change.

Every command's start-up is part of its price (issue 26: `get cells NAME` against `python -c
"import sqlite3, yaml"`, a no-op re-apply against a parse-only process, bench/). A module a
command does not use creeps in unnoticed through one top-level import three layers down; this
test runs `get` (its forms), `apply` (a no-op), `exec`, `logs` and `snapshot create` on the
fake backend over a real state directory, each in a fresh interpreter that lists, at exit,
the DevCell modules and the third-party packages it imported, and compares them with the lists
below. A command that imports more, or less, fails with the difference and how to update its
list. Cost: 11 short subprocesses, ~5-12 s.

The container backend's own paths (exec over the engine's socket, a snapshot's freeze) are
checked against the engine in tests/backends/container/ (no docker SDK, no http.client).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LISTING = """
import atexit, os, sys
def _listing():
    site = [p for p in sys.path if p.endswith("-packages")]
    ours = sorted(m for m in sys.modules if m == "devcell" or m.startswith("devcell."))
    theirs = set()
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        where = getattr(module, "__file__", None) or ""
        if top != "devcell" and not top.startswith("__editable__") and top != "_distutils_hack" \\
                and any(where.startswith(p + os.sep) for p in site):
            theirs.add(top)
    with open(os.environ["IMPORT_SETS_OUT"], "w") as out:
        out.write(repr({"devcell": ours, "third_party": sorted(theirs),
                        "typing": "typing" in sys.modules}))
atexit.register(_listing)
sys.argv[0] = "devcell"
from devcell.cli.main import main
sys.exit(main())
"""
"""`devcell ARGS` as the console script runs it, writing what it imported at exit."""

CELL = """\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata:
  name: web
  labels: {team: core}
spec:
  backend: fake
  image: devcell/busybox:latest
  services:
    - name: web
      command: [sh, -c, "httpd -f -p 8080"]
  env:
    - {name: LOG_LEVEL, value: debug}
    - {name: API_TOKEN, value: not-a-secret, secret: true}
"""

# -- the lists: what each command imports today ------------------------------------------------
# `get`'s rows and documents come from devcell.api.listing, which the HTTP API reads too
# (issue 27): two small modules, so that both answer the same records; its tables from
# devcell.api.render, which the API's describe uses too.
# The start-up every command shares: the entry point, the command table and the parser (its
# records are devcell.records classes: no NamedTuple compiled at import).
_CLI = ["devcell", "devcell.cli", "devcell.cli.arguments", "devcell.cli.commands",
        "devcell.cli.main", "devcell.cli.parser", "devcell.errors", "devcell.kinds",
        "devcell.names", "devcell.records"]
# Opening the state database for reading.
_STORE = ["devcell.manifests", "devcell.storage_causes", "devcell.store", "devcell.store.clock",
          "devcell.store.db", "devcell.store.faults", "devcell.store.guard",
          "devcell.store.migrations", "devcell.store.state_dir"]
EXPECTED: dict[str, tuple[list[str], list[str]]] = {
    # what: (DevCell modules, third-party packages)
    "get cells NAME": ([
        *_CLI, *_STORE, "devcell.api", "devcell.api.listing", "devcell.cli.cmd_get",
        "devcell.api.render",
        "devcell.manifests.secrets", "devcell.store.daemon_status",
        "devcell.store.observations", "devcell.store.views"],
        []),
    "get cells": ([
        *_CLI, *_STORE, "devcell.api", "devcell.api.listing", "devcell.cli.cmd_get",
        "devcell.api.render",
        "devcell.manifests.secrets", "devcell.store.daemon_status",
        "devcell.store.observations", "devcell.store.views"],
        []),
    "get cells -o wide": ([
        *_CLI, *_STORE, "devcell.api", "devcell.api.capacity", "devcell.backend_registry",
        "devcell.backends", "devcell.backends.base", "devcell.backends.capacity",
        "devcell.api.listing", "devcell.cli.cmd_get", "devcell.api.render",
        "devcell.manifests.secrets",
        "devcell.store.capacity", "devcell.store.daemon_status", "devcell.store.forwards",
        "devcell.store.observations", "devcell.store.views"],
        []),
    "get cells NAME -o yaml": ([
        *_CLI, "devcell.api", "devcell.api.listing", "devcell.cli.cmd_get",
        "devcell.api.render",
        "devcell.manifests",
        "devcell.manifests.secrets", "devcell.storage_causes", "devcell.store",
        "devcell.store.db", "devcell.store.faults", "devcell.store.guard",
        "devcell.store.migrations", "devcell.store.observations", "devcell.store.state_dir",
        "devcell.store.views"],
        ["yaml"]),
    "get cells NAME -o json": ([
        *_CLI, "devcell.api", "devcell.api.listing", "devcell.cli.cmd_get",
        "devcell.api.render",
        "devcell.manifests",
        "devcell.manifests.secrets", "devcell.storage_causes", "devcell.store",
        "devcell.store.db", "devcell.store.faults", "devcell.store.guard",
        "devcell.store.migrations", "devcell.store.observations", "devcell.store.state_dir",
        "devcell.store.views"],
        []),
    "apply (no-op)": ([
        *_CLI, *_STORE, "devcell.admission", "devcell.api", "devcell.api.apply",
        "devcell.api.converging", "devcell.api.reports", "devcell.backend_registry",
        "devcell.backends", "devcell.backends.base", "devcell.backends.fake",
        "devcell.cli.cmd_apply", "devcell.cli.converge_output", "devcell.controllers",
        "devcell.controllers.retention", "devcell.failpoints", "devcell.ids",
        "devcell.manifests.canonical", "devcell.manifests.loader", "devcell.manifests.model",
        "devcell.manifests.quantities", "devcell.manifests.secrets", "devcell.reconciler",
        "devcell.reconciler.lease", "devcell.reconciler.observe",
        "devcell.safeio", "devcell.store.built_cells", "devcell.store.desired", "devcell.store.events",
        "devcell.store.hashkey", "devcell.store.holds", "devcell.store.objects",
        "devcell.store.observations", "devcell.store.operations", "devcell.store.preconditions",
        "devcell.store.prunes", "devcell.store.retention", "devcell.store.sources"],
        []),
    "exec": ([
        *_CLI, "devcell.api", "devcell.api.attach", "devcell.api.exec_fast",
        "devcell.backend_registry", "devcell.backends", "devcell.backends.base",
        "devcell.backends.container", "devcell.backends.container.engine",
        "devcell.backends.container.engine_http", "devcell.backends.container.engine_json",
        "devcell.backends.container.exec_socket",
        "devcell.backends.container.labels", "devcell.backends.fake",
        "devcell.backends.interactive", "devcell.backends.log_source", "devcell.cli.cell_open",
        "devcell.cli.cmd_exec", "devcell.cli.exec_fast", "devcell.cli.log_sink", "devcell.ids", "devcell.log",
        "devcell.reconciler", "devcell.reconciler.observe", "devcell.safeio",
        "devcell.storage_causes", "devcell.store", "devcell.store.activity_sessions",
        "devcell.store.cell_glance",
        "devcell.store.clock", "devcell.store.db", "devcell.store.events",
        "devcell.store.faults", "devcell.store.guard", "devcell.store.migrations",
        "devcell.store.objects", "devcell.store.observations", "devcell.store.state_dir",
        "devcell.store.volumes"],
        []),
    "logs": ([
        *_CLI, "devcell.api", "devcell.api.attach", "devcell.api.logs",
        "devcell.backend_registry",  # api.logs: the reading and escaping the API's logs share
        "devcell.backends", "devcell.backends.base", "devcell.backends.fake",
        "devcell.backends.interactive", "devcell.backends.log_source", "devcell.cli.cell_open",
        "devcell.cli.cmd_logs", "devcell.api.log_lines", "devcell.cli.log_sink", "devcell.ids",
        "devcell.log", "devcell.reconciler", "devcell.reconciler.observe",
        "devcell.safeio", "devcell.storage_causes", "devcell.store", "devcell.store.clock",
        "devcell.store.db",
        "devcell.store.events", "devcell.store.faults", "devcell.store.guard",
        "devcell.store.migrations", "devcell.store.objects", "devcell.store.observations",
        "devcell.store.state_dir", "devcell.store.volumes"],
        []),
    "snapshot create": ([
        *_CLI, *_STORE, "devcell.admission", "devcell.api", "devcell.api.cells",
        "devcell.api.converging", "devcell.api.reports", "devcell.backend_registry",
        "devcell.backends", "devcell.backends.base", "devcell.backends.fake",
        "devcell.backends.host",
        "devcell.backends.host.filecopy", "devcell.backends.host.live_folder",
        "devcell.backends.host.temporaries",
        "devcell.backends.host.treecopy", "devcell.backends.host.treewalk",
        "devcell.backends.limits", "devcell.cli.cmd_cells", "devcell.cli.converge_output",
        "devcell.cli.log_sink", "devcell.controllers", "devcell.controllers.context",
        "devcell.controllers.plan", "devcell.controllers.retention",
        "devcell.controllers.snapshot", "devcell.controllers.steps", "devcell.failpoints",
        "devcell.ids", "devcell.log", "devcell.manifests.canonical", "devcell.manifests.model",
        "devcell.manifests.quantities", "devcell.manifests.secrets", "devcell.progress",
        "devcell.reconciler", "devcell.reconciler.converge", "devcell.reconciler.executor",
        "devcell.reconciler.lease", "devcell.reconciler.observe",
        "devcell.reconciler.reconcile", "devcell.reconciler.reconcile_lock",
        "devcell.reconciler.recovery",
        "devcell.reconciler.suspended", "devcell.security",
        "devcell.store.actor",  # who made the change, on its events and operation (issue 27)
        "devcell.store.desired",
        "devcell.store.events", "devcell.store.frozen", "devcell.store.hashkey",
        "devcell.store.holds", "devcell.store.objects", "devcell.store.observations",
        "devcell.store.operations", "devcell.store.preconditions", "devcell.store.prunes",
        "devcell.store.restores", "devcell.store.retention", "devcell.store.sources",
        "devcell.store.storage_lock", "devcell.store.volumes"],
        []),
}


WITHOUT_TYPING = ("get cells NAME", "get cells", "get cells NAME -o yaml",
                  "get cells NAME -o json")
"""Commands none of whose modules imports `typing` at run time: annotations only, under a
`TYPE_CHECKING` guard (the others' paths hold Protocols and NamedTuples that need it)."""


def _command_lines() -> dict[str, list[str]]:
    return {
        "get cells NAME": ["get", "cells", "web"],
        "get cells": ["get", "cells"],
        "get cells -o wide": ["get", "cells", "-o", "wide"],
        "get cells NAME -o yaml": ["get", "cells", "web", "-o", "yaml"],
        "get cells NAME -o json": ["get", "cells", "web", "-o", "json"],
        "apply (no-op)": ["apply", "-f", "{manifest}"],
        "exec": ["exec", "web", "--", "true"],
        "logs": ["logs", "web"],
        "snapshot create": ["snapshot", "create", "web", "--name", "s1"],
    }


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(state directory, manifest) of one converged fake cell."""
    root = tmp_path_factory.mktemp("import-sets")
    manifest = root / "web.yaml"
    manifest.write_text(CELL)
    state = root / "state"
    done = subprocess.run([sys.executable, "-m", "devcell", "apply", "-f", str(manifest)],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=dict(os.environ, DEVCELL_HOME=str(state)))
    assert done.returncode == 0, done.stderr
    return state, manifest


def imported(argv: list[str], state: Path, out: Path
             ) -> tuple[list[str], list[str], str, bool]:
    """(DevCell modules, third-party packages, stdout, whether `typing` was imported) of one
    command in a fresh process."""
    env = dict(os.environ, DEVCELL_HOME=str(state), IMPORT_SETS_OUT=str(out))
    env.pop("DEVCELL_FAKE_FAIL", None)
    proc = subprocess.run([sys.executable, "-c", LISTING, *argv], capture_output=True,
                          text=True, cwd=REPO, timeout=120, env=env)
    found = eval(out.read_text())  # noqa: S307 - written by LISTING above, a dict literal
    return found["devcell"], found["third_party"], proc.stdout + proc.stderr, found["typing"]


HOW_TO_LIST = ("`PYTHONPATH=. .venv/bin/python tests/test_import_sets.py` prints every "
               "command's list as it is now.")


def _difference(what: str, kind: str, found: list[str], expected: list[str]) -> str:
    added = sorted(set(found) - set(expected))
    gone = sorted(set(expected) - set(found))
    lines = []
    if added:
        lines.append(f"`devcell {what}` now imports {kind} not in its list: "
                     + ", ".join(added) + ". Import them only where they are used; if the "
                     "command does need them, add them to EXPECTED[" + repr(what) + "] in "
                     "tests/test_import_sets.py (a reviewed change; the bench/ figures "
                     "should say what it costs). " + HOW_TO_LIST)
    if gone:
        lines.append(f"`devcell {what}` no longer imports {kind}: " + ", ".join(gone)
                     + ". Remove them from EXPECTED[" + repr(what) + "] in "
                     "tests/test_import_sets.py, so that the list stays exact. " + HOW_TO_LIST)
    return "\n".join(lines)


@pytest.mark.parametrize("what", list(_command_lines()))
def test_a_command_imports_what_its_list_says(what: str, applied: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    state, manifest = applied
    argv = [a.replace("{manifest}", str(manifest)) for a in _command_lines()[what]]
    ours, theirs, output, typing_imported = imported(argv, state, tmp_path / "modules")
    if what == "apply (no-op)":
        assert output == "cell/web unchanged\n"
    if what == "snapshot create":  # the next run of this module takes it again
        subprocess.run([sys.executable, "-m", "devcell", "delete", "snapshot", "s1"],
                       capture_output=True, cwd=REPO, timeout=120, check=True,
                       env=dict(os.environ, DEVCELL_HOME=str(state)))
    expected_ours, expected_theirs = EXPECTED[what]
    problems = [p for p in (_difference(what, "DevCell modules", ours, expected_ours),
                            _difference(what, "third-party packages", theirs,
                                        expected_theirs)) if p]
    assert not problems, "\n".join(problems)
    if what in WITHOUT_TYPING:
        assert not typing_imported, (
            f"`devcell {what}` imports the standard library's typing (~2 ms of its start-up; "
            "issue 26's `get cells NAME` figure): a module on its path imports it at run time. "
            "Import it under `TYPE_CHECKING = False` / `if TYPE_CHECKING:` as the others do")


if __name__ == "__main__":  # print today's lists (to review before pasting them above)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "web.yaml").write_text(CELL)
        subprocess.run([sys.executable, "-m", "devcell", "apply", "-f", str(work / "web.yaml")],
                       check=True, capture_output=True, cwd=REPO,
                       env=dict(os.environ, DEVCELL_HOME=str(work / "state")))
        for name, words in _command_lines().items():
            argv = [a.replace("{manifest}", str(work / "web.yaml")) for a in words]
            ours, theirs, _, _ = imported(argv, work / "state", work / "modules")
            if name == "snapshot create":
                subprocess.run([sys.executable, "-m", "devcell", "delete", "snapshot", "s1"],
                               capture_output=True, cwd=REPO, check=True,
                               env=dict(os.environ, DEVCELL_HOME=str(work / "state")))
            print(json.dumps({name: [ours, theirs]}))
