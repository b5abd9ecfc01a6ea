"""server.watch in process: watches of the same objects share one reading of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
    # one more for the commit, not one per watch, and of the one cell the log named
    assert (shared[0].readings, shared[0].partial) == (1, 1)

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
    first = dict(shared.read()[1])
    by_name = {doc["metadata"]["name"]: key for key, (doc, _) in first.items()}
    db.conn.execute("UPDATE cells SET held = '{\"reason\": \"test\"}' WHERE name = 'held'")
    db.conn.execute("UPDATE cells SET owner = 'someone-else' WHERE name = 'owned'")
    second = shared.read()[1]
    assert second[by_name["keep"]] is first[by_name["keep"]]
    assert second[by_name["held"]][0]["status"]["held"] == {"reason": "test"}
    assert second[by_name["owned"]][0]["metadata"]["owner"] == "someone-else"
    snap = ("apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: snap}\n"
            "spec: {cell: keep}\n")
    assert apply.apply_sources(state_dir, [loader.from_bytes("snap.yaml", snap.encode())]).ok
    third = shared.read()[1]
    assert third[by_name["keep"]][0]["status"]["lineage"]["snapshots"] == ["snap"]
    assert third[by_name["held"]] is second[by_name["held"]]
    db.close()
    shared.db.close()


def _documents(db: Database) -> dict[str, str]:
    from devcell.api import listing

    rows = listing.rows(db, "cells", [], None)
    return {doc["metadata"]["id"]: json.dumps(doc, sort_keys=True)
            for _, doc in listing.documents(db, "cells", rows)}


def test_a_watch_resumed_from_a_version_gets_exactly_the_changes_after_it(
        state_dir: Path) -> None:
    """From each version a list could have given: every cell changed after it (as it is
    now; DELETED if gone), none that did not change, and nothing again once caught up."""
    from devcell.store import changes

    for name in ("a", "b", "c", "d"):
        _apply(state_dir, name)
    db = Database(state_dir, create=False)
    ids = {doc_id: name for doc_id, name in db.conn.execute("SELECT id, name FROM cells")}
    by_name = {name: key for key, name in ids.items()}
    seen = [(changes.latest(db.conn), _documents(db))]
    writes = [
        ("UPDATE cells SET labels = '{\"team\": \"web\"}' WHERE name = 'a'", ()),
        ("UPDATE cells SET status = json_set(status, '$.x', 1) WHERE name = 'b'", ()),
        ("UPDATE cells SET held = '{\"reason\": \"r\"}' WHERE name = 'a'", ()),
        ("UPDATE cells SET deleted_at = '2026-01-01T00:00:00Z' WHERE name = 'c'", ()),
        ("INSERT INTO events (created_at, object_kind, object_id, object_name, type, reason) "
         "VALUES ('t', 'Cell', ?, 'd', 'Normal', 'Tested')", (by_name["d"],)),
    ]
    for sql, params in writes:
        with db.write() as conn:
            conn.execute(sql, params)
        seen.append((changes.latest(db.conn), _documents(db)))
    now = seen[-1][1]
    for version, then in seen:
        expected = {("DELETED" if key not in now else "MODIFIED", key)
                    for key in then.keys() | now.keys() if then.get(key) != now.get(key)}
        watcher = Watcher(db, CELLS, after=version)
        got = watcher.poll()
        assert {(c["type"], c["object"]["metadata"]["id"]) for c in got} == expected, version
        for change in got:
            if change["type"] == "MODIFIED":
                key = change["object"]["metadata"]["id"]
                assert json.dumps(change["object"], sort_keys=True) == now[key]
        assert all(c["resourceVersion"] == str(seen[-1][0]) for c in got)
        assert not watcher.moved() and watcher.poll() == []
        assert watcher.bookmark()["resourceVersion"] == str(seen[-1][0])
    db.close()


def test_a_commit_rereads_only_the_objects_the_log_names(state_dir: Path) -> None:
    """One cell of many changed: the shared reading re-reads that one row, and the watches
    compare only it; a commit that changed no object reads nothing."""
    for n in range(12):
        _apply(state_dir, f"cell{n}")
    db = Database(state_dir, create=False)
    shared = Readings(lambda: Database(state_dir, create=False)).take(CELLS, None, [])
    watcher = Watcher(db, CELLS, shared=shared)
    assert len(watcher.poll()) == 12 and (shared.readings, shared.partial) == (1, 0)
    with db.write() as conn:
        conn.execute("UPDATE cells SET labels = '{\"team\": \"web\"}' WHERE name = 'cell3'")
    assert _names(watcher.poll()) == [("MODIFIED", "cell3")]
    assert (shared.readings, shared.partial) == (1, 1)
    assert shared.changed_since(shared.seq - 1) is not None
    with db.write() as conn:  # a row no watch reads
        conn.execute("INSERT INTO migrations (version, name, applied_at) VALUES (99, 't', 't')")
    assert watcher.poll() == [] and (shared.readings, shared.partial) == (1, 1)
    with db.write() as conn:  # deleted: DELETED, by id
        conn.execute("UPDATE cells SET deleted_at = 't' WHERE name = 'cell4'")
    assert _names_or_ids(watcher.poll()) == [("DELETED", None)]
    db.close()
    shared.db.close()


def _names_or_ids(changes: list[dict[str, Any]]) -> list[tuple[object, object]]:
    return [(c["type"], c["object"]["metadata"].get("name")) for c in changes]
