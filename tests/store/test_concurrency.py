"""Several processes writing to one state.db at once: no "database is locked", no lost update.

Each process opens its own Database (as separate `devcell` commands would) and runs many
`with db.write()` transactions, each a read-modify-write of a shared counter plus an insert.
BEGIN IMMEDIATE takes the write lock up front and the busy timeout waits for it, so every
transaction must succeed and the counts must add up exactly.
"""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path
from typing import Any

from devcell.store import migrations
from devcell.store.db import open_database

PROCESSES = 6
TRANSACTIONS = 60


def _writer(state: str, worker: int, start: Any, results: Any) -> None:
    try:
        db = open_database(Path(state))
        start.wait(30)
        for i in range(TRANSACTIONS):
            with db.write() as conn:
                (value,) = conn.execute("SELECT value FROM counter WHERE id = 1").fetchone()
                conn.execute("UPDATE counter SET value = ? WHERE id = 1", (value + 1,))
                conn.execute(
                    "INSERT INTO events (created_at, object_kind, object_name, type, reason, "
                    "message) VALUES ('t', 'Cell', ?, 'Normal', 'Concurrency', ?)",
                    (f"w{worker}", str(i)))
            # reads between writes, as `devcell get` would do
            db.execute("SELECT count(*) FROM events").fetchone()
        db.close()
        results.put((worker, "ok"))
    except BaseException:  # report everything, "database is locked" above all
        results.put((worker, traceback.format_exc()))


def _run(state: Path, prepare: bool) -> list[tuple[int, str]]:
    mp = multiprocessing.get_context("forkserver")
    if prepare:
        db = open_database(state)
        with db.write() as conn:
            conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER)")
            conn.execute("INSERT INTO counter VALUES (1, 0)")
        db.close()
    start = mp.Event()
    results = mp.Queue()
    procs = [mp.Process(target=_writer, args=(str(state), n, start, results))
             for n in range(PROCESSES)]
    try:
        for p in procs:
            p.start()
        start.set()
        outcomes = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:  # whatever happened, no writer outlives the test
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    return outcomes


def test_concurrent_writers_never_see_database_is_locked(tmp_path: Path) -> None:
    state = tmp_path / "state"
    outcomes = _run(state, prepare=True)
    failures = [text for _, text in outcomes if text != "ok"]
    assert failures == []
    db = open_database(state)
    try:
        total = PROCESSES * TRANSACTIONS
        assert db.execute("SELECT value FROM counter").fetchone()[0] == total  # no lost update
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == total
        per_worker = dict(db.execute(
            "SELECT object_name, count(*) FROM events GROUP BY object_name").fetchall())
        assert per_worker == {f"w{n}": TRANSACTIONS for n in range(PROCESSES)}
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        db.close()


def _fresh_opener(state: str, worker: int, start: Any, results: Any) -> None:
    try:
        start.wait(30)
        db = open_database(Path(state))
        with db.write() as conn:
            conn.execute(
                "INSERT INTO events (created_at, object_kind, object_name, type, reason) "
                "VALUES ('t', 'Cell', ?, 'Normal', 'FirstOpen')", (f"w{worker}",))
        db.close()
        results.put((worker, "ok"))
    except BaseException:
        results.put((worker, traceback.format_exc()))


def test_concurrent_first_open_migrates_once(tmp_path: Path) -> None:
    """Several commands racing on a state directory that does not exist yet."""
    mp = multiprocessing.get_context("forkserver")
    state = tmp_path / "state"
    start = mp.Event()
    results = mp.Queue()
    procs = [mp.Process(target=_fresh_opener, args=(str(state), n, start, results))
             for n in range(PROCESSES)]
    try:
        for p in procs:
            p.start()
        start.set()
        outcomes = [results.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
    finally:  # whatever happened, no opener outlives the test
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    assert [text for _, text in outcomes if text != "ok"] == []
    db = open_database(state)
    try:
        assert db.execute("SELECT count(*) FROM migrations").fetchone()[0] == len(
            migrations.MIGRATIONS)
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] == PROCESSES
    finally:
        db.close()
