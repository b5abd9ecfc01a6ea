"""The daemon's incremental sync: reading only the paths the watcher named gives the same
desired state as reading the whole directory, and a lost event is repaired (and said to be)
by the next full resync."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devcell import kinds
from devcell.reconciler.gitops import DirectorySync
from devcell.store import objects
from devcell.store.db import Database, open_database
from tests.reconciler.inprocess import run_daemon

CELL = ("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: %s}\n"
        "spec: {backend: fake, state: %s}\n")
SNAP = "apiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: %s}\nspec: {cell: %s}\n"


def cell(name: str, state: str = "Running") -> str:
    return CELL % (name, state)


@pytest.fixture
def watched(tmp_path: Path) -> Path:
    path = tmp_path / "manifests"
    path.mkdir()
    return path


def live(db: Database) -> dict[tuple[str, str], tuple[str, str | None, bool]]:
    """(kind, name) -> (spec hash, source, being deleted) of every live object."""
    out = {}
    for kind in kinds.KINDS.values():
        for name, spec_hash, source, deleting in db.conn.execute(
                f"SELECT name, spec_hash, source, deleting_at IS NOT NULL FROM {kind.table} "
                "WHERE deleted_at IS NULL"):
            out[(kind.name, name)] = (spec_hash, source, bool(deleting))
    return out


def source(db: Database, name: str) -> str | None:
    found = objects.get(db.conn, "Cell", name)
    return found.source if found else None


def test_add_edit_delete_read_only_the_named_files(db: Database, watched: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (watched / "other.yaml").write_text(cell("other"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    assert sync.sync().full
    read: list[str] = []
    from devcell.manifests import loader
    original = loader.read_sources

    def counting(paths: Any, **kw: Any) -> Any:
        read.extend(paths)
        return original(paths, **kw)

    monkeypatch.setattr(loader, "read_sources", counting)
    api = watched / "api.yaml"
    api.write_text(cell("api"))
    result = sync.sync_paths([str(api)])
    assert not result.full and not result.problems
    assert [(c.name, c.outcome) for c in result.changes] == [("api", "created")]
    assert read == [str(api)]  # other.yaml was not read again

    api.write_text(cell("api", "Stopped"))
    result = sync.sync_paths([str(api)])
    assert [(c.name, c.outcome) for c in result.changes] == [("api", "configured")]
    assert objects.get(db.conn, "Cell", "api").spec["state"] == "Stopped"  # type: ignore[union-attr]

    api.unlink()
    result = sync.sync_paths([str(api)])
    assert [(c.name, c.outcome) for c in result.pruned] == [("api", "pruned")]
    assert objects.get(db.conn, "Cell", "other") is not None
    assert not objects.get(db.conn, "Cell", "other").deleting  # type: ignore[union-attr]


def test_a_document_removed_from_a_file_is_pruned_after_the_grace(db: Database,
                                                                  watched: Path) -> None:
    both = watched / "both.yaml"
    both.write_text(cell("api") + "---\n" + cell("web"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=60)
    sync.sync()
    both.write_text(cell("api"))
    result = sync.sync_paths([str(both)])
    assert result.prune_pending == 1 and not result.pruned
    sync.prune_grace = 0
    result = sync.sync_paths([])  # the daemon's timer: nothing new, the grace is over
    assert [c.name for c in result.pruned] == ["web"]
    assert not objects.get(db.conn, "Cell", "api").deleting  # type: ignore[union-attr]


def test_a_rename_in_one_batch_moves_the_object_and_prunes_nothing(db: Database,
                                                                   watched: Path) -> None:
    (watched / "a.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    before = objects.get(db.conn, "Cell", "api")
    os.rename(watched / "a.yaml", watched / "b.yaml")
    result = sync.sync_paths([str(watched / "a.yaml"), str(watched / "b.yaml")])
    assert not result.pruned and not result.prune_pending and not result.problems
    after = objects.get(db.conn, "Cell", "api")
    assert after is not None and before is not None
    assert (after.id, after.generation, after.deleting) == (before.id, before.generation, False)
    assert after.source == str(watched / "b.yaml")


def test_a_rename_split_over_two_batches_prunes_nothing(db: Database, watched: Path) -> None:
    (watched / "a.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=60)
    sync.sync()
    os.rename(watched / "a.yaml", watched / "b.yaml")
    # the deletion first: the object is missing, but only for the grace period
    assert sync.sync_paths([str(watched / "a.yaml")]).prune_pending == 1
    result = sync.sync_paths([str(watched / "b.yaml")])
    assert not result.prune_pending and not result.pruned
    assert source(db, "api") == str(watched / "b.yaml")
    sync.prune_grace = 0
    assert not sync.sync_paths([]).pruned

    # the addition first: the file that held the object is read too, and is gone
    os.rename(watched / "b.yaml", watched / "c.yaml")
    result = sync.sync_paths([str(watched / "c.yaml")])
    assert not result.problems and not result.pruned and not result.prune_pending
    assert source(db, "api") == str(watched / "c.yaml")
    assert not sync.sync_paths([str(watched / "b.yaml")]).pruned


def test_the_same_object_in_an_unchanged_file_is_defined_twice(db: Database,
                                                               watched: Path) -> None:
    (watched / "a.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    (watched / "b.yaml").write_text(cell("api", "Stopped"))
    result = sync.sync_paths([str(watched / "b.yaml")])
    assert [p.file for p in result.problems] == [str(watched / "b.yaml")]
    assert "defined twice" in str(result.problems[0])
    assert source(db, "api") == str(watched / "a.yaml")
    assert objects.get(db.conn, "Cell", "api").spec["state"] == "Running"  # type: ignore[union-attr]
    # deleting the first file lets the second one apply (it is retried while bad)
    (watched / "a.yaml").unlink()
    result = sync.sync_paths([str(watched / "a.yaml")])
    assert not result.problems and not result.pruned
    assert source(db, "api") == str(watched / "b.yaml")


@pytest.mark.parametrize("newcomer", ["0.yaml", "z.yaml", "sub/0.yaml"])
def test_a_second_file_declaring_a_recorded_cell_never_takes_it_over(
        db: Database, watched: Path, newcomer: str) -> None:
    """Before: a newcomer that sorts before the original (`0.yaml`) had its spec applied to
    the running cell, and the original file was the one blamed. Now, whichever sorts first,
    the file the cell was applied from keeps it (spec, id, generation), the newcomer is
    refused naming that file, nothing is pruned, and an edit of the original still applies."""
    (watched / "b.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    before = objects.get(db.conn, "Cell", "api")
    (watched / newcomer).parent.mkdir(exist_ok=True)
    (watched / newcomer).write_text(cell("api", "Stopped"))
    for result in (sync.sync_paths([str(watched / newcomer)]), sync.sync()):
        assert [p.file for p in result.problems] == [str(watched / newcomer)]
        assert str(watched / "b.yaml") in str(result.problems[0])
        assert not result.pruned and {c.outcome for c in result.changes} <= {"unchanged"}
        after = objects.get(db.conn, "Cell", "api")
        assert after is not None and before is not None
        assert (after.id, after.generation, after.source, after.spec["state"]) == (
            before.id, before.generation, str(watched / "b.yaml"), "Running")
    (watched / "b.yaml").write_text(cell("api", "Stopped"))
    result = sync.sync_paths([str(watched / "b.yaml")])
    assert [(c.name, c.outcome) for c in result.changes] == [("api", "configured")]
    assert [p.file for p in result.problems] == [str(watched / newcomer)]
    after = objects.get(db.conn, "Cell", "api")
    assert after is not None and after.source == str(watched / "b.yaml")


def test_moving_the_original_beside_a_duplicate_keeps_the_cell_with_the_original(
        db: Database, watched: Path) -> None:
    """The recorded file renamed while a newcomer declares the cell too: the recorded source
    is gone, and walk order handed the cell to the newcomer (`0.yaml`, Stopped). The moved
    original, identical to what was applied, keeps it."""
    (watched / "b.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    before = objects.get(db.conn, "Cell", "api")
    assert before is not None
    (watched / "0.yaml").write_text(cell("api", "Stopped"))
    sync.sync()
    (watched / "b.yaml").rename(watched / "z.yaml")
    result = sync.sync()
    assert [p.file for p in result.problems] == [str(watched / "0.yaml")], result.problems
    assert not result.pruned
    after = objects.get(db.conn, "Cell", "api")
    assert after is not None
    assert (after.id, after.generation, after.spec["state"]) == (before.id, before.generation,
                                                                 "Running")


def test_a_port_moved_from_one_file_to_another_prunes_instead_of_wedging(
        db: Database, watched: Path) -> None:
    """`a.yaml`'s cell publishes 8080; the user deletes it and adds `b.yaml` with 8080. The
    newcomer was refused (a's port), a bad file holds every prune, so a was never pruned and b
    never admitted. Now a goes with the prune and b is recorded, in either order of events."""
    def ported(name: str) -> str:
        return cell(name).replace("state: Running}", "state: Running, network: {mode: bridge, "
                                  "ports: [{containerPort: 80, hostPort: 8080, "
                                  "hostIP: 127.0.0.1}]}}")

    (watched / "a.yaml").write_text(ported("a"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    (watched / "a.yaml").unlink()
    (watched / "b.yaml").write_text(ported("b"))
    for result in (sync.sync_paths([str(watched / "a.yaml"), str(watched / "b.yaml")]),
                   sync.sync()):
        assert not result.problems, result.problems
    state = live(db)
    assert state[("Cell", "a")][2] is True  # being deleted
    assert ("Cell", "b") in state


def test_an_object_twice_in_its_own_file_is_reported_and_nothing_is_pruned(
        db: Database, watched: Path) -> None:
    """The recorded source defining its cell twice: the rule that keeps a cell with its own
    file dropped this problem, and with no problem left every cell was pruned."""
    (watched / "a.yaml").write_text(cell("api"))
    (watched / "b.yaml").write_text(cell("web"))
    sync = DirectorySync(db, watched, prune_grace=0)
    sync.sync()
    (watched / "a.yaml").write_text(cell("api") + "---\n" + cell("api", "Stopped"))
    for result in (sync.sync_paths([str(watched / "a.yaml")]), sync.sync()):
        assert [p.file for p in result.problems] == [str(watched / "a.yaml")], result.problems
        assert "defined twice" in str(result.problems[0])
        assert not result.pruned
        for name in ("api", "web"):
            found = objects.get(db.conn, "Cell", name)
            assert found is not None and not found.deleting


def test_a_bad_edit_keeps_the_last_good_state_until_fixed(db: Database, watched: Path) -> None:
    api, web = watched / "api.yaml", watched / "web.yaml"
    api.write_text(cell("api"))
    web.write_text(cell("web"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    api.write_text(cell("api", "Stopped").replace("backend: fake", "backend: fake, bogus: 1"))
    result = sync.sync_paths([str(api)])
    assert [p.file for p in result.problems] == [str(api)] and "bogus" in str(result.problems[0])
    assert objects.get(db.conn, "Cell", "api").spec["state"] == "Running"  # type: ignore[union-attr]
    # another file's change still applies, and the bad file is still reported
    web.write_text(cell("web", "Stopped"))
    result = sync.sync_paths([str(web)])
    assert [p.file for p in result.problems] == [str(api)]
    assert objects.get(db.conn, "Cell", "web").spec["state"] == "Stopped"  # type: ignore[union-attr]
    api.write_text("")  # a truncated save: reported, never a deletion
    result = sync.sync_paths([str(api)])
    assert "empty" in str(result.problems[0]) and not result.pruned
    api.write_text(cell("api", "Stopped"))
    result = sync.sync_paths([str(api)])
    assert not result.problems
    assert objects.get(db.conn, "Cell", "api").spec["state"] == "Stopped"  # type: ignore[union-attr]


def test_a_file_deleted_while_another_is_bad_is_pruned_once_all_are_good(
        db: Database, watched: Path) -> None:
    for name in ("api", "web", "db"):
        (watched / f"{name}.yaml").write_text(cell(name))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    (watched / "db.yaml").write_text("kind: [\n")
    assert sync.sync_paths([str(watched / "db.yaml")]).problems
    (watched / "api.yaml").unlink()
    result = sync.sync_paths([str(watched / "api.yaml")])
    assert [p.file for p in result.problems] == [str(watched / "db.yaml")]
    assert not result.pruned  # never while any file is bad
    assert not objects.get(db.conn, "Cell", "api").deleting  # type: ignore[union-attr]
    (watched / "db.yaml").write_text(cell("db"))
    result = sync.sync_paths([str(watched / "db.yaml")])  # api.yaml is not named again
    assert not result.problems
    assert [c.name for c in result.pruned] == ["api"]
    assert not objects.get(db.conn, "Cell", "web").deleting  # type: ignore[union-attr]


def test_directories_hidden_entries_and_other_extensions_follow_the_walk(
        db: Database, watched: Path) -> None:
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    sub = watched / "team" / "deep"
    sub.mkdir(parents=True)
    (sub / "api.yaml").write_text(cell("api"))
    (sub / "web.yml").write_text(cell("web"))
    (sub / "notes.txt").write_text(cell("txt"))
    (sub / ".draft.yaml").write_text(cell("draft"))
    (watched / ".git").mkdir()
    (watched / ".git" / "x.yaml").write_text(cell("hidden"))
    result = sync.sync_paths([str(watched / "team"), str(watched / ".git")])  # only the dirs
    assert sorted(c.name for c in result.changes) == ["api", "web"]
    assert set(live(db)) == {("Cell", "api"), ("Cell", "web")}

    moved = watched / "moved"
    os.rename(watched / "team", moved)
    result = sync.sync_paths([str(watched / "team"), str(moved)])
    assert not result.pruned and source(db, "api") == str(moved / "deep" / "api.yaml")
    shutil.rmtree(moved)
    result = sync.sync_paths([str(moved)])
    assert sorted(c.name for c in result.pruned) == ["api", "web"]


def test_a_path_the_incremental_sync_cannot_follow_reads_everything(
        db: Database, watched: Path) -> None:
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    (watched / "api.yaml").write_text(cell("api"))
    assert sync.sync_paths([str(watched)]).full  # the directory itself
    assert sync.sync_paths(["/elsewhere/x.yaml"]).full
    many = [str(watched / f"n{i}.yaml") for i in range(100)]
    assert sync.sync_paths(many).full  # a large batch: one walk is cheaper


def test_a_lost_event_is_repaired_by_the_full_resync_which_says_so(
        db: Database, watched: Path) -> None:
    (watched / "api.yaml").write_text(cell("api"))
    (watched / "db.yaml").write_text(cell("db"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    first = sync.sync()
    assert first.unseen == {}  # nothing to compare with at the start
    (watched / "lost.yaml").write_text(cell("lost"))  # its event is dropped
    (watched / "api.yaml").write_text(cell("api", "Stopped"))  # and this one's
    (watched / "db.yaml").unlink()  # and this one's
    (watched / "web.yaml").write_text(cell("web"))  # reported
    sync.sync_paths([str(watched / "web.yaml")])
    assert objects.get(db.conn, "Cell", "lost") is None
    result = sync.sync()
    assert result.unseen == {str(watched / "api.yaml"): "changed",
                             str(watched / "db.yaml"): "deleted",
                             str(watched / "lost.yaml"): "added"}
    assert objects.get(db.conn, "Cell", "lost") is not None
    assert objects.get(db.conn, "Cell", "api").spec["state"] == "Stopped"  # type: ignore[union-attr]
    assert [c.name for c in result.pruned] == ["db"]
    assert sync.sync().unseen == {}  # nothing lost since


# -- the same desired state as a full walk, for any sequence of file operations ----------------

PATHS = ["a.yaml", "b.yaml", "c.yml", "sub/d.yaml", "sub/e.json", "sub/deep/f.yaml",
         ".hidden.yaml", "notes.txt"]
CONTENTS = st.one_of(
    st.builds(cell, st.sampled_from(["x", "y", "z"]), st.sampled_from(["Running", "Stopped"])),
    st.builds(lambda a, b: cell(a) + "---\n" + cell(b, "Stopped"),
              st.sampled_from(["x", "y"]), st.sampled_from(["y", "z"])),
    st.builds(lambda n, c: SNAP % (n, c), st.just("s"), st.sampled_from(["x", "w"])),
    st.sampled_from(["", "kind: [\n", cell("x").replace("fake", "fake, bogus: 1")]),
)
OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(PATHS), CONTENTS),
    st.tuples(st.just("delete"), st.sampled_from(PATHS), st.just("")),
    st.tuples(st.just("rename"), st.sampled_from(PATHS), st.sampled_from(PATHS)),
    st.tuples(st.just("rmtree"), st.sampled_from(["sub", "sub/deep"]), st.just("")),
    st.tuples(st.just("mvdir"), st.sampled_from(["sub", "moved"]), st.sampled_from(["sub", "moved"])),
)


def perform(root: Path, op: tuple[str, str, str]) -> list[str]:
    """Do one file operation; return the paths a watcher would name (for a directory, only
    the directory, as inotify does)."""
    what, a, b = op
    pa, pb = root / a, root / b
    if what == "write":
        pa.parent.mkdir(parents=True, exist_ok=True)
        pa.write_text(b)
        return [str(pa)] if pa.parent == root or pa.parent.exists() else []
    if what == "delete":
        if pa.is_file():
            pa.unlink()
        return [str(pa)]
    if what == "rename":
        if pa.is_file() and pa != pb:
            pb.parent.mkdir(parents=True, exist_ok=True)
            os.replace(pa, pb)
        return [str(pa), str(pb)]
    if what == "rmtree":
        shutil.rmtree(pa, ignore_errors=True)
        return [str(pa)]
    if pa.is_dir() and not pb.exists():  # mvdir
        os.rename(pa, pb)
    return [str(pa), str(pb)]


def problem_files(result: Any) -> set[str]:
    return {p.file for p in result.problems}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=12))
def test_incremental_and_full_syncs_record_the_same_state(ops: list[tuple[str, str, str]]
                                                          ) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "watched"
        root.mkdir()
        (root / "a.yaml").write_text(cell("x"))
        incremental_db = open_database(Path(tmp) / "incremental")
        full_db = open_database(Path(tmp) / "full")
        try:
            # the incremental side's own full syncs go one file at a time; the reference
            # applies the whole directory at once
            incremental = DirectorySync(incremental_db, root, prune_grace=0, full_part=1)
            full = DirectorySync(full_db, root, prune_grace=0, full_part=10**6)
            incremental.sync()
            full.sync()
            for op in ops:
                named = perform(root, op)
                got = incremental.sync_paths(named)
                want = full.sync()
                assert problem_files(got) == problem_files(want), op
                assert live(incremental_db) == live(full_db), op
        finally:
            incremental_db.close()
            full_db.close()


# -- the daemon: a deliberately dropped event, repaired by the resync, with its event ----------

def test_the_daemon_records_a_lost_event_repaired_by_the_resync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import watchfiles

    from devcell.reconciler.daemon import Daemon, DaemonConfig

    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "seen.yaml").write_text(cell("seen"))
    original = watchfiles.watch

    def dropping(*args: Any, **kwargs: Any) -> Iterator[set[Any]]:
        for changes in original(*args, **kwargs):
            yield {c for c in changes if os.path.basename(c[1]) != "lost.yaml"}

    monkeypatch.setattr(watchfiles, "watch", dropping)
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", manifests=watched,
                                 resync_seconds=1.5, debounce_ms=100))
    found: list[tuple[str, str]] = []

    def query(sql: str) -> list[Any]:
        conn = sqlite3.connect(tmp_path / "state" / "state.db", timeout=5)
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def recorded(name: str) -> bool:
        if not (tmp_path / "state" / "state.db").exists():
            return False
        try:
            return bool(query(f"SELECT 1 FROM cells WHERE name = '{name}'"))
        except sqlite3.OperationalError:  # the schema is being created
            return False

    def drive() -> None:
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not recorded("seen"):
                time.sleep(0.05)
            time.sleep(0.5)  # the watcher is live (its first full sync has run)
            (watched / "lost.yaml").write_text(cell("lost"))
            (watched / "heard.yaml").write_text(cell("heard"))
            while time.monotonic() < deadline and not found:
                found.extend(query("SELECT reason, message FROM events "
                                   "WHERE reason = 'ResyncRepaired'"))
                time.sleep(0.05)
        finally:
            daemon.stop_event.set()

    run_daemon(daemon, drive, join_s=20)
    assert found, "no ResyncRepaired event"
    (reason, message), = found
    assert "lost.yaml (added)" in message and "cell/lost created" in message, message
    assert "heard.yaml" not in message, message  # its event arrived: not a repair
    cells = {name for (name,) in query("SELECT name FROM cells WHERE deleted_at IS NULL")}
    assert {"seen", "lost", "heard"} <= cells


# Found by the property below: an object in two files, one of which is set aside for
# another object it defines twice. A part recorded `y` from f.yaml before d.yaml was read
# (and the recorded file then kept it), while one apply set both d.yaml and f.yaml aside.
# Both now set d.yaml aside (it loses x to b.yaml) and then record y from f.yaml.
EARLIER = {"a.yaml": cell("x"), "b.yaml": SNAP % ("s", "x"), "c.yml": cell("x"),
           "sub/deep/f.yaml": cell("z")}
NOW = {"a.yaml": SNAP % ("s", "x"), "b.yaml": cell("x"), "c.yml": cell("z"),
       "sub/d.yaml": cell("x") + "---\n" + cell("y", "Stopped"), "sub/deep/f.yaml": cell("y")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(PATHS), CONTENTS, max_size=6),
       st.dictionaries(st.sampled_from(PATHS), CONTENTS, max_size=6),
       st.sampled_from([1, 2, 3]))
@example(EARLIER, NOW, 1)
@example({}, NOW, 1)
@example(NOW, NOW, 2)
@example({"a.yaml": cell("x"), "c.yml": cell("y")},
         {"a.yaml": cell("x", "Stopped") + "---\n" + cell("z", "Stopped"),
          "b.yaml": cell("x", "Stopped"), "c.yml": cell("x")}, 1)
def test_a_full_sync_in_parts_records_what_one_apply_records(
        earlier: dict[str, str], now: dict[str, str], part: int) -> None:
    """From any recorded state (an earlier directory), applying the directory in parts (of
    one to three files) gives what one apply of all of it gives (references to later files, objects that
    moved between files, objects defined twice): the same problems, the same objects
    recorded from the same files with the same specs."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "watched"
        dbs = [open_database(Path(tmp) / "parts"), open_database(Path(tmp) / "whole")]
        try:
            for contents in (earlier, now):
                shutil.rmtree(root, ignore_errors=True)
                for name, text in contents.items():
                    (root / name).parent.mkdir(parents=True, exist_ok=True)
                    (root / name).write_text(text)
                root.mkdir(exist_ok=True)
                parts = DirectorySync(dbs[0], root, prune_grace=0, full_part=part).sync()
                whole = DirectorySync(dbs[1], root, prune_grace=0, full_part=10**6).sync()
                assert problem_files(parts) == problem_files(whole)
                assert live(dbs[0]) == live(dbs[1])
        finally:
            for db in dbs:
                db.close()


@pytest.mark.parametrize("how", ["whole", "parts", "watched"])
def test_a_file_set_aside_keeps_none_of_its_objects_from_their_other_files(
        tmp_path: Path, watched: Path, how: str) -> None:
    """d.yaml loses x to b.yaml (first in walk order); its y must not also set f.yaml aside:
    y is decided among the files left, and f.yaml's is recorded, whether the directory is
    applied at once, in parts, or as the watcher names its files. The message names the
    file and line the object is kept in."""
    db = open_database(tmp_path / "state")
    try:
        sync = DirectorySync(db, watched, prune_grace=0, full_part=1 if how == "parts" else 50)
        sync.sync()
        for name, text in NOW.items():
            (watched / name).parent.mkdir(parents=True, exist_ok=True)
            (watched / name).write_text(text)
        result = (sync.sync_paths([str(watched / name) for name in NOW]) if how == "watched"
                  else sync.sync())
        assert [(p.file, p.line, p.name) for p in result.problems] == [
            (str(watched / "sub/d.yaml"), 3, "x")], result.problems
        assert f"also in {watched / 'b.yaml'}:1" in result.problems[0].message
        assert source(db, "x") == str(watched / "b.yaml")
        assert source(db, "y") == str(watched / "sub/deep/f.yaml")
    finally:
        db.close()


def test_a_recorded_file_keeps_its_object_and_the_newcomer_is_told_where(
        db: Database, watched: Path) -> None:
    """The recorded file keeps its object whichever file comes first; the message names the
    file and line it is kept in."""
    (watched / "z.yaml").write_text(cell("other") + "---\n" + cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    (watched / "a.yaml").write_text(cell("api", "Stopped"))
    result = sync.sync_paths([str(watched / "a.yaml")])
    assert [(p.file, p.line) for p in result.problems] == [(str(watched / "a.yaml"), 3)]
    assert f"already defined in {watched / 'z.yaml'}:6, where it was applied from" in (
        result.problems[0].message)


def test_the_daemon_replaces_a_failed_watcher_and_reads_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """watchfiles raises when its watcher fails (an inotify error): the daemon keeps running,
    watches again and reads the whole directory, so what changed meanwhile is applied."""
    import watchfiles

    from devcell.reconciler.daemon import Daemon, DaemonConfig

    watched = tmp_path / "watched"
    watched.mkdir()
    original = watchfiles.watch
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> Iterator[set[Any]]:
        calls.append(1)
        if len(calls) == 1:
            yield set()  # the first full sync
            (watched / "meanwhile.yaml").write_text(cell("meanwhile"))
            raise RuntimeError("error in underlying watcher: simulated")
        yield from original(*args, **kwargs)

    monkeypatch.setattr(watchfiles, "watch", failing_once)
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", manifests=watched,
                                 resync_seconds=0))
    seen: list[bool] = []

    def observe() -> None:
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not seen:
                if (tmp_path / "state" / "state.db").exists():
                    conn = sqlite3.connect(tmp_path / "state" / "state.db", timeout=5)
                    try:
                        if conn.execute("SELECT 1 FROM cells WHERE name = 'meanwhile'"
                                        ).fetchone():
                            seen.append(True)
                    except sqlite3.OperationalError:
                        pass
                    finally:
                        conn.close()
                time.sleep(0.05)
        finally:
            daemon.stop_event.set()

    run_daemon(daemon, observe, join_s=15)
    assert seen, "the file written while the watcher was down was never applied"
    assert len(calls) == 2


@pytest.mark.parametrize("incremental", [True, False])
def test_a_prune_the_store_refuses_stays_pending_and_never_raises(
        ctx: Any, db: Database, watched: Path, incremental: bool) -> None:
    """Deleting the file of a cell and its snapshot while a fork of the snapshot keeps its
    file: the snapshot's prune is refused (the store's rule: a live fork still names it). The
    sync must not raise (the daemon died of it), must report the refusal once, and must prune
    the snapshot once the fork's file is gone too (the fork is pruned first, in the same sync).
    The same for an object deleted by someone else meanwhile."""
    from devcell.reconciler.converge import converge

    (watched / "api.yaml").write_text(cell("api") + "---\n" + SNAP % ("snap", "api"))
    (watched / "fork.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: fork}\n"
        "spec: {backend: fake, workspace: {from: {snapshot: snap}}}\n")
    (watched / "other.yaml").write_text(cell("other"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    converge(ctx, sync.sync().to_reconcile)
    assert objects.get(db.conn, "Cell", "fork").phase == "Running"  # type: ignore[union-attr]

    gone = [watched / "api.yaml"]
    for path in gone:
        path.unlink()
    from devcell.store import desired
    other = desired.delete(db, "Cell", "other")  # by someone else, then its file goes
    converge(ctx, [("Cell", other.object_id)])  # type: ignore[list-item]
    assert objects.get(db.conn, "Cell", "other") is None
    (watched / "other.yaml").unlink()
    gone.append(watched / "other.yaml")

    def again(paths: list[Path]) -> Any:
        return sync.sync_paths([str(p) for p in paths]) if incremental else sync.sync()

    result = again(gone)
    assert {c.name for c in result.pruned} == {"api"}
    assert [r.split(":")[0] for r in result.refused] == ["snapshot/snap"]
    assert not again([]).refused  # reported once, still pending
    assert not objects.get(db.conn, "Snapshot", "snap").deleting  # type: ignore[union-attr]

    converge(ctx, result.to_reconcile)
    (watched / "fork.yaml").unlink()
    result = again([watched / "fork.yaml"])
    assert [c.name for c in result.pruned] == ["fork", "snap"] and not result.refused
    assert not result.problems
    converge(ctx, result.to_reconcile)  # the fork goes first, then the snapshot's checkpoint
    assert objects.get(db.conn, "Snapshot", "snap") is None
    assert objects.get(db.conn, "Cell", "fork") is None


@pytest.mark.parametrize("incremental", [True, False])
def test_a_fifo_in_the_directory_is_a_bad_file_and_blocks_no_sync(
        db: Database, watched: Path, incremental: bool) -> None:
    """A FIFO named x.yaml hung the daemon's sync for good (open() waits for a writer): the
    next file was never applied and SIGTERM did not stop it. It is now a bad file."""
    import threading

    from devcell.manifests import loader

    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    os.mkfifo(watched / "pipe.yaml")
    (watched / "api.yaml").write_text(cell("api"))
    out: list[Any] = []
    paths = [str(watched / "pipe.yaml"), str(watched / "api.yaml")]
    run = (lambda: sync.sync_paths(paths)) if incremental else sync.sync
    thread = threading.Thread(target=lambda: out.append(run()), daemon=True)
    thread.start()
    thread.join(5)
    assert out, "the sync blocked on the FIFO"
    assert [(p.file, p.message) for p in out[0].problems] == [
        (str(watched / "pipe.yaml"), loader.NOT_REGULAR)]
    assert [c.name for c in out[0].changes] == ["api"]


def test_the_daemon_follows_a_watched_directory_that_was_replaced(tmp_path: Path) -> None:
    """`rm -rf manifests && cp -r new manifests` (or a fresh clone into the same path): the
    watcher followed the deleted directory and never reported again, so every later edit
    waited for the periodic resync (and was reported as a lost event). The daemon now watches
    the new directory and applies what it holds at once."""
    from devcell.reconciler.daemon import Daemon, DaemonConfig

    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "old.yaml").write_text(cell("old"))
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", manifests=watched,
                                 resync_seconds=0, prune_grace=0))
    state = tmp_path / "state" / "state.db"

    def live_cells() -> set[str]:
        if not state.exists():
            return set()
        conn = sqlite3.connect(state, timeout=5)
        try:
            return {n for (n,) in conn.execute(
                "SELECT name FROM cells WHERE deleted_at IS NULL AND deleting_at IS NULL")}
        except sqlite3.OperationalError:
            return set()
        finally:
            conn.close()

    def wait_for(cells: set[str], deadline: float) -> bool:
        while time.monotonic() < deadline:
            if live_cells() == cells:
                return True
            time.sleep(0.05)
        return False

    outcome: list[str] = []

    def drive() -> None:
        try:
            deadline = time.monotonic() + 20
            if not wait_for({"old"}, deadline):
                outcome.append("old never recorded")
                return
            time.sleep(0.5)  # the watcher is live
            shutil.rmtree(watched)
            watched.mkdir()
            (watched / "new.yaml").write_text(cell("new"))
            if not wait_for({"new"}, time.monotonic() + 8):
                outcome.append(f"after the replace: {live_cells()}")
                return
            (watched / "later.yaml").write_text(cell("later"))  # an edit in the new one
            if not wait_for({"new", "later"}, time.monotonic() + 8):
                outcome.append(f"after an edit in the new directory: {live_cells()}")
                return
            outcome.append("ok")
        finally:
            daemon.stop_event.set()

    run_daemon(daemon, drive, join_s=30)
    assert outcome == ["ok"], outcome


@pytest.mark.parametrize("text", ["# only a comment\n", "---\n", "---\n# c\n---\n"])
@pytest.mark.parametrize("incremental", [True, False])
def test_a_file_left_with_no_objects_keeps_them_and_is_reported(
        db: Database, watched: Path, text: str, incremental: bool) -> None:
    """A save that leaves only comments or `---` is no deletion: like an empty or invalid
    file, its objects keep their last good state, the file is reported, nothing is pruned."""
    api = watched / "api.yaml"
    api.write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=0)
    sync.sync()
    api.write_text(text)
    result = sync.sync_paths([str(api)]) if incremental else sync.sync()
    assert [p.file for p in result.problems] == [str(api)]
    assert "holds no objects" in str(result.problems[0])
    assert not result.pruned
    again = sync.sync()
    assert not again.pruned and objects.get(db.conn, "Cell", "api") is not None
    api.unlink()  # deleting the file is how its objects are deleted
    result = sync.sync_paths([str(api)]) if incremental else sync.sync()
    assert [c.name for c in result.pruned] == ["api"]


class _Clock:
    """time.monotonic for devcell.reconciler.gitops, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_prune_grace_is_counted_from_when_the_object_went_missing(
        db: Database, watched: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gone for less than the grace: pending, whatever syncs happen meanwhile (they neither
    prune nor restart the clock); gone for the grace: pruned; back before it: kept."""
    from devcell.reconciler import gitops

    clock = _Clock()
    monkeypatch.setattr(gitops, "time", clock)
    (watched / "api.yaml").write_text(cell("api"))
    (watched / "web.yaml").write_text(cell("web"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=10)
    sync.sync()
    (watched / "api.yaml").unlink()
    assert sync.sync_paths([str(watched / "api.yaml")]).prune_pending == 1
    for i in range(3):  # other changes keep coming: the clock keeps running
        clock.now += 3
        (watched / "web.yaml").write_text(cell("web", "Stopped") if i % 2 == 0 else cell("web"))
        result = sync.sync_paths([str(watched / "web.yaml")])
        assert (result.prune_pending, result.pruned) == (1, []), clock.now
        assert not objects.get(db.conn, "Cell", "api").deleting  # type: ignore[union-attr]
    clock.now += 0.999  # 9.999 s gone
    assert sync.sync_paths([]).prune_pending == 1
    clock.now += 0.001  # 10 s gone
    result = sync.sync_paths([])
    assert [c.name for c in result.pruned] == ["api"] and result.prune_pending == 0
    assert objects.get(db.conn, "Cell", "api").deleting  # type: ignore[union-attr]

    (watched / "web.yaml").unlink()  # gone, then back within the grace: never pruned
    assert sync.sync_paths([str(watched / "web.yaml")]).prune_pending == 1
    clock.now += 9
    (watched / "web.yaml").write_text(cell("web"))
    assert sync.sync_paths([str(watched / "web.yaml")]).prune_pending == 0
    clock.now += 60
    assert not sync.sync_paths([]).pruned
    assert not objects.get(db.conn, "Cell", "web").deleting  # type: ignore[union-attr]


def test_a_bad_file_stops_the_prune_clock(db: Database, watched: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from devcell.reconciler import gitops

    clock = _Clock()
    monkeypatch.setattr(gitops, "time", clock)
    (watched / "api.yaml").write_text(cell("api"))
    sync = DirectorySync(db, watched, allow_empty=True, prune_grace=10)
    sync.sync()
    (watched / "api.yaml").unlink()
    assert sync.sync_paths([str(watched / "api.yaml")]).prune_pending == 1  # the clock starts
    clock.now += 5
    (watched / "bad.yaml").write_text("kind: [")
    clock.now += 60
    result = sync.sync()
    assert result.problems and not result.pruned
    (watched / "bad.yaml").unlink()
    result = sync.sync_paths([str(watched / "bad.yaml")])  # the grace starts now
    assert result.prune_pending == 1 and not result.pruned
    clock.now += 10
    assert [c.name for c in sync.sync_paths([]).pruned] == ["api"]


def test_the_daemon_prunes_after_the_grace_without_another_event(tmp_path: Path,
                                                                 watched: Path) -> None:
    """End to end, on the daemon's own timer: a deleted file's cell is kept for the grace
    (1.5 s), then deleted, though nothing else happens in the directory."""
    from devcell.reconciler.daemon import Daemon, DaemonConfig

    (watched / "api.yaml").write_text(cell("api"))
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", manifests=watched,
                                 resync_seconds=0, debounce_ms=50, prune_grace=1.5,
                                 allow_empty=True))
    seen: dict[str, float] = {}

    def deleting() -> bool | None:
        try:
            conn = sqlite3.connect(tmp_path / "state" / "state.db", timeout=5)
            try:
                row = conn.execute("SELECT deleting_at IS NOT NULL OR deleted_at IS NOT NULL "
                                   "FROM cells WHERE name = 'api'").fetchone()
            finally:
                conn.close()
        except sqlite3.OperationalError:
            return None
        return None if row is None else bool(row[0])

    def drive() -> None:
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and deleting() is None:
                time.sleep(0.05)
            time.sleep(0.5)  # the watcher is live
            (watched / "api.yaml").unlink()
            seen["unlinked"] = time.monotonic()
            while time.monotonic() < deadline and not deleting():
                if time.monotonic() - seen["unlinked"] < 1.0:
                    seen["kept at 1 s"] = float(not deleting())
                time.sleep(0.05)
            seen["pruned"] = time.monotonic()
        finally:
            daemon.stop_event.set()

    run_daemon(daemon, drive, join_s=30)
    assert seen.get("kept at 1 s") == 1.0
    assert deleting() is True
    assert 1.4 <= seen["pruned"] - seen["unlinked"] < 10, seen


def test_a_manifests_directory_replaced_under_the_daemon_prunes_nothing(
        tmp_path: Path, watched: Path) -> None:
    """`rm -rf m; mkdir m; cp ... m/` (what a checkout or a manifest generator does), with the
    copy slower than the prune grace: every cell was pruned, workspace included, and made
    again empty with a new id. Now the emptied directory holds its prunes (said once, as a
    PruneHeld event) and the refilled one settles first: same cells, same ids."""
    from devcell.reconciler.daemon import Daemon, DaemonConfig

    names = ["api", "db", "web"]
    for name in names:
        (watched / f"{name}.yaml").write_text(cell(name))
    daemon = Daemon(DaemonConfig(state_dir=tmp_path / "state", manifests=watched,
                                 resync_seconds=0, debounce_ms=50))
    state_db = tmp_path / "state" / "state.db"
    seen: dict[str, Any] = {}

    def cells() -> dict[str, tuple[str, bool]]:
        try:
            conn = sqlite3.connect(state_db, timeout=5)
            try:
                return {n: (i, bool(d)) for n, i, d in conn.execute(
                    "SELECT name, id, deleting_at IS NOT NULL OR deleted_at IS NOT NULL "
                    "FROM cells")}
            finally:
                conn.close()
        except sqlite3.OperationalError:
            return {}

    def drive() -> None:
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(cells()) < 3:
                time.sleep(0.05)
            time.sleep(0.5)  # the watcher is live
            seen["before"] = cells()
            shutil.rmtree(watched)
            watched.mkdir()
            time.sleep(1.5)  # three prune graces with nothing there
            for name in names:
                (watched / f"{name}.yaml").write_text(cell(name))
                time.sleep(0.7)  # a slow copy: longer than the grace between files
            time.sleep(3.0)  # settled
            seen["after"] = cells()
            conn = sqlite3.connect(state_db, timeout=5)
            try:
                seen["held"] = conn.execute(
                    "SELECT message FROM events WHERE reason = 'PruneHeld'").fetchall()
            finally:
                conn.close()
        finally:
            daemon.stop_event.set()

    run_daemon(daemon, drive, join_s=40)
    assert seen["before"] == {n: (seen["before"][n][0], False) for n in names}
    assert seen["after"] == seen["before"]
    assert len(seen["held"]) == 1 and "holds no manifest file" in seen["held"][0][0]
