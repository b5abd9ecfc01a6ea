"""Crash test: a writer SIGKILLed at random points while saving never leaves a corrupt snapshot.

For each kill a writer process is forked (it inherits the imported modules, so no interpreter
start-up per kill) and saves two snapshots in turn, as fast as it can, until it is killed with
SIGKILL after a random delay of up to a few saves. One of the two is 256 KiB, so kills land
while its bytes are being written and fsynced, not only between saves. While the writer runs,
the test loads concurrently; after each kill it checks that a load returns the old snapshot or
the new one, never a corrupt one, and (file store) that the temporary file the kill left
behind is removed by the next load or save.
"""

from __future__ import annotations

import os
import random
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from loguru import logger

from devcell.runs import (
    RunSnapshot,
    SnapshotStore,
    create_file_snapshot_store,
    create_sqlite_snapshot_store,
    envelope,
    file_store,
)
from tests.processes import forked
from tests.runs.helpers import make_snapshot

RUN_ID = "op_crash"
KILLS = 200  # per adapter
MAX_DELAY_S = 0.015
READY_TIMEOUT_S = 60
SMALL = make_snapshot(RUN_ID, plan_id="plan_small")
LARGE = make_snapshot(RUN_ID, plan_id="plan_large", plan=[f"{i:06d}" + "x" * 1018
                                                          for i in range(256)])
BOTH = (SMALL, LARGE)


def _writer(open_store: Callable[[], SnapshotStore], ready_fd: int, start: int) -> NoReturn:
    """The forked child: save the two snapshots in turn until killed. A save that raises
    ends it (tests.processes.forked exits 70): the parent sees it was not killed."""
    logger.remove()  # the child is killed mid-write: keep it quiet and lock-free
    store = open_store()
    os.write(ready_fd, b"!")
    i = start
    while True:
        store.save(BOTH[i % 2])
        i += 1


def _kill_writer_at_random(open_store: Callable[[], SnapshotStore], rng: random.Random,
                           during: Callable[[], None]) -> None:
    """Fork a writer, wait until it is saving, run `during` for a random time, SIGKILL it.
    The writer is killed and reaped whatever happens here (a failed check in `during`, a
    writer that died before it started): it never outlives the test."""
    ready_r, ready_w = os.pipe()
    first = rng.randrange(2)
    with forked(lambda: _writer(open_store, ready_w, first)) as writer:
        os.close(ready_w)
        try:
            # Bounded: a child forked from a session with threads can deadlock on a lock one
            # of them held at the fork (its write end is open: a bare read would never end).
            readable, _, _ = select.select([ready_r], [], [], READY_TIMEOUT_S)
            assert readable, f"the writer did not start within {READY_TIMEOUT_S} s"
            assert os.read(ready_r, 1) == b"!", "the writer died before it started"
        finally:
            os.close(ready_r)
        deadline = time.monotonic() + rng.uniform(0, MAX_DELAY_S)
        while time.monotonic() < deadline:
            during()
        status = writer.kill()
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the writer stopped by itself (status {status}): a save raised")


def _assert_old_or_new(snapshot: RunSnapshot | None) -> None:
    assert snapshot is not None
    assert snapshot in BOTH


def test_file_store_survives_sigkill_during_saves(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = create_file_snapshot_store(root=root)
    store.save(SMALL)
    run_dir = store.runs_dir / RUN_ID
    rng = random.Random(20250131)
    left_temp = concurrent_loads = 0

    def load_concurrently() -> None:
        nonlocal concurrent_loads
        _assert_old_or_new(store.load(RUN_ID))
        concurrent_loads += 1

    started = time.monotonic()
    for kill in range(KILLS):
        _kill_writer_at_random(lambda: create_file_snapshot_store(root=root), rng,
                               load_concurrently)
        stale = [n for n in os.listdir(run_dir) if file_store.is_temp_name(n)]
        assert len(stale) <= 1
        left_temp += bool(stale)
        if kill % 2 == 0:  # the next load cleans up
            _assert_old_or_new(store.load(RUN_ID))
        else:  # the file as the kill left it, then the next save cleans up
            raw = store.path_of(RUN_ID).read_bytes()
            _assert_old_or_new(envelope.decode(raw, run_id=RUN_ID, where="<crash>"))
            store.save(BOTH[kill % 4 // 2])
        assert [n for n in os.listdir(run_dir) if file_store.is_temp_name(n)] == []
        assert sorted(os.listdir(run_dir)) == ["snapshot.json"]
    elapsed = time.monotonic() - started
    print(f"file store: {KILLS} kills in {elapsed:.1f} s, {left_temp} left a temp file, "
          f"{concurrent_loads} concurrent loads")
    assert left_temp > 0, "no kill landed inside a save: the test would prove nothing"


def test_sqlite_store_survives_sigkill_during_saves(tmp_path: Path) -> None:
    db = tmp_path / "state" / "runs.db"
    store = create_sqlite_snapshot_store(path=db)
    store.save(SMALL)
    rng = random.Random(20250201)
    concurrent_loads = 0

    def load_concurrently() -> None:
        nonlocal concurrent_loads
        _assert_old_or_new(store.load(RUN_ID))
        concurrent_loads += 1

    started = time.monotonic()
    for kill in range(KILLS):
        _kill_writer_at_random(lambda: create_sqlite_snapshot_store(path=db), rng,
                               load_concurrently)
        _assert_old_or_new(store.load(RUN_ID))
        if kill % 2:
            store.save(BOTH[kill % 4 // 2])
            assert store.load(RUN_ID) == BOTH[kill % 4 // 2]
        if kill % 50 == 49:
            assert store._connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.close()
    print(f"sqlite store: {KILLS} kills in {time.monotonic() - started:.1f} s, "
          f"{concurrent_loads} concurrent loads")
