"""A cell built from a Dockerfile takes the no-op path of a re-apply like any other: its
unchanged manifest is not parsed again and it is not reconciled; whether its build's inputs
changed is judged after recording (api.converging.judge_builds), not by reconciling every
built cell on every apply (issue 31 item 6: the reconcile it got was reported `unchanged`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devcell import admission
from devcell.manifests import loader
from devcell.store import objects
from devcell.store.db import open_database

BUILT = """\
apiVersion: devcell.dev/v1alpha1
kind: Cell
metadata: {name: built}
spec:
  backend: container
  build: {context: app}
"""


def test_a_converged_built_cell_is_answered_by_the_no_op_path(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "Dockerfile").write_text("FROM scratch\n")
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(BUILT)
    db = open_database(tmp_path / "state")
    try:
        (first,) = admission.apply(db, loader.read_sources([str(manifest)])).changes
        assert (first.outcome, first.needs_reconcile) == ("created", True)
        with db.write() as conn:  # as its reconcile leaves it: Running, this generation
            cell = objects.require(conn, "Cell", "built")
            objects.write_status(conn, cell, phase="Running", status={},
                                 observed_generation=cell.generation)
        parsed: dict[str, Any] = {}
        (again,) = admission.apply(db, loader.read_sources([str(manifest)]),
                                   parse_cache=parsed).changes
        assert (again.outcome, again.needs_reconcile) == ("unchanged", False)
        assert parsed == {}  # answered from applied_sources: not parsed again
    finally:
        db.close()
