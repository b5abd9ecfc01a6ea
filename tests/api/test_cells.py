"""devcell.api.cells: snapshot, fork, sleep and start as library calls (fake backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import cells
from devcell.api.reports import Status
from devcell.errors import ManifestError, NotFound
from devcell.store import desired, objects
from devcell.store.db import open_database
from tests.api.conftest import Seen
from tests.controllers.support import cell_doc


@pytest.fixture
def api_cell(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok


def phase(state: Path, kind: str, name: str) -> str:
    db = open_database(state)
    try:
        return objects.require(db.conn, kind, name).phase
    finally:
        db.close()


@pytest.mark.usefixtures("api_cell")
def test_snapshot_then_fork(state: Path, seen: Seen) -> None:
    report = cells.snapshot(state, "api", name="snap", hooks=seen.hooks())
    assert [(c.kind, c.name, c.outcome) for c in report.recorded.changes] == [
        ("Snapshot", "snap", "created")]
    assert seen.names == ["recorded", "inline"] and report.ok
    assert phase(state, "Snapshot", "snap") == "Ready"
    forked = cells.fork(state, "api", snapshot="snap", name="exp")
    assert [(o.kind, o.name, o.status) for o in forked.converged.objects] == [
        ("Cell", "exp", Status.SETTLED)]
    assert phase(state, "Cell", "exp") == "Running"


@pytest.mark.usefixtures("api_cell")
def test_fork_refuses_a_snapshot_of_another_cell(state: Path, write: Any) -> None:
    assert api.apply(state, [write("db.yaml", cell_doc("db"))]).ok
    assert cells.snapshot(state, "db", name="dbsnap").ok
    with pytest.raises(ManifestError, match='was taken of cell "db", not of "api"'):
        cells.fork(state, "api", snapshot="dbsnap", name="exp")
    with pytest.raises(NotFound, match='snapshot "nope" not found'):
        cells.fork(state, "api", snapshot="nope", name="exp")


@pytest.mark.usefixtures("api_cell")
def test_a_fork_refusal_says_the_snapshots_cell_was_deleted(state: Path, write: Any) -> None:
    """A cell made again under a deleted cell's name is not its snapshots' cell (refused by
    id), and the refusal says so: not "taken of cell "db", not of "db"" (attack46 F3)."""
    assert api.apply(state, [write("db.yaml", cell_doc("db"))]).ok
    assert cells.snapshot(state, "db", name="dbsnap").ok
    assert api.delete(state, "Cell", "db").ok
    assert api.apply(state, [write("db2.yaml", cell_doc("db"))]).ok
    with pytest.raises(ManifestError, match='was taken of cell "db" [(]deleted[)], not of "db"'):
        cells.fork(state, "db", snapshot="dbsnap", name="exp")


@pytest.mark.usefixtures("api_cell")
def test_an_exclusive_fork_never_lands_on_a_recorded_cell(state: Path, write: Any) -> None:
    """The HTTP API's forks are exclusive: re-applying the parent's spec over a cell of the
    same name would change a cell its caller may not be allowed to change."""
    assert api.apply(state, [write("db.yaml", cell_doc("db"))]).ok
    assert cells.snapshot(state, "api", name="snap").ok
    with pytest.raises(ManifestError, match="cell db already exists"):
        cells.fork(state, "api", snapshot="snap", name="db", exclusive=True)
    assert cells.fork(state, "api", snapshot="snap", name="exp", exclusive=True).ok


def test_a_bad_name_is_refused_before_any_state_is_made(state: Path) -> None:
    with pytest.raises(ManifestError, match="--name"):
        cells.snapshot(state, "api", name="Not A Name")
    assert not state.exists()


@pytest.mark.usefixtures("api_cell")
def test_sleep_and_start(state: Path) -> None:
    report = cells.sleep(state, "api")
    assert [c.outcome for c in report.recorded.changes] == ["configured"] and report.ok
    assert phase(state, "Cell", "api") == "Sleeping"
    again = cells.sleep(state, "api")
    assert [c.outcome for c in again.recorded.changes] == ["unchanged"]
    assert not again.converged.waited
    assert cells.start(state, "api").ok
    assert phase(state, "Cell", "api") == "Running"


@pytest.mark.usefixtures("api_cell")
def test_a_cell_being_deleted_keeps_its_state(state: Path) -> None:
    db = open_database(state)
    desired.delete(db, "Cell", "api")  # asked for, not converged yet
    db.close()
    with pytest.raises(ManifestError, match="is being deleted"):
        cells.sleep(state, "api")


def _operations(state: Path) -> list[tuple[str, str, str]]:
    db = open_database(state)
    try:
        return [tuple(r) for r in db.conn.execute(
            "SELECT object_name, action, status FROM operations WHERE object_kind = 'Cell' "
            "ORDER BY object_name, rowid")]
    finally:
        db.close()


def held(state: Path, name: str) -> dict[str, Any] | None:
    db = open_database(state)
    try:
        from devcell.store import holds

        found = holds.of(objects.require(db.conn, "Cell", name))
        return None if found is None else found.document()
    finally:
        db.close()


@pytest.mark.usefixtures("api_cell")
def test_fork_count_makes_n_cells_each_its_own_operation(state: Path) -> None:
    assert cells.snapshot(state, "api", name="snap").ok
    report = cells.fork(state, "api", snapshot="snap", name="exp", count=3)
    assert report.ok
    assert [(c.name, c.outcome) for c in report.recorded.changes] == [
        ("exp-1", "created"), ("exp-2", "created"), ("exp-3", "created")]
    assert sorted(o.name for o in report.converged.objects) == ["exp-1", "exp-2", "exp-3"]
    for name in ("exp-1", "exp-2", "exp-3"):
        assert phase(state, "Cell", name) == "Running"
    forks = [(name, action) for name, action, _ in _operations(state) if name != "api"]
    assert forks == [("exp-1", "fork"), ("exp-2", "fork"), ("exp-3", "fork")]


@pytest.mark.usefixtures("api_cell")
def test_fork_count_a_failed_fork_leaves_the_others_and_is_named(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cells.snapshot(state, "api", name="snap").ok
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@exp-2:perm")
    report = cells.fork(state, "api", snapshot="snap", name="exp", count=3)
    assert not report.ok
    [problem] = report.converged.problems
    assert (problem.name, problem.status) == ("exp-2", Status.FAILED)
    assert "injected failure in step start" in problem.message
    assert phase(state, "Cell", "exp-1") == "Running"
    assert phase(state, "Cell", "exp-3") == "Running"
    assert phase(state, "Cell", "exp-2") == "Failed"


@pytest.mark.usefixtures("api_cell")
def test_fork_count_checks_every_name_before_making_any(state: Path) -> None:
    assert cells.snapshot(state, "api", name="snap").ok
    assert cells.fork(state, "api", snapshot="snap", name="exp-2").ok  # takes exp-2
    with pytest.raises(ManifestError, match="cell exp-2 already exists") as raised:
        cells.fork(state, "api", snapshot="snap", name="exp", count=3)
    assert raised.value.problems[0].field == "--name"
    long = "x" * 61
    with pytest.raises(ManifestError, match="at most 63 characters"):
        cells.fork(state, "api", snapshot="snap", name=long, count=10)  # x...-10: 64 characters
    db = open_database(state)
    try:
        made = sorted(r.name for r in objects.list_live(db.conn, "Cell"))
    finally:
        db.close()
    assert made == ["api", "exp-2"]


def test_fork_count_publishes_host_port_plus_k(state: Path, write: Any) -> None:
    network = {"mode": "bridge", "ports": [{"containerPort": 8080, "hostPort": 18080}]}
    assert api.apply(state, [write("api.yaml", cell_doc("api", network=network))]).ok
    assert cells.snapshot(state, "api", name="snap").ok
    with pytest.raises(ManifestError, match='already published by cell "api"'):
        cells.fork(state, "api", snapshot="snap", name="exp", count=2)
    with pytest.raises(ManifestError, match="above 65535"):
        cells.fork(state, "api", snapshot="snap", name="exp", count=3,
                   host_ports={8080: 65534})
    assert cells.fork(state, "api", snapshot="snap", name="exp", count=2,
                      host_ports={8080: 19000}).ok
    db = open_database(state)
    try:
        ports = {n: objects.require(db.conn, "Cell", n).spec["network"]["ports"][0]["hostPort"]
                 for n in ("exp-1", "exp-2")}
    finally:
        db.close()
    assert ports == {"exp-1": 19000, "exp-2": 19001}


def test_a_fork_remaps_or_drops_its_sidecars_ports_as_the_cells_own(
        state: Path, write: Any) -> None:
    """The fake backend records sidecars and volumes (it runs none): a fork's spec carries
    them, its sidecars' ports moved by --port or dropped by --no-ports like the cell's."""
    network = {"mode": "bridge", "ports": [{"containerPort": 80, "hostPort": 18080}]}
    sidecars = [{"name": "db", "image": "postgres:16", "volume": {"mountPath": "/data"},
                 "ports": [{"containerPort": 5432, "hostPort": 15432}]}]
    doc = cell_doc("api", network=network, sidecars=sidecars,
                   volumes=[{"name": "cache", "mountPath": "/root/.cache"}])
    assert api.apply(state, [write("api.yaml", doc)]).ok
    assert cells.snapshot(state, "api", name="snap").ok
    with pytest.raises(ManifestError, match='already published by cell "api"') as clash:
        cells.fork(state, "api", snapshot="snap", name="exp", host_ports={80: 19080})
    assert clash.value.problems[0].field == "spec.sidecars[0].ports[0].hostPort"
    assert cells.fork(state, "api", snapshot="snap", name="exp",
                      host_ports={80: 19080, 5432: 19432}).ok
    assert cells.fork(state, "api", snapshot="snap", name="quiet", publish=False).ok
    db = open_database(state)
    try:
        exp = objects.require(db.conn, "Cell", "exp").spec
        quiet = objects.require(db.conn, "Cell", "quiet").spec
    finally:
        db.close()
    assert exp["sidecars"][0]["ports"][0]["hostPort"] == 19432
    assert exp["volumes"] == [{"name": "cache", "mountPath": "/root/.cache"}]
    assert quiet["sidecars"][0]["ports"] == [] and quiet["network"]["ports"] == []
def test_a_reapply_of_the_unchanged_manifest_leaves_a_slept_cell_asleep(
        state: Path, write: Any) -> None:
    """`cell sleep` is a runtime decision beside the spec: the manifest applied again, by
    hand, is unchanged and the cell sleeps on (it was woken before issue 30)."""
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    assert cells.sleep(state, "api").ok
    again = api.apply(state, [path])
    assert [(c.name, c.outcome) for c in again.recorded.changes] == [("api", "unchanged")]
    assert phase(state, "Cell", "api") == "Sleeping"
    hold = held(state, "api")
    assert hold is not None and (hold["state"], hold["by"]) == ("Sleeping", "cell sleep")
    db = open_database(state)
    try:
        assert objects.require(db.conn, "Cell", "api").spec["state"] == "Running"  # as applied
    finally:
        db.close()


@pytest.mark.parametrize("declared", ["Stopped", "Sleeping"])
def test_a_change_of_the_manifests_state_wins_over_a_sleep(
        state: Path, write: Any, declared: str) -> None:
    path = write("api.yaml", cell_doc("api"))
    assert api.apply(state, [path]).ok
    assert cells.sleep(state, "api").ok
    changed = api.apply(state, [write("api.yaml", cell_doc("api", declared))])
    assert [c.outcome for c in changed.recorded.changes] == ["configured"] and changed.ok
    assert held(state, "api") is None and phase(state, "Cell", "api") == declared
    db = open_database(state)
    try:
        said = [e["message"] for e in events_of(db, "api") if e["reason"] == "HoldEnded"]
        assert said and "wins over the state held Sleeping by `cell sleep`" in said[0]
    finally:
        db.close()
    # ... and back to Running: the manifest is followed (nothing holds it asleep any more)
    assert api.apply(state, [write("api.yaml", cell_doc("api"))]).ok
    assert phase(state, "Cell", "api") == "Running"


def test_a_manifest_that_declares_sleeping_is_a_declared_sleep_not_a_hold(
        state: Path, write: Any) -> None:
    path = write("api.yaml", cell_doc("api", "Sleeping"))
    assert api.apply(state, [path]).ok and phase(state, "Cell", "api") == "Sleeping"
    assert held(state, "api") is None
    assert cells.start(state, "api").ok  # held awake against the manifest, until it changes
    assert phase(state, "Cell", "api") == "Running"
    assert (held(state, "api") or {}).get("by") == "cell start"
    assert [c.outcome for c in api.apply(state, [path]).recorded.changes] == ["unchanged"]
    assert phase(state, "Cell", "api") == "Running"
    assert cells.sleep(state, "api").ok  # what the manifest says: the hold ends
    assert held(state, "api") is None and phase(state, "Cell", "api") == "Sleeping"


@pytest.mark.usefixtures("api_cell")
def test_an_idle_sleep_is_the_same_call_with_who_and_why(state: Path) -> None:
    """The API the idle sleep calls: held like `cell sleep`, saying who and why."""
    assert cells.sleep(state, "api", by="idle", reason="idle for 30m (last: ssh session "
                                                       "closed 10:02)").ok
    hold = held(state, "api")
    assert hold is not None and hold["by"] == "idle" and "idle for 30m" in hold["reason"]
    assert phase(state, "Cell", "api") == "Sleeping"


def events_of(db: Any, name: str) -> list[Any]:
    from devcell.store import events

    cell = objects.require(db.conn, "Cell", name)
    return list(events.for_object(db.conn, cell.id))
