"""devcell.api.ops: resume and cancel a suspended operation (an approval gate), inline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import ops
from devcell.api.reports import Status
from devcell.errors import ManifestError, NotFound, UsageError
from devcell.store import objects
from devcell.store.db import open_database
from tests.api.conftest import Seen, dirty_workspaces, suspended
from tests.controllers.support import cell_doc


@pytest.fixture
def gated(state: Path, write: Any) -> str:
    """A delete of cell api waiting for approval; its operation id."""
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    dirty_workspaces(state)
    report = api.delete(state, "Cell", "api")
    [waiting] = report.converged.problems
    assert waiting.status is Status.WAITING and "awaiting approval" in waiting.message
    return str(suspended(state)["id"])


def live(state: Path, name: str) -> bool:
    db = open_database(state)
    try:
        return objects.get(db.conn, "Cell", name) is not None
    finally:
        db.close()


def test_resume_with_the_right_answer_deletes(state: Path, gated: str, seen: Seen) -> None:
    with pytest.raises(ManifestError, match="stays suspended"):
        ops.resume(state, gated, inputs=["confirm=apj"])
    report = ops.resume(state, gated, inputs=["confirm=api"], hooks=seen.hooks())
    assert report.recorded.operation == gated
    assert seen.names == ["recorded", "inline"]
    assert [(o.name, o.status) for o in report.converged.objects] == [("api", Status.SETTLED)]
    assert not live(state, "api")


def test_cancel_keeps_the_cell(state: Path, gated: str) -> None:
    report = ops.cancel(state, gated)
    assert report.recorded.operation == gated and report.ok
    assert live(state, "api")
    with pytest.raises(UsageError, match="not suspended"):
        ops.cancel(state, gated)


def test_an_unknown_operation(state: Path, gated: str) -> None:
    with pytest.raises(NotFound):
        ops.resume(state, "op_nope")


def test_inputs_from_pairs_and_files(tmp_path: Path) -> None:
    given = tmp_path / "input.yaml"
    given.write_text("confirm: db\nreason: tidy\n")
    assert ops.parse_inputs(["confirm=api"], [str(given)]) == {"confirm": "api", "reason": "tidy"}
    with pytest.raises(UsageError, match="use key=value"):
        ops.parse_inputs(["confirm"], [])
    given.write_text("- a list\n")
    with pytest.raises(ManifestError, match="must be one mapping"):
        ops.parse_inputs([], [str(given)])


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bomb.yaml", "a: &a [x, x]\nb: [*a, *a]\n", "anchors are not allowed"),
    ("twice.yaml", "confirm: a\nconfirm: b\n", 'duplicate key "confirm"'),
    ("comma.json", '{"confirm": "api",}', "trailing comma is not allowed"),
    ("two.yaml", "confirm: a\n---\nconfirm: b\n", "must be one mapping"),
])
def test_input_files_are_read_as_manifests_are(tmp_path: Path, name: str, text: str,
                                               message: str) -> None:
    """Bounded, strict JSON for .json, no aliases, no duplicate keys, located problems."""
    given = tmp_path / name
    given.write_text(text)
    with pytest.raises(ManifestError, match=message) as refused:
        ops.parse_inputs([], [str(given)])
    assert all(p.file == str(given) and p.line for p in refused.value.problems)
    ok = tmp_path / "ok.json"
    ok.write_text('{"confirm": "api", "n": 1e3}')
    assert ops.parse_inputs([], [str(ok)]) == {"confirm": "api", "n": 1000.0}
