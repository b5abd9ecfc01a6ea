"""Retention on the fake backend under a fake clock: ttl expiry, schedules, retain, forks.

The clock is the reconcile context's (Context.clock), moved by each test; records keep their
real creation time, so each test sets the clock relative to what it created.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from devcell.controllers import retention
from devcell.controllers.context import Context
from devcell.controllers.plan import Settled
from devcell.errors import ManifestError
from devcell.reconciler import reconcile
from devcell.store import desired, events, objects, operations
from devcell.store import retention as stored
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    fake,
    parse,
    record,
    snapshot_doc,
)


class Clock:
    def __init__(self) -> None:
        self.at: datetime | None = None

    def __call__(self) -> datetime:
        assert self.at is not None, "the test sets the clock first"
        return self.at


@pytest.fixture
def clock(ctx: Context) -> Clock:
    c = Clock()
    ctx.clock = c
    return c


def born(db: Database, kind: str, name: str) -> datetime:
    return retention.parse_time(record(db, kind, name).created_at)


def ttl_snapshot(name: str, cell: str, ttl: str) -> dict[str, Any]:
    doc = snapshot_doc(name, cell)
    doc["spec"]["ttl"] = ttl
    return doc


def scheduled(db: Database, cell: str) -> list[str]:
    """Names of the live snapshots the cell's schedule took, oldest first."""
    return sorted(s.name for s in stored.scheduled(db.conn, record(db, "Cell", cell).id))


def ops_of(db: Database, ref: str, kind: str) -> list[tuple[str, str, list[str]]]:
    rec = record(db, kind, ref)
    out = []
    for op in reversed(operations.for_object(db.conn, rec.id, limit=50)):
        steps = [s.name for s in operations.steps(db.conn, op["id"])]
        out.append((op["action"], op["status"], steps))
    return out


def reasons(db: Database, ref: str, kind: str = "Snapshot") -> list[str]:
    rec = record(db, kind, ref)
    return [e["reason"] for e in events.for_object(db.conn, rec.id)]


# -- ttl --------------------------------------------------------------------------------------

def test_ttl_expiry_deletes_the_snapshot_and_frees_its_checkpoint(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "1h"))
    clock.at = born(db, "Snapshot", "s1") + timedelta(seconds=1)
    converge_all(ctx)
    snap = record(db, "Snapshot", "s1")
    assert snap.phase == "Ready" and fake(ctx).checkpoint_exists(snap.id)

    clock.at = born(db, "Snapshot", "s1") + timedelta(minutes=59)
    decision = decide(ctx, "Snapshot", "s1")
    assert isinstance(decision, Settled)
    assert decision.requeue_after == pytest.approx(60.0, abs=0.01)  # wakes when it is due
    outcome = reconcile.reconcile(ctx, ("Snapshot", snap.id))
    assert outcome.result is reconcile.Result.DONE and outcome.after == pytest.approx(60, abs=0.01)
    converge_all(ctx, [])
    assert objects.get(db.conn, "Snapshot", "s1") is not None

    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=1)
    report = converge_all(ctx, [])  # nothing asked for: retention's due work alone
    assert ("Snapshot", snap.id) in report.settled
    assert objects.get(db.conn, "Snapshot", "s1") is None
    gone = record(db, "Snapshot", snap.id)
    assert gone.phase == objects.Phase.EXPIRED and gone.deleted_at is not None
    assert gone.status["expired"]["reason"] == "TTLExpired"
    assert not fake(ctx).checkpoint_exists(snap.id)
    assert [o for o in ops_of(db, snap.id, "Snapshot") if o[0] != "checkpoint"] == [
        ("expire", "Succeeded", ["expire"]), ("delete", "Succeeded", ["delete-checkpoint"])]
    assert {"Expired", "ExpiredDeleted"} <= set(reasons(db, snap.id))


def test_an_expired_snapshot_is_not_taken_again_by_the_next_apply(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "30m"))
    expired_id = record(db, "Snapshot", "s1").id
    clock.at = born(db, "Snapshot", "s1") + timedelta(minutes=30)
    converge_all(ctx)  # taken, then expired at once: its ttl has run out
    assert objects.get(db.conn, "Snapshot", "s1") is None

    result = apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "30m"))
    assert [(c.name, c.outcome) for c in result.changes] == [("a", "unchanged"),
                                                             ("s1", "expired")]
    assert not result.to_reconcile
    rows = db.conn.execute("SELECT id, phase FROM snapshots WHERE name = 's1'").fetchall()
    assert [tuple(r) for r in rows] == [(expired_id, "Expired")]
    assert stored.expired_named(db.conn, "s1") is not None
    # a fork of it is refused with the reason, naming the field
    with pytest.raises(ManifestError, match="expired"):
        apply(db, cell_doc("f", fork_of="s1"))


def test_a_snapshot_a_fork_depends_on_survives_its_ttl(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "1h"), cell_doc("f", fork_of="s1"))
    clock.at = born(db, "Snapshot", "s1") + timedelta(seconds=1)
    converge_all(ctx)
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=2)
    converge_all(ctx, [])
    converge_all(ctx, [])  # judged again: said once
    snap = record(db, "Snapshot", "s1")
    assert snap.deleted_at is None and snap.phase == "Ready"
    assert fake(ctx).checkpoint_exists(snap.id)
    cond = snap.condition("Expired")
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "ForkDependsOnIt"
    assert "f" in cond["message"]
    assert reasons(db, "s1").count("ExpiryDeferred") == 1
    # The fork goes: the snapshot expires in the same converge.
    desired.delete(db, "Cell", "f")
    report = converge_all(ctx, [("Cell", record(db, "Cell", "f").id)])
    assert ("Snapshot", snap.id) in report.settled
    assert record(db, "Snapshot", snap.id).phase == objects.Phase.EXPIRED
    assert not fake(ctx).checkpoint_exists(snap.id)


def test_the_expire_step_judges_again_and_keeps_a_snapshot_a_fork_came_to_need(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "1h"))
    clock.at = born(db, "Snapshot", "s1") + timedelta(seconds=1)
    converge_all(ctx)
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=1)
    snap = record(db, "Snapshot", "s1")
    apply(db, cell_doc("f", fork_of="s1"))  # between the plan and the step's write
    with db.write() as conn:
        assert retention.expire(conn, snap.id, clock.at).startswith("kept: cells forked")
    assert record(db, "Snapshot", "s1").deleting_at is None


def test_ttl_may_change_but_the_cell_may_not(ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), cell_doc("b"), ttl_snapshot("s1", "a", "1h"))
    clock.at = born(db, "Snapshot", "s1")
    converge_all(ctx)
    result = apply(db, ttl_snapshot("s1", "a", "2d"))
    assert result.changes[0].outcome == "configured"
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=3)
    converge_all(ctx, [])
    assert objects.get(db.conn, "Snapshot", "s1") is not None  # the new ttl holds
    with pytest.raises(ManifestError, match="cell is immutable"):
        apply(db, ttl_snapshot("s1", "b", "2d"))


@pytest.mark.parametrize("bad", ["0h", "1.5h", "10x", "1h30m", "-1d", "7", "1234567d", "1H"])
def test_a_bad_duration_is_refused_with_file_line_and_field(bad: str) -> None:
    with pytest.raises(AssertionError, match=r"test.yaml:\d+:\d+: Snapshot \"s1\": spec.ttl"):
        parse(ttl_snapshot("s1", "a", bad))
    with pytest.raises(AssertionError, match=r"spec.snapshots.every"):
        parse(cell_doc("a", snapshots={"every": bad}))


# -- schedules --------------------------------------------------------------------------------

def test_the_schedule_takes_snapshots_at_the_right_times(
        ctx: Context, db: Database, clock: Clock) -> None:
    owned = cell_doc("a", snapshots={"every": "1h"})
    owned["metadata"]["owner"] = "ana"
    apply(db, owned)
    t0 = born(db, "Cell", "a")
    cell_key = ("Cell", record(db, "Cell", "a").id)
    clock.at = t0 + timedelta(minutes=30)
    converge_all(ctx)
    assert scheduled(db, "a") == []
    outcome = reconcile.reconcile(ctx, cell_key)  # settled: wake at the next period
    assert outcome.result is reconcile.Result.DONE
    assert outcome.after == pytest.approx(30 * 60, abs=0.01)

    clock.at = t0 + timedelta(hours=1, seconds=5)
    converge_all(ctx, [cell_key])
    first = retention.scheduled_name("a", cell_key[1], t0 + timedelta(hours=1))
    assert scheduled(db, "a") == [first]
    snap = record(db, "Snapshot", first)
    assert snap.phase == "Ready" and fake(ctx).checkpoint_exists(snap.id)
    assert snap.labels == {stored.SCHEDULED_LABEL: "a"}
    assert snap.extra["owner"] == "ana"  # the cell's owner's, not the daemon's
    assert first.startswith("a-auto-") and len(first) == len("a-auto-20260101-000000")
    assert ("schedule", "Succeeded", ["schedule-snapshot"]) in ops_of(db, "a", "Cell")

    clock.at = t0 + timedelta(hours=1, minutes=59)
    converge_all(ctx, [cell_key])
    assert scheduled(db, "a") == [first]
    outcome = reconcile.reconcile(ctx, cell_key)
    assert outcome.after == pytest.approx(60, abs=0.01)

    # Down for four periods: one snapshot, of the latest period, not a burst.
    clock.at = t0 + timedelta(hours=5, minutes=10)
    converge_all(ctx, [cell_key])
    latest = retention.scheduled_name("a", cell_key[1], t0 + timedelta(hours=5))
    assert scheduled(db, "a") == sorted([first, latest])
    converge_all(ctx, [cell_key])
    assert len(scheduled(db, "a")) == 2


def test_a_period_is_never_taken_twice(ctx: Context, db: Database, clock: Clock) -> None:
    """A replayed schedule step (a crash after its write) and a scheduled snapshot deleted by
    hand both leave the period taken."""
    apply(db, cell_doc("a", snapshots={"every": "1h"}))
    t0 = born(db, "Cell", "a")
    cell = record(db, "Cell", "a")
    clock.at = t0 + timedelta(hours=1)
    converge_all(ctx)
    (name,) = scheduled(db, "a")
    with db.write() as conn:
        assert retention.schedule(conn, cell.id, name, retention.stamp(clock.at)) == ""
    desired.delete(db, "Snapshot", name)
    converge_all(ctx, [("Snapshot", record(db, "Snapshot", name).id)])
    converge_all(ctx, [("Cell", cell.id)])
    assert scheduled(db, "a") == []
    assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 1


def test_a_stopped_cell_takes_no_scheduled_snapshot(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a", "Stopped", snapshots={"every": "1h"}))
    clock.at = born(db, "Cell", "a") + timedelta(hours=3)
    converge_all(ctx)
    assert scheduled(db, "a") == []


def test_long_cell_names_give_distinct_valid_names() -> None:
    slot = datetime(2026, 1, 2, 3, 4, 5).astimezone()
    a = retention.scheduled_name("x" * 63, "cell_1", slot)
    b = retention.scheduled_name("x" * 63, "cell_2", slot)
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert a.endswith(f"-auto-{slot.astimezone(retention.UTC):%Y%m%d-%H%M%S}")
    parse(snapshot_doc(a, "x"))  # a DNS-1123 label the schema accepts


# -- retain -----------------------------------------------------------------------------------

def test_retain_keeps_exactly_the_newest_n_scheduled(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a", snapshots={"every": "1h", "retain": 2}), snapshot_doc("manual", "a"))
    t0 = born(db, "Cell", "a")
    cell_key = ("Cell", record(db, "Cell", "a").id)
    clock.at = t0
    converge_all(ctx)
    taken: list[str] = []
    for hour in range(1, 6):
        clock.at = t0 + timedelta(hours=hour, seconds=1)
        converge_all(ctx, [cell_key])
        taken.append(retention.scheduled_name("a", cell_key[1], t0 + timedelta(hours=hour)))
        assert scheduled(db, "a") == sorted(taken[-2:])
    for name in taken[:-2]:
        gone = stored.expired_named(db.conn, name)
        assert gone is not None and gone.phase == objects.Phase.EXPIRED
        assert gone.status["expired"]["reason"] == "RetainExceeded"
        assert not fake(ctx).checkpoint_exists(gone.id)
    assert record(db, "Snapshot", "manual").phase == "Ready"  # declared by hand: never
    assert ("retain", "Succeeded", ["expire"]) in ops_of(db, "a", "Cell")
    # Lowering retain expires more; an inline converge of nothing applies it.
    apply(db, cell_doc("a", snapshots={"every": "1h", "retain": 1}), snapshot_doc("manual", "a"))
    converge_all(ctx, [])
    assert scheduled(db, "a") == taken[-1:]


def test_retain_keeps_a_scheduled_snapshot_a_fork_depends_on(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a", snapshots={"every": "1h", "retain": 1}))
    t0 = born(db, "Cell", "a")
    cell_key = ("Cell", record(db, "Cell", "a").id)
    clock.at = t0 + timedelta(hours=1)
    converge_all(ctx, [cell_key])
    (oldest,) = scheduled(db, "a")
    apply(db, cell_doc("f", fork_of=oldest))
    converge_all(ctx)
    clock.at = t0 + timedelta(hours=2)
    converge_all(ctx, [cell_key])
    assert oldest in scheduled(db, "a") and len(scheduled(db, "a")) == 2
    cond = record(db, "Snapshot", oldest).condition("Expired")
    assert cond is not None and cond["reason"] == "ForkDependsOnIt"
    desired.delete(db, "Cell", "f")
    converge_all(ctx, [("Cell", record(db, "Cell", "f").id)])
    assert oldest not in scheduled(db, "a") and len(scheduled(db, "a")) == 1
    assert stored.expired_named(db.conn, oldest) is not None


def test_extending_the_ttl_of_a_kept_snapshot_clears_its_condition(
        ctx: Context, db: Database, clock: Clock) -> None:
    apply(db, cell_doc("a"), ttl_snapshot("s1", "a", "1h"), cell_doc("f", fork_of="s1"))
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=2)
    converge_all(ctx)
    assert record(db, "Snapshot", "s1").condition("Expired") is not None
    apply(db, ttl_snapshot("s1", "a", "7d"))
    converge_all(ctx)
    snap = record(db, "Snapshot", "s1")
    assert snap.condition("Expired") is None and snap.phase == "Ready"
    assert snap.observed_generation == snap.generation == 2


def test_snapshot_create_with_a_ttl_and_again_under_an_expired_name(
        ctx: Context, db: Database, clock: Clock) -> None:
    from devcell.api import cells
    from devcell.errors import UsageError

    state = db.state_dir
    apply(db, cell_doc("a"))
    clock.at = born(db, "Cell", "a")
    converge_all(ctx)
    with pytest.raises(UsageError, match="--ttl"):
        cells.snapshot(state, "a", name="bad", ttl="soon")
    assert cells.snapshot(state, "a", name="s1", ttl="1h").ok
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=1)
    converge_all(ctx, [])
    assert stored.expired_named(db.conn, "s1") is not None
    # Asked for by hand now: taken again (a manifest's would not be).
    again = cells.snapshot(state, "a", name="s1")
    assert [c.outcome for c in again.recorded.changes] == ["created"] and again.ok
    assert record(db, "Snapshot", "s1").phase == "Ready"


def test_dry_run_and_diff_say_an_expired_snapshot_is_not_taken_again(
        ctx: Context, db: Database, clock: Clock, tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    docs = tmp_path / "m.yaml"
    docs.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: a}\n"
                    "spec: {backend: fake}\n---\napiVersion: devcell.dev/v1alpha1\n"
                    "kind: Snapshot\nmetadata: {name: s1}\nspec: {cell: a, ttl: 1h}\n")

    def devcell(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                              text=True, cwd=REPO, env={"DEVCELL_HOME": str(db.state_dir),
                                                        "PATH": "/usr/bin:/bin"})

    assert devcell("apply", "-f", str(docs)).returncode == 0
    clock.at = born(db, "Snapshot", "s1") + timedelta(hours=1)
    converge_all(ctx, [])
    assert stored.expired_named(db.conn, "s1") is not None
    dry = devcell("apply", "-f", str(docs), "--dry-run")
    assert dry.returncode == 0 and "snapshot/s1 expired (dry run)" in dry.stdout
    diff = devcell("diff", "-f", str(docs))
    assert (diff.returncode, diff.stdout) == (0, "")
    listed = devcell("get", "snapshots")
    assert listed.stdout.splitlines()[1].split()[:4] == ["s1", "a", "metadata", "Expired"]


def test_an_expiry_the_backend_cannot_finish_is_not_the_commands_failure(
        db: Database, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`apply` of something else still succeeds; the expiry is said, and finished later."""
    import time

    from devcell.api import apply as api

    state = db.state_dir
    (tmp_path / "a.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: a}\nspec: {backend: fake}\n"
        "---\napiVersion: devcell.dev/v1alpha1\nkind: Snapshot\nmetadata: {name: s1}\n"
        "spec: {cell: a, ttl: 1s}\n")
    (tmp_path / "b.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: b}\nspec: {backend: fake}\n")
    assert api.apply(state, [str(tmp_path / "a.yaml")]).ok
    snap = record(db, "Snapshot", "s1")
    time.sleep(max(0.0, (born(db, "Snapshot", "s1") + timedelta(seconds=1.05)
                         - datetime.now(retention.UTC)).total_seconds()))
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "delete_checkpoint")
    report = api.apply(state, [str(tmp_path / "b.yaml")])
    assert report.ok, report.converged.problems
    (pending,) = report.converged.retention_pending
    assert (pending.kind, pending.name) == ("Snapshot", "s1") and pending.message
    assert record(db, "Snapshot", snap.id).deleting_at is not None  # expiry recorded
    monkeypatch.delenv("DEVCELL_FAKE_FAIL")
    again = api.apply(state, [str(tmp_path / "b.yaml")])
    assert again.ok and again.converged.expired == ("s1",)
    assert record(db, "Snapshot", snap.id).phase == objects.Phase.EXPIRED
