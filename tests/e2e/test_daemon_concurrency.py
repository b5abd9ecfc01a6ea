"""Four `devcell apply` processes at once while a daemon runs on the same state directory.

Each of 4 streams runs ROUNDS applies in sequence (so 4 apply processes are alive at once;
the first rounds with --no-wait, so the writes collide, the last ones waiting for Ready),
each apply carrying a spec change to the stream's own cells, a spec change to one cell every
stream edits ("hot", a different file per stream), the same shared files for every stream, and
one file of the daemon's watched directory. Then:

- every apply returns 0 and no "database is locked" (or traceback) reaches any stderr, nor
  the daemon's log;
- no lost update: "hot" received 4 x ROUNDS distinct specs, so its generation is exactly
  4 x ROUNDS, and its recorded spec is the last apply of the stream its source names;
- generations match the accepted spec changes of every object; a shared object is created
  exactly once;
- a write based on a stale resourceVersion gets a Conflict that says so (in-process).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_crash_matrix import (
    CMD_TIMEOUT,
    PY,
    REPO,
    Daemon,
    World,
    cell_doc,
    daemon_log_clean,
    devcell_env,
    procs,  # noqa: F401  (fixture)
    settled,
)

STREAMS = 4
ROUNDS = 6
WAITING = 2  # the last rounds wait for Ready (the default); the others use --no-wait
OWN = 2  # cells per stream

pytestmark = pytest.mark.e2e


def marked_cell(name: str, mark: str) -> str:
    doc = yaml.safe_load(cell_doc(name))
    doc["spec"]["env"] = [{"name": "MARK", "value": mark}]
    return yaml.safe_dump(doc, sort_keys=False)


def test_four_applies_at_once_while_a_daemon_runs(
        tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> None:  # noqa: F811
    world = World(tmp_path, tmp_path / "m")
    watched = tmp_path / "watched"
    watched.mkdir()
    for n in ("w0", "w1"):
        (watched / f"{n}.yaml").write_text(cell_doc(n))
    # create state.db and backends/fake.db first (inline), so the daemon's workers do not
    # race to create fake.db (FAKE_WAL_RACE, pinned by its own test below)
    world.apply(watched)
    shared = tmp_path / "shared"
    shared.mkdir()
    for n in ("s0", "s1"):
        (shared / f"{n}.yaml").write_text(cell_doc(n))
    # --resync 1s: an out-of-band apply is only noticed by the resync (see
    # test_daemon_newcomer.APPLY_NOT_NOTICED); the applies below wait for Ready
    daemon = Daemon(world, procs, watched, args=("--resync", "1s"))
    daemon.wait_started()

    results: dict[tuple[int, int], subprocess.CompletedProcess[str]] = {}
    errors: list[str] = []

    def stream(i: int) -> None:
        own = tmp_path / f"p{i}"
        own.mkdir()
        try:
            for r in range(ROUNDS):
                for k in range(OWN):
                    (own / f"u{i}-{k}.yaml").write_text(marked_cell(f"u{i}-{k}", f"{i}-{r}"))
                (own / "hot.yaml").write_text(marked_cell("hot", f"{i}-{r}"))
                wait = "--wait" if r >= ROUNDS - WAITING else "--no-wait"
                results[(i, r)] = subprocess.run(
                    [PY, "-m", "devcell", "apply", "-f", str(own), "-f", str(shared),
                     "-f", str(watched / "w0.yaml"), "--timeout", "60s", wait],
                    capture_output=True, text=True, env=devcell_env(world.state), cwd=REPO,
                    timeout=CMD_TIMEOUT + 30)
        except Exception as exc:  # reported below, never lost in a thread
            errors.append(f"stream {i}: {exc!r}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CMD_TIMEOUT * ROUNDS)
    elapsed = time.monotonic() - t0
    assert not errors, errors
    assert len(results) == STREAMS * ROUNDS

    outcomes: Counter[tuple[str, str]] = Counter()
    for (i, r), proc in sorted(results.items()):
        assert proc.returncode == 0, f"stream {i} round {r}: {proc.stderr}"
        assert "database is locked" not in proc.stderr + proc.stdout, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        lines = dict(line.rsplit(" ", 1) for line in proc.stdout.splitlines())
        for k in range(OWN):
            assert lines[f"cell/u{i}-{k}"] == ("created" if r == 0 else "configured"), proc.stdout
        assert lines["cell/hot"] in ("created", "configured"), proc.stdout
        for name, outcome in lines.items():
            outcomes[(name, outcome)] += 1

    # accepted spec changes -> generations (hot: every apply carried a new spec)
    hot_changes = outcomes[("cell/hot", "created")] + outcomes[("cell/hot", "configured")]
    assert hot_changes == STREAMS * ROUNDS
    assert outcomes[("cell/hot", "created")] == 1
    for n in ("s0", "s1"):
        assert outcomes[(f"cell/{n}", "created")] == 1, outcomes
        assert outcomes[(f"cell/{n}", "unchanged")] == STREAMS * ROUNDS - 1, outcomes
    assert outcomes[("cell/w0", "unchanged")] == STREAMS * ROUNDS

    with world.db() as conn:
        rows = {r["name"]: r for r in conn.execute(
            "SELECT name, generation, observed_generation, spec, source, phase FROM cells "
            "WHERE deleted_at IS NULL")}
    expected = {"hot": STREAMS * ROUNDS, "s0": 1, "s1": 1, "w0": 1, "w1": 1}
    expected.update({f"u{i}-{k}": ROUNDS for i in range(STREAMS) for k in range(OWN)})
    assert {n: r["generation"] for n, r in rows.items()} == expected
    hot = rows["hot"]
    writer = Path(hot["source"]).parent.name  # p<i>: the stream whose apply committed last
    mark = json.loads(hot["spec"])["env"][0]["value"]
    assert mark == f"{writer[1:]}-{ROUNDS - 1}", (writer, mark)

    # the daemon converges all of it; its log is clean (strictly: fake.db existed already)
    for name, row in rows.items():
        world.accepted[("Cell", name)] = {"spec": json.loads(row["spec"]),
                                          "generation": expected[name]}
    daemon.wait_for("everything converged", lambda: settled(world))
    assert daemon.terminate() == 0
    daemon_log_clean(daemon.text())
    world.exact_calls = False
    world.check_all()
    print(f"\n{STREAMS} streams x {ROUNDS} applies with a daemon running: {elapsed:.1f} s")


def test_stale_write_gets_a_conflict_that_says_so(tmp_path: Path) -> None:
    from devcell.errors import Conflict
    from devcell.store import objects
    from devcell.store.db import Database

    state = tmp_path / "state"
    first, second = Database(state), Database(state)  # as two processes would
    try:
        spec = {"backend": "fake", "state": "Running"}
        with first.write() as conn:
            objects.insert(conn, kind="Cell", name="api", spec=spec, labels={}, annotations={},
                           spec_hash="h1", manifest_hash="m1", source=None,
                           extra={"backend": "fake"})
        mine = objects.require(first.conn, "Cell", "api")
        theirs = objects.require(second.conn, "Cell", "api")
        with second.write() as conn:
            objects.update_desired(conn, theirs, spec=dict(spec, state="Stopped"), labels={},
                                   annotations={}, spec_hash="h2", manifest_hash="m2",
                                   source=None)
        with pytest.raises(Conflict) as caught, first.write() as conn:
            objects.update_desired(conn, mine, spec=dict(spec, state="Sleeping"), labels={},
                                   annotations={}, spec_hash="h3", manifest_hash="m3",
                                   source=None)
        message = str(caught.value)
        assert 'cell "api" was modified by someone else' in message
        assert f"resourceVersion {mine.resource_version} is stale" in message
        assert "re-read and retry" in message
        fresh = objects.require(first.conn, "Cell", "api")
        assert (fresh.spec["state"], fresh.generation, fresh.resource_version) == ("Stopped", 2, 2)
    finally:
        first.close()
        second.close()


def test_fake_backend_open_waits_for_a_busy_new_database(tmp_path: Path) -> None:
    """Deterministic form of the race the daemon's workers hit on a fresh state directory:
    while another connection holds a lock on a fake.db that is not in WAL mode yet, opening
    the backend must wait (as the store's `_ensure_wal` does), not fail at once."""
    from devcell.backends.fake import FakeBackend

    directory = tmp_path / "state" / "backends"
    directory.mkdir(parents=True)
    holder = sqlite3.connect(directory / "fake.db", isolation_level=None,
                             check_same_thread=False)
    holder.execute("CREATE TABLE warmup (x)")
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO warmup VALUES (1)")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        FakeBackend(state_dir=tmp_path / "state").close()
    finally:
        release.join()
        holder.close()



RUN_STORE_DROPS_LOCKS = (
    "BUG (data loss): SqliteSnapshotStore._connection() (devcell/runs/sqlite_store.py) runs "
    "os.close(os.open(state.db)) in a process that already has SQLite connections open on "
    "state.db; closing any descriptor of a file drops every POSIX lock the process holds on it, "
    "so the next process that closes its own connection (a `devcell get`) believes it is the "
    "last one, checkpoints and deletes state.db-wal, and later commits of the daemon go to the "
    "deleted WAL: nobody else ever sees them. Seen as: after SIGTERM (operations suspended) and "
    "a restart while `devcell get` polls, a cell's resumed or new operation stays Running at its "
    "first step for ever, though the backend calls of all its steps were made")


def test_writes_after_opening_the_run_store_survive_a_reader_closing(tmp_path: Path) -> None:
    from devcell.runs import open_store as open_run_store
    from devcell.store import events, operations
    from devcell.store.db import Database

    state = tmp_path / "state"
    db = Database(state)
    store = None

    def count_in_another_process() -> int:
        out = subprocess.run(
            [PY, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "print(c.execute('SELECT count(*) FROM events').fetchone()[0]); c.close()",
             str(state / "state.db")], capture_output=True, text=True, check=True, timeout=30)
        return int(out.stdout)

    try:
        with db.write() as conn:
            events.record(conn, kind="Cell", object_id=None, name="x", reason="Before", message="")
        store = open_run_store(state, "sqlite")  # as a daemon worker does to resume an operation
        assert store.load(operations.new_operation_id()) is None
        assert count_in_another_process() == 1  # e.g. `devcell get`: opens, reads, closes
        with db.write() as conn:
            events.record(conn, kind="Cell", object_id=None, name="x", reason="After", message="")
        assert db.conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2
        assert count_in_another_process() == 2, "the commit is lost for every other process"
    finally:
        if store is not None:
            store.close()
        db.close()
