"""Inline convergence: rounds until every object is settled, failed or waiting."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest

from devcell.controllers.context import Context
from devcell.reconciler.converge import converge
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    fake,
    live_keys,
    op_count,
    record,
    snapshot_doc,
)


def chain(depth: int) -> list[dict[str, Any]]:
    docs = [cell_doc("c0")]
    for i in range(depth):
        docs += [snapshot_doc(f"s{i}", f"c{i}"), cell_doc(f"c{i + 1}", fork_of=f"s{i}")]
    return docs


def test_dependencies_resolve_within_one_converge_whatever_the_key_order(
        db: Database, ctx: Context) -> None:
    result = apply(db, *chain(4))
    keys = list(reversed(result.to_reconcile))  # worst case: dependents first
    report = converge(ctx, keys)
    assert report.ok, report
    assert sorted(report.settled) == sorted(keys)
    assert len(report.operations) == len(keys) == 9
    assert {record(db, "Cell", f"c{i}").phase for i in range(5)} == {"Running"}
    assert {record(db, "Snapshot", f"s{i}").phase for i in range(4)} == {"Ready"}


def test_waiting_objects_are_reported_and_not_ok(db: Database, ctx: Context) -> None:
    result = apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"),
                   cell_doc("exp", fork_of="snap"))
    report = converge(ctx, result.to_reconcile)
    assert not report.ok
    snap, fork = record(db, "Snapshot", "snap"), record(db, "Cell", "exp")
    assert set(report.waiting) == {("Snapshot", snap.id), ("Cell", fork.id)}
    assert "waits until it is Running" in report.waiting[("Snapshot", snap.id)]
    assert "waits until it is Ready" in report.waiting[("Cell", fork.id)]
    assert report.settled == [("Cell", record(db, "Cell", "api").id)]
    assert report.failed == {}


def test_duplicate_keys_are_reconciled_once(db: Database, ctx: Context) -> None:
    result = apply(db, cell_doc("api"))
    report = converge(ctx, result.to_reconcile * 3)
    assert report.ok and len(report.operations) == 1
    assert op_count(db) == 1


def test_no_time_left_means_nothing_is_done(db: Database, ctx: Context) -> None:
    result = apply(db, cell_doc("api"))
    report = converge(ctx, result.to_reconcile, timeout=-1)
    assert report.operations == [] and op_count(db) == 0
    assert report.waiting == {result.to_reconcile[0]: "did not settle within the time allowed"}
    assert record(db, "Cell", "api").phase == "Pending"


def test_reconcile_lock_file_is_private(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    lock = db.state_dir / "reconcile.lock"
    assert lock.exists()
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_an_inline_converge_that_meets_a_daemon_does_nothing(db: Database, ctx: Context
                                                             ) -> None:
    """A command looks for a daemon, finds none and converges inline; a daemon starting in
    between recovers under the reconcile lock, then runs its workers, which take no lock.
    Once the command holds the lock it looks again: a daemon's lease, and it leaves the
    objects to that daemon (waiting, saying why) instead of executing beside it."""
    from devcell.reconciler import converge as engine
    from devcell.reconciler import lease

    apply(db, cell_doc("api"))
    with pytest.MonkeyPatch.context() as patch:  # another process's lease (its pid)
        patch.setattr(lease, "current_holder", lambda state_dir: lease.Holder(
            os.getpid() + 1, "here", "now", None))
        report = converge_all(ctx)
    assert report.waiting == {key: engine.DAEMON_STARTED for key in live_keys(db)}
    assert op_count(db) == 0
    with lease.Lease(db.state_dir):  # this process's own: it is that daemon (tests stand in)
        assert converge_all(ctx).ok and op_count(db) == 1


def test_converging_settled_objects_records_nothing(db: Database, ctx: Context) -> None:
    apply(db, *chain(2))
    assert converge_all(ctx).ok
    ops = op_count(db)
    report = converge_all(ctx)
    assert report.ok and report.operations == []
    assert sorted(report.settled) == sorted(live_keys(db))
    assert op_count(db) == ops


def test_long_chain_listed_dependents_first_converges(db: Database, ctx: Context) -> None:
    """Regression: converge used to stop after 20 rounds although every round progressed."""
    docs = chain(10)
    docs[0] = cell_doc("c0", "Stopped")  # nothing can be taken yet: every fork waits
    apply(db, *reversed(docs))
    converge_all(ctx)
    docs[0] = cell_doc("c0", "Running")
    result = apply(db, *reversed(docs))  # as `devcell apply` of a file in that order
    report = converge(ctx, result.to_reconcile, timeout=300)
    assert report.waiting == {}
    assert report.ok


def test_parallel_rounds_reach_the_same_state_as_sequential_ones(
        db: Database, ctx: Context) -> None:
    """Workers > 1: every object settles, each operation once, each backend call once."""
    docs = chain(3) + [cell_doc(f"solo{i}") for i in range(12)]
    result = apply(db, *docs)
    keys = list(reversed(result.to_reconcile))
    report = converge(ctx, keys, workers=4)
    assert report.ok, report
    assert sorted(report.settled) == sorted(keys)
    assert len(report.operations) == len(set(report.operations)) == len(keys) == 19
    assert op_count(db) == 19
    calls = fake(ctx).calls()
    creates = [target for method, target, _ in calls if method == "create"]
    assert len(creates) == len(set(creates)) == 16  # 4 chain cells + 12 solo cells, once each
    again = converge(ctx, keys, workers=4)
    assert again.ok and again.operations == [] and op_count(db) == 19


def test_parallel_rounds_run_on_several_threads(db: Database, ctx: Context,
                                                monkeypatch: Any) -> None:
    import threading

    from devcell.controllers.cell import CellController

    seen: set[str] = set()
    barrier = threading.Barrier(3, timeout=10)
    original = CellController.decide

    def decide(self: CellController, c: Context, object_id: str) -> Any:
        seen.add(threading.current_thread().name)
        if len(seen) <= 3 and c is not ctx:
            try:
                barrier.wait()  # proves three turns run at the same time
            except threading.BrokenBarrierError:
                pass
        return original(self, c, object_id)

    monkeypatch.setattr(CellController, "decide", decide)
    result = apply(db, *[cell_doc(f"c{i}") for i in range(6)])
    report = converge(ctx, result.to_reconcile, workers=3)
    assert report.ok, report
    assert not barrier.broken
    assert len({name for name in seen if name.startswith("converge")}) == 3


def test_parallelism_follows_the_backends_capabilities(db: Database, ctx: Context) -> None:
    from devcell.reconciler.converge import parallelism

    result = apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    assert parallelism(db, result.to_reconcile) == 1  # the fake backend: CPU bound
    assert parallelism(db, []) == 1
    from devcell.backends.container.backend import ContainerBackend
    assert ContainerBackend.capabilities.parallel > 1


def test_a_failure_in_one_parallel_turn_does_not_stop_the_others(
        db: Database, ctx: Context, monkeypatch: Any) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "start@bad")
    result = apply(db, cell_doc("bad"), *[cell_doc(f"ok{i}") for i in range(5)])
    report = converge(ctx, result.to_reconcile, workers=4)
    bad = ("Cell", record(db, "Cell", "bad").id)
    assert set(report.failed) == {bad}
    assert len(report.settled) == 5


def test_a_cell_and_its_snapshots_never_run_at_the_same_time(
        db: Database, ctx: Context, monkeypatch: Any) -> None:
    """A snapshot quiesces its cell; the cell's own turn must not repair that meanwhile."""
    from tests.reconciler.overlap import watch_overlaps

    watch = watch_overlaps(monkeypatch)
    docs = []
    for i in range(3):
        docs += [cell_doc(f"c{i}"), snapshot_doc(f"s{i}a", f"c{i}"), snapshot_doc(f"s{i}b", f"c{i}")]
    result = apply(db, *docs)
    report = converge(ctx, list(reversed(result.to_reconcile)), workers=6)
    assert report.ok, report
    assert watch.overlaps == []


def test_groups_put_a_cells_snapshots_with_it_cell_first(db: Database) -> None:
    from devcell.reconciler.reconcile import groups as _groups

    result = apply(db, cell_doc("a"), snapshot_doc("sa", "a"), cell_doc("b"))
    keys = list(reversed(result.to_reconcile))  # b, sa, a
    groups = _groups(db.conn, keys)
    a, b = record(db, "Cell", "a").id, record(db, "Cell", "b").id
    sa = record(db, "Snapshot", "sa").id
    assert groups == [[("Cell", b)], [("Cell", a), ("Snapshot", sa)]]
