"""Idle sleep on the fake backend under a fake clock: the deadline, what keeps a cell awake
(an open session; a closed one lets it sleep), `never`, the configuration's default, and the
event and reason a sleep leaves.

The clock is the reconcile context's; activity keeps its real time (file mtimes), so each test
sets the clock relative to what it recorded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devcell.controllers import idle
from devcell.controllers.context import Context
from devcell.controllers.plan import Plan, Settled
from devcell.store import activity, events, objects
from devcell.store.db import Database
from tests.controllers.support import apply, cell_doc, converge_all, decide, record


class Clock:
    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.at


@pytest.fixture
def clock(ctx: Context) -> Clock:
    c = Clock()
    ctx.clock = c
    return c


def running_cell(ctx: Context, sleep_after: str = "30s", name: str = "api") -> datetime:
    """A converged running cell with an idle timeout; when it came up."""
    apply(ctx.db, cell_doc(name, idle={"sleepAfter": sleep_after}))
    converge_all(ctx)
    return idle.started(record(ctx.db, "Cell", name)).at


def reasons(db: Database, name: str) -> list[str]:
    return [e["reason"] for e in events.for_object(db.conn, record(db, "Cell", name).id)]


def idle_event(db: Database, name: str) -> str:
    found = [e["message"] for e in events.for_object(db.conn, record(db, "Cell", name).id)
             if e["reason"] == "IdleSleep"]
    assert found, reasons(db, name)
    return str(found[-1])


def test_a_cell_nobody_uses_sleeps_at_its_deadline(ctx: Context, clock: Clock) -> None:
    up = running_cell(ctx)
    clock.at = up + timedelta(seconds=10)
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Settled)
    assert decision.requeue_after == pytest.approx(20, abs=1)  # asks to be judged at 30 s
    clock.at = up + timedelta(seconds=31)
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Plan) and decision.action == "sleep"
    assert idle_event(ctx.db, "api").startswith("idle for 30s: last activity cell started at ")
    converge_all(ctx)
    assert record(ctx.db, "Cell", "api").phase == "Sleeping"


def test_an_open_session_keeps_it_awake_and_its_close_lets_it_sleep(
        ctx: Context, clock: Clock) -> None:
    up = running_cell(ctx)
    cell_id = record(ctx.db, "Cell", "api").id
    session = activity.Session(ctx.db.state_dir, cell_id, "ssh")
    clock.at = up + timedelta(hours=2)
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Settled), decision  # open for two hours: still awake
    assert decision.requeue_after is not None and decision.requeue_after <= idle.RECHECK_BUSY
    judged = idle.check(record(ctx.db, "Cell", "api"), Path(ctx.db.state_dir),
                        desired="Running", running=True, now=clock.at)
    assert judged is not None and judged.describe().startswith("active: ssh session since ")
    session.close()
    closed = activity.seen(ctx.db.state_dir, cell_id).last
    assert closed is not None and closed.what == "ssh session closed"
    clock.at = closed.at + timedelta(seconds=29)
    assert isinstance(decide(ctx, "Cell", "api"), Settled)
    clock.at = closed.at + timedelta(seconds=30)
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Plan) and decision.action == "sleep"
    assert "last activity ssh session closed at " in idle_event(ctx.db, "api")


def test_a_session_whose_process_is_gone_is_closed(ctx: Context, clock: Clock) -> None:
    up = running_cell(ctx)
    cell_id = record(ctx.db, "Cell", "api").id
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    directory = Path(ctx.db.state_dir) / activity.DIRECTORY / cell_id
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{activity.OPEN}{dead.pid}.exec").write_text("exec session")
    seen = activity.seen(ctx.db.state_dir, cell_id)
    assert seen.open == ()
    assert seen.last is not None and "exec session ended" in seen.last.what
    assert not (directory / f"{activity.OPEN}{dead.pid}.exec").exists()
    clock.at = max(up, seen.last.at) + timedelta(seconds=31)
    assert isinstance(decide(ctx, "Cell", "api"), Plan)


def test_describe_says_how_long_and_when(ctx: Context, clock: Clock) -> None:
    running_cell(ctx, "30m")
    cell = record(ctx.db, "Cell", "api")
    time.sleep(0.02)  # a file's mtime is the kernel's coarse clock, a tick behind startedAt
    activity.note(ctx.db.state_dir, cell.id, "exec session closed")
    last = activity.seen(ctx.db.state_dir, cell.id).last
    assert last is not None
    clock.at = last.at + timedelta(minutes=12)
    judged = idle.check(cell, Path(ctx.db.state_dir), desired="Running", running=True,
                        now=clock.at)
    assert judged is not None
    assert judged.describe() == (f"idle for 12m (last: exec session closed "
                                 f"{idle.clock(last.at)}), sleeps at "
                                 f"{idle.clock(last.at + timedelta(minutes=30))}")


def test_never_and_no_idle_keep_a_cell_running(ctx: Context, clock: Clock) -> None:
    up = running_cell(ctx, "never")
    apply(ctx.db, cell_doc("plain"))
    converge_all(ctx)
    clock.at = up + timedelta(days=30)
    for name in ("api", "plain"):
        decision = decide(ctx, "Cell", name)
        assert isinstance(decision, Settled) and decision.requeue_after is None


def test_the_configuration_gives_the_default(ctx: Context, clock: Clock,
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\nidle:\n  sleepAfter: 1m\n")
    os.chmod(path, 0o600)
    monkeypatch.setenv("DEVCELL_CONFIG", str(path))
    apply(ctx.db, cell_doc("plain"))
    converge_all(ctx)
    up = idle.started(record(ctx.db, "Cell", "plain")).at
    clock.at = up + timedelta(seconds=61)
    decision = decide(ctx, "Cell", "plain")
    assert isinstance(decision, Plan) and decision.action == "sleep"
    assert idle_event(ctx.db, "plain").startswith("idle for 1m: ")


def test_a_woken_cell_counts_from_its_wake(ctx: Context, clock: Clock) -> None:
    up = running_cell(ctx)
    clock.at = up + timedelta(seconds=31)
    converge_all(ctx)  # slept for idleness
    assert record(ctx.db, "Cell", "api").phase == "Sleeping"
    from devcell.store import desired

    desired.set_cell_state(ctx.db, "api", "Running", by="test")
    clock.at = datetime.now(UTC)
    converge_all(ctx)
    assert record(ctx.db, "Cell", "api").phase == "Running"
    woke = idle.started(record(ctx.db, "Cell", "api"))
    assert woke.at >= up
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Settled) and decision.requeue_after is not None


def test_readiness_flapping_does_not_reset_the_idle_clock(ctx: Context, clock: Clock) -> None:
    """A cell's own readiness checks turn its Ready condition: a hostile cell flapping them
    must not keep itself awake. Idle time counts from when DevCell started it."""
    up = running_cell(ctx, "30s")
    cell = record(ctx.db, "Cell", "api")
    later = (up + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    conditions = [dict(c, lastTransitionTime=later) if c.get("type") == "Ready" else c
                  for c in cell.status.get("conditions", [])]
    with ctx.db.write() as conn:
        objects.write_status(conn, cell, phase=cell.phase,
                             status=dict(cell.status, conditions=conditions),
                             observed_generation=cell.observed_generation)
    assert idle.started(record(ctx.db, "Cell", "api")).at == up


def test_a_deleted_cells_activity_goes_with_it(ctx: Context, clock: Clock) -> None:
    from devcell.store import desired

    running_cell(ctx, "30m")
    cell = record(ctx.db, "Cell", "api")
    activity.note(ctx.db.state_dir, cell.id, "exec session closed")
    assert activity.seen(ctx.db.state_dir, cell.id).last is not None
    desired.delete(ctx.db, "Cell", "api")
    assert converge_all(ctx).ok
    assert activity.seen(ctx.db.state_dir, cell.id).last is None
