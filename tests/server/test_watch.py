"""server.watch in process: watches of the same objects share one reading of them."""

from __future__ import annotations

from pathlib import Path

from devcell.api import apply
from devcell.manifests import loader
from devcell.manifests.selectors import parse
from devcell.server.routes import RESOURCES
from devcell.server.watch import Readings, Watcher
from devcell.store.db import Database

CELLS = RESOURCES["cells"]


def _apply(state: Path, name: str, team: str = "core") -> None:
    text = (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}, labels: "
            f"{{team: {team}}}}}\nspec:\n  backend: fake\n  image: devcell/busybox:latest\n")
    report = apply.apply_sources(state, [loader.from_bytes(f"{name}.yaml", text.encode())])
    assert report.ok


def _names(changes: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(c["type"], c["object"]["metadata"]["name"])  # type: ignore[index]
            for c in changes]


def test_watches_of_the_same_cells_share_one_reading(state_dir: Path) -> None:
    _apply(state_dir, "one")
    readings = Readings(lambda: Database(state_dir, create=False))
    dbs = [Database(state_dir, create=False) for _ in range(3)]
    shared = [readings.take(CELLS, None, []) for _ in dbs]
    assert shared[0] is shared[1] is shared[2] and len(readings) == 1
    watchers = [Watcher(db, CELLS, shared=s) for db, s in zip(dbs, shared, strict=True)]
    assert shared[0].readings == 1  # the three started from one reading
    for w in watchers:
        assert _names(w.poll()) == [("ADDED", "one")]

    _apply(state_dir, "two")
    for w in watchers:
        assert w.moved()
        assert ("ADDED", "two") in _names(w.poll())
        assert not w.moved() and w.poll() == []
    assert shared[0].readings == 2  # one more for the commit, not one per watch

    for db, s in zip(dbs, shared, strict=True):
        readings.give_back(s)
        db.close()
    assert len(readings) == 0


def test_a_selector_has_its_own_reading(state_dir: Path) -> None:
    _apply(state_dir, "core-cell", "core")
    _apply(state_dir, "web-cell", "web")
    readings = Readings(lambda: Database(state_dir, create=False))
    every, core = readings.take(CELLS, None, []), readings.take(CELLS, parse("team=core"), [])
    assert every is not core and len(readings) == 2
    db = Database(state_dir, create=False)
    try:
        assert _names(Watcher(db, CELLS, selector=parse("team=core"), shared=core).poll()) \
            == [("ADDED", "core-cell")]
        assert sorted(_names(Watcher(db, CELLS, shared=every).poll())) == [
            ("ADDED", "core-cell"), ("ADDED", "web-cell")]
    finally:
        db.close()
    readings.give_back(every)
    readings.give_back(core)
    assert len(readings) == 0


def test_a_reading_rebuilds_only_what_changed(state_dir: Path) -> None:
    """An object whose stored values are unchanged keeps its document; any change to what
    its document shows (a column written without a resourceVersion bump, its lineage)
    rebuilds it, so a watch never misses one."""
    _apply(state_dir, "keep")
    _apply(state_dir, "held")
    _apply(state_dir, "owned")
    db = Database(state_dir, create=False)
    shared = Readings(lambda: Database(state_dir, create=False)).take(CELLS, None, [])
    first = {k: v for k, v in shared.read().items()}
    by_name = {doc["metadata"]["name"]: key for key, (doc, _) in first.items()}
    db.conn.execute("UPDATE cells SET held = '{\"reason\": \"test\"}' WHERE name = 'held'")
    db.conn.execute("UPDATE cells SET owner = 'someone-else' WHERE name = 'owned'")
    second = shared.read()
    assert second[by_name["keep"]] is first[by_name["keep"]]
    assert second[by_name["held"]][0]["status"]["held"] == {"reason": "test"}
    assert second[by_name["owned"]][0]["metadata"]["owner"] == "someone-else"
    snap = ("apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: snap}\n"
            "spec: {cell: keep}\n")
    assert apply.apply_sources(state_dir, [loader.from_bytes("snap.yaml", snap.encode())]).ok
    third = shared.read()
    assert third[by_name["keep"]][0]["status"]["lineage"]["snapshots"] == ["snap"]
    assert third[by_name["held"]] is second[by_name["held"]]
    db.close()
    shared.db.close()
