"""devcell.api.apply: apply and delete as library calls, converged inline (fake backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api.converging import Options
from devcell.api.reports import Status
from devcell.errors import Conflict, ManifestError, NotFound
from devcell.store import objects
from devcell.store.db import open_database
from tests.api.conftest import Seen
from tests.controllers.support import cell_doc, snapshot_doc


def outcomes(report: Any) -> list[tuple[str, str, str]]:
    return [(c.kind, c.name, c.outcome) for c in report.recorded.changes]


def test_apply_records_then_converges_inline(state: Path, write: Any, seen: Seen) -> None:
    path = write("api.yaml", cell_doc("api"), snapshot_doc("snap", "api"))
    report = api.apply(state, [path], hooks=seen.hooks())
    assert outcomes(report) == [("Cell", "api", "created"), ("Snapshot", "snap", "created")]
    # the changes reach the caller before converging starts (the CLI prints them first)
    assert seen.names == ["recorded", "inline"]
    assert seen.events[0][1] == report.recorded
    converged = report.converged
    assert report.ok and converged.waited and converged.holder is None
    assert [(o.kind, o.name, o.status) for o in converged.objects] == [
        ("Cell", "api", Status.SETTLED), ("Snapshot", "snap", Status.SETTLED)]
    assert not converged.problems


def test_an_unchanged_reapply_converges_nothing(state: Path, write: Any, seen: Seen) -> None:
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    report = api.apply(state, [path], hooks=seen.hooks())
    assert outcomes(report) == [("Cell", "api", "unchanged")]
    assert seen.names == ["recorded"]  # no inline converge: no log sinks, no progress bars
    assert report.ok and not report.converged.waited and report.converged.objects == ()


def test_a_first_dry_run_creates_nothing(state: Path, write: Any, seen: Seen) -> None:
    report = api.apply(state, [write("api.yaml", cell_doc("api"))], dry_run=True,
                       hooks=seen.hooks())
    assert outcomes(report) == [("Cell", "api", "created")]
    assert seen.names == ["recorded"] and report.ok
    assert not state.exists()


def test_a_dry_run_over_recorded_state_writes_nothing(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    report = api.apply(state, [write("api.yaml", cell_doc("api", "Stopped"))], dry_run=True)
    assert outcomes(report) == [("Cell", "api", "configured")]
    db = open_database(state)
    assert db.conn.execute("SELECT generation FROM cells").fetchone()[0] == 1
    db.close()


def test_bad_input_raises_and_leaves_no_state(state: Path, write: Any) -> None:
    path = write("bad.yaml", snapshot_doc("snap", "nowhere"))
    with pytest.raises(ManifestError, match='cell "nowhere" not found'):
        api.apply(state, [path])
    assert not state.exists()


def test_a_failed_object_is_reported_with_its_message(
        state: Path, write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@broken")
    report = api.apply(state, [write("two.yaml", cell_doc("fine"), cell_doc("broken"))],
                       options=Options(timeout=30))
    assert not report.ok
    assert [(o.name, o.status) for o in report.converged.objects] == [
        ("fine", Status.SETTLED), ("broken", Status.FAILED)]
    [problem] = report.converged.problems
    assert "injected failure in step start" in problem.message


def test_prune_deletes_what_left_the_files(state: Path, write: Any) -> None:
    path = write("both.yaml", cell_doc("api"), cell_doc("db"))
    assert api.apply(state, [path], prune=True).ok
    path = write("both.yaml", cell_doc("api"))
    report = api.apply(state, [path], prune=True)
    assert outcomes(report) == [("Cell", "api", "unchanged"), ("Cell", "db", "pruned")]
    assert report.ok


def test_delete_converges_until_the_object_is_gone(state: Path, write: Any, seen: Seen) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    report = api.delete(state, "Cell", "api", hooks=seen.hooks())
    assert outcomes(report) == [("Cell", "api", "deleted")]
    assert seen.names == ["recorded", "inline"] and report.ok
    db = open_database(state)
    assert db.conn.execute("SELECT deleted_at IS NOT NULL FROM cells").fetchone()[0] == 1
    db.close()
    with pytest.raises(NotFound):
        api.delete(state, "Cell", "api")


def test_delete_files_skips_objects_not_recorded(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    report = api.delete_files(state, [write("more.yaml", cell_doc("api"), cell_doc("db"))])
    assert report.recorded.missing == (("Cell", "db"),)
    assert outcomes(report) == [("Cell", "api", "deleted")] and report.ok


def test_a_snapshot_a_live_fork_names_cannot_be_deleted(state: Path, write: Any) -> None:
    path = write("all.yaml", cell_doc("api"), snapshot_doc("snap", "api"),
                 cell_doc("exp", fork_of="snap"))
    assert api.apply(state, [path]).ok
    with pytest.raises(Conflict, match="exp"):
        api.delete(state, "Snapshot", "snap")


def test_a_refused_delete_changes_nothing(state: Path, write: Any) -> None:
    """The cell named first is not left marked deleting when the snapshot after it is refused."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("snap", "api"),
                 cell_doc("exp", fork_of="snap"))
    assert api.apply(state, [path]).ok
    with pytest.raises(Conflict, match="exp"):
        api.delete_files(state, [write("two.yaml", cell_doc("api"), snapshot_doc("snap", "api"))])
    db = open_database(state)
    try:
        assert [r.name for r in objects.list_live(db.conn, "Cell") if r.deleting] == []
        assert not objects.require(db.conn, "Snapshot", "snap").deleting
    finally:
        db.close()
    assert api.apply(state, [path]).ok  # nothing is stuck "being deleted"


def test_a_fork_and_its_snapshot_are_deleted_in_one_request(state: Path, write: Any) -> None:
    """Forks go first; the snapshot waits for them, then its checkpoint goes."""
    path = write("all.yaml", cell_doc("api"), snapshot_doc("snap", "api"),
                 cell_doc("exp", fork_of="snap"))
    assert api.apply(state, [path]).ok
    report = api.delete_files(state, [path])
    assert report.ok, report.converged
    db = open_database(state)
    try:
        assert objects.list_live(db.conn, "Cell") == []
        assert objects.list_live(db.conn, "Snapshot") == []
    finally:
        db.close()


def test_files_with_no_objects_at_all_are_refused_and_create_nothing(
        state: Path, tmp_path: Path) -> None:
    empty = tmp_path / "comments.yaml"
    empty.write_text("# nothing here yet\n---\n")
    with pytest.raises(ManifestError, match="no objects passed to apply"):
        api.apply(state, [str(empty)])
    assert not (state / "state.db").exists()


def test_a_comment_only_file_beside_objects_is_fine(state: Path, write: Any,
                                                     tmp_path: Path) -> None:
    path = write("api.yaml", cell_doc("api"))
    (Path(path).parent / "notes.yaml").write_text("# notes for humans\n")
    assert api.apply(state, [str(Path(path).parent)]).ok


def _refusals_over_recorded_state() -> dict[str, tuple[list[dict[str, Any]], str]]:
    """Changes only recorded state can refuse (the first-apply pre-validation, over an empty
    state, cannot see them): documents to apply and the refusal expected."""
    moved = cell_doc("api")
    moved["spec"].update(backend="container", image="devcell/busybox:latest")
    return {
        "immutable backend": ([moved], "immutable"),
        "fork source changed": ([cell_doc("api", fork_of="snap")], "immutable"),
        "snapshot of another cell": ([snapshot_doc("snap", "other")], "immutable"),
        "object being deleted": ([cell_doc("gone", labels={"v": "2"})], "being deleted"),
    }


@pytest.mark.parametrize("case", list(_refusals_over_recorded_state()))
def test_all_or_nothing_on_top_of_recorded_state(state: Path, write: Any, case: str,
                                                 fingerprint: Any) -> None:
    """A valid new object, a valid change to a recorded one and one change that recorded state
    refuses, in one apply: nothing is recorded (and nothing reconciled)."""
    assert api.apply(state, [write("base.yaml", cell_doc("api"), cell_doc("other"),
                                   cell_doc("gone"), snapshot_doc("snap", "api"))]).ok
    db = open_database(state)
    try:
        from devcell.store import desired

        desired.delete(db, "Cell", "gone")  # requested, not reconciled: still being deleted
    finally:
        db.close()
    before = fingerprint(state)
    docs, refusal = _refusals_over_recorded_state()[case]
    path = write("change.yaml", cell_doc("brand-new"), cell_doc("other", labels={"v": "2"}),
                 *docs)
    with pytest.raises(ManifestError, match=refusal):
        api.apply(state, [path])
    assert fingerprint(state) == before
    db = open_database(state)
    try:
        assert objects.get(db.conn, "Cell", "brand-new") is None
        assert objects.require(db.conn, "Cell", "other").labels == {}
    finally:
        db.close()


def _change_by_other_means(state: Path, write: Any, how: str) -> str:
    """Change the recorded `api` without touching its file; the outcome a re-apply of the
    file's same bytes must then report."""
    if how == "applied from another file":
        assert api.apply(state, [write("elsewhere.yaml", cell_doc("api"))]).ok
        return "configured"
    if how == "labels from stdin-like apply":
        assert api.apply(state, [write("labels.yaml", cell_doc("api", labels={"x": "y"}))]).ok
        return "configured"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["applied from another file", "labels from stdin-like apply"])
def test_the_same_bytes_again_after_a_change_by_other_means_are_not_unchanged(
        state: Path, write: Any, how: str) -> None:
    """The no-op fast path answers `unchanged` from the file's digest only while every object
    it recorded is still as that file left it."""
    path = write("api.yaml", cell_doc("api"))
    assert outcomes(api.apply(state, [path])) == [("Cell", "api", "created")]
    assert outcomes(api.apply(state, [path])) == [("Cell", "api", "unchanged")]
    expected = _change_by_other_means(state, write, how)
    again = api.apply(state, [path])
    assert outcomes(again) == [("Cell", "api", expected)]
    assert again.ok
    db = open_database(state)
    try:
        record = objects.require(db.conn, "Cell", "api")
        assert (record.spec["state"], record.labels, record.source) == ("Running", {}, path)
        assert record.phase == "Running"
    finally:
        db.close()


def test_a_reapply_of_an_object_being_deleted_is_refused_not_unchanged(
        state: Path, write: Any) -> None:
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    db = open_database(state)
    try:
        from devcell.store import desired

        desired.delete(db, "Cell", "api")
    finally:
        db.close()
    with pytest.raises(ManifestError, match="being deleted"):
        api.apply(state, [path])
