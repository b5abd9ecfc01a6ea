"""The change log (store/changes.py) names every object whose document a write changed.

The oracle: every document of every cell, snapshot and operation (as a list and a watch
show them) and every event, before and after a write; each one that differs, appeared or
went away must be named by the log's rows after the version before the write. Checked for
arbitrary writes to the tables (a property test: the triggers hold whatever the writer), and
for DevCell's own writers run as a user runs them (apply, the controllers' status writes,
sleep and start, snapshot, fork, delete, prune, events).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcell.api import listing
from devcell.errors import UsageError, VersionGone
from devcell.store import changes
from devcell.store.db import Database, open_database

Seen = dict[tuple[str, str], str]


def everything(db: Database) -> Seen:
    """Each object's document as compared by a watch, by (kind, id)."""
    seen: Seen = {}
    for plural, kind in (("cells", "Cell"), ("snapshots", "Snapshot"),
                         ("operations", "Operation")):
        rows = listing.rows(db, plural, [], None)
        for _, doc in listing.documents(db, plural, rows):
            key = doc["metadata"]["id"] if "metadata" in doc else doc["id"]
            seen[(kind, str(key))] = json.dumps(doc, sort_keys=True, default=str)
    for r in db.conn.execute("SELECT id FROM events"):
        seen[("Event", str(r[0]))] = ""
    return seen


def missed(db: Database, before: Seen, version: int) -> set[tuple[str, str]]:
    """What changed since `before` that the log after `version` does not name."""
    after = everything(db)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    logged = {(kind, key) for _, kind, key in changes.kinds_after(db.conn, version)}
    return changed - logged


# -- the tables written directly: whatever a writer does --------------------------------------

_CELL = ("INSERT INTO cells (id, name, spec, spec_hash, manifest_hash, generation, "
         "resource_version, phase, created_at, updated_at, backend, forked_from, labels) "
         "VALUES (?, ?, '{\"image\": \"busybox\"}', 'h', 'm', 1, 1, 'Pending', ?, ?, 'fake', ?, "
         "?)")
_SNAPSHOT = ("INSERT INTO snapshots (id, name, spec, spec_hash, manifest_hash, generation, "
             "resource_version, phase, created_at, updated_at, cell_id, source) "
             "VALUES (?, ?, '{}', 'h', 'm', 1, 1, 'Ready', ?, ?, ?, ?)")

IDS = st.sampled_from(["c_1", "c_2", "c_3"])
SNAPS = st.sampled_from(["s_1", "s_2", "s_3"])
NAMES = st.sampled_from(["a", "b", "c"])
STAMP = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", None])

WRITES = st.one_of(
    st.tuples(st.just("cell"), IDS, NAMES, st.none() | SNAPS,
              st.sampled_from(['{}', '{"team": "core"}'])),
    st.tuples(st.just("snapshot"), SNAPS, NAMES, IDS, st.none() | st.just("file.yaml")),
    st.tuples(st.just("cell-set"), IDS, st.sampled_from(
        ["name", "deleted_at", "forked_from", "phase", "status", "held", "owner", "labels",
         "deleting_at"]), st.none() | NAMES | SNAPS | STAMP),
    st.tuples(st.just("snapshot-set"), SNAPS, st.sampled_from(
        ["name", "deleted_at", "cell_id", "phase", "created_at", "labels", "status"]),
        st.none() | NAMES | IDS | STAMP),
    st.tuples(st.just("cell-delete"), IDS),
    st.tuples(st.just("snapshot-delete"), SNAPS),
    st.tuples(st.just("operation"), st.sampled_from(["o_1", "o_2"]), IDS),
    st.tuples(st.just("step"), st.sampled_from(["o_1", "o_2"]), st.integers(0, 2),
              st.sampled_from(["Running", "Succeeded"])),
    st.tuples(st.just("event"), IDS),
)


def _value(column: str, value: Any) -> Any:
    if column in ("status", "labels"):
        return json.dumps({"v": value} if value is not None else {})
    if column == "held":
        return None if value is None else json.dumps({"reason": str(value)})
    if column in ("name", "phase", "created_at") and value is None:
        return "x"
    return value


def _write(conn: sqlite3.Connection, write: tuple[Any, ...]) -> None:
    what, *args = write
    t = "2026-01-01T00:00:00Z"
    if what == "cell":
        key, name, source, labels = args
        conn.execute(_CELL, (key, name, t, t, source, labels))
    elif what == "snapshot":
        key, name, cell, source = args
        conn.execute("INSERT INTO snapshots (id, name, spec, spec_hash, manifest_hash, "
                     "generation, resource_version, phase, created_at, updated_at, cell_id, "
                     "source) VALUES (?, ?, '{}', 'h', 'm', 1, 1, 'Expired', ?, ?, ?, ?) "
                     "ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                     "cell_id = excluded.cell_id", (key, name, t, t, cell, source))
    elif what in ("cell-set", "snapshot-set"):
        table = "cells" if what == "cell-set" else "snapshots"
        key, column, value = args
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?",
                     (_value(column, value), key))
    elif what in ("cell-delete", "snapshot-delete"):
        table = "cells" if what == "cell-delete" else "snapshots"
        conn.execute(f"DELETE FROM {table} WHERE id = ?", (args[0],))
    elif what == "operation":
        key, cell = args
        conn.execute("INSERT INTO operations (id, object_kind, object_id, object_name, "
                     "action, trigger, status, created_at) VALUES (?, 'Cell', ?, 'a', "
                     "'create', 'apply', 'Running', ?) ON CONFLICT (id) DO UPDATE SET "
                     "object_id = excluded.object_id", (key, cell, t))
    elif what == "step":
        key, idx, status = args
        conn.execute("INSERT INTO operation_steps (op_id, idx, name, status) VALUES "
                     "(?, ?, 'pull', ?) ON CONFLICT DO UPDATE SET status = excluded.status",
                     (key, idx, status))
    else:
        conn.execute("INSERT INTO events (created_at, object_kind, object_id, object_name, "
                     "type, reason) VALUES (?, 'Cell', ?, 'a', 'Normal', 'Tested')",
                     (t, args[0]))


SEED: list[tuple[Any, ...]] = [
    ("cell", "c_1", "a", None, "{}"), ("snapshot", "s_1", "a", "c_1", None),
    ("cell", "c_2", "b", "s_1", "{}"), ("snapshot", "s_2", "b", "c_2", "file.yaml")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(WRITES, min_size=1, max_size=3), min_size=1, max_size=5))
def test_no_write_to_the_tables_changes_a_document_the_log_does_not_name(
        commits: list[list[tuple[Any, ...]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = open_database(Path(tmp) / "state")
        try:
            db.conn.execute("PRAGMA foreign_keys = OFF")
            with db.write() as conn:  # linked objects: a cell, its snapshot, a fork of it
                for write in SEED:
                    _write(conn, write)
            for writes in commits:
                before, version = everything(db), changes.latest(db.conn)
                with db.write() as conn:
                    for write in writes:
                        try:
                            _write(conn, write)
                        except sqlite3.IntegrityError:
                            pass  # an id or live name taken twice: refused
                assert missed(db, before, version) == set(), writes
        finally:
            db.close()


# -- versions: what is kept, what is refused ---------------------------------------------------


def test_a_version_older_than_the_log_keeps_is_gone_and_a_newer_one_is_refused(
        db: Database) -> None:
    with db.write() as conn:
        conn.execute("DROP TRIGGER changes_kept")
        conn.execute(changes.keep_trigger(5))
        for n in range(4):
            _write(conn, ("event", f"c_{n}"))
    assert changes.oldest(db.conn) == 0 and changes.latest(db.conn) == 4
    changes.check(db.conn, 0)
    with db.write() as conn:
        for n in range(4):
            _write(conn, ("event", f"c_{n}"))
    assert changes.latest(db.conn) == 8
    assert db.conn.execute("SELECT count(*) FROM changes").fetchone()[0] == 5
    assert changes.oldest(db.conn) == 3
    changes.check(db.conn, 3)
    with pytest.raises(VersionGone, match="too old"):
        changes.check(db.conn, 2)
    with pytest.raises(UsageError, match="the newest is 8"):
        changes.check(db.conn, 9)


def test_an_upgraded_database_starts_its_versions_after_the_newest_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from devcell.store import migrations

    state = tmp_path / "state"
    with monkeypatch.context() as m:
        m.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:10])
        m.setattr(migrations, "LATEST", 10)
        old = open_database(state)
        with old.write() as conn:
            for n in range(7):
                _write(conn, ("event", f"c_{n}"))
        old.close()
    db = open_database(state)
    try:
        assert changes.latest(db.conn) == 7  # a client's version from before stays valid
        changes.check(db.conn, 7)
        with pytest.raises(VersionGone):
            changes.check(db.conn, 6)  # what changed after it was never logged
        with db.write() as conn:
            _write(conn, ("event", "c_1"))
        assert [seq for seq, _, _ in changes.kinds_after(db.conn, 0)] == [8]
    finally:
        db.close()


def test_a_rolled_back_write_leaves_no_change(db: Database) -> None:
    with pytest.raises(RuntimeError), db.write() as conn:
        _write(conn, ("event", "c_1"))
        raise RuntimeError("rolled back")
    assert changes.latest(db.conn) == 0 and list(changes.kinds_after(db.conn, 0)) == []


# -- DevCell's writers, run as a user runs them ------------------------------------------------


def _cell(name: str, team: str) -> str:
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}, "
            f"labels: {{team: {team}}}}}\nspec:\n  backend: fake\n  image: "
            "devcell/busybox:latest\n")


def test_every_writer_logs_every_document_it_changes(state_dir: Path, cli: Any,
                                                     tmp_path: Path) -> None:
    """apply (and the controllers' status writes as it converges), snapshot, fork, sleep
    and start (holds), a label change, prune, delete, and the events each records: after
    each, every document that changed is named by the log after the version before it."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "a.yaml").write_text(_cell("a", "core"))
    (manifests / "b.yaml").write_text(_cell("b", "core"))

    def relabel() -> list[str]:
        (manifests / "b.yaml").write_text(_cell("b", "web"))
        return ["apply", "-f", str(manifests)]

    def unlist() -> list[str]:
        (manifests / "b.yaml").unlink()
        return ["apply", "-f", str(manifests), "--prune", "--keep-pruned", "0", "--approve"]

    steps: list[Any] = [
        ["apply", "-f", str(manifests)],
        ["snapshot", "create", "a", "--name", "s1"],
        ["cell", "fork", "a", "--snapshot", "s1", "--name", "f1", "--no-ports"],
        ["cell", "sleep", "a"],
        ["cell", "start", "a"],
        relabel,
        unlist,
        ["delete", "cell", "f1", "--approve"],
        ["delete", "snapshot", "s1", "--approve"],
    ]
    for step in steps:
        db = Database(state_dir, create=False) if (state_dir / "state.db").exists() else None
        before, version = (everything(db), changes.latest(db.conn)) if db else ({}, 0)
        if db:
            db.close()
        args = step() if callable(step) else step
        done = cli(*args)
        assert done.returncode == 0, (args, done.stderr)
        db = Database(state_dir, create=False)
        try:
            assert everything(db) != before, args  # the step changed something
            assert missed(db, before, version) == set(), args
        finally:
            db.close()
