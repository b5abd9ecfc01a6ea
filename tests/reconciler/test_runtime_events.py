"""The daemon follows its backends' runtime events (issue 10, item 7): a runtime stopped,
paused or removed behind DevCell's back is queued at once, not at the next resync (here the
resync is off); a lost event stream is opened again and every cell observed; a runtime that
keeps dying is restarted with a growing back-off (CrashLoopBackOff)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from devcell.backends.fake import FakeBackend
from devcell.controllers import crashloop
from devcell.errors import BackendUnavailable
from devcell.reconciler.manager import Manager
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    fake,
    is_wait,
    live_keys,
    record,
)

DEADLINE_S = 15.0


@contextmanager
def running(db: Database, **options: Any) -> Iterator[Manager]:
    manager = Manager(db.state_dir, workers=2, resync_seconds=0, **options)
    manager.start()
    try:
        yield manager
    finally:
        manager.stop(timeout=10)


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {DEADLINE_S}s: {what}")


def world(db: Database, cell_id: str) -> tuple[str, int] | None:
    backend = FakeBackend(state_dir=db.state_dir)
    try:
        row = backend.conn.execute("SELECT state, frozen FROM cells WHERE id = ?",
                                   (cell_id,)).fetchone()
        return None if row is None else (row[0], row[1])
    finally:
        backend.close()


def behind_back(db: Database, cell_id: str, **change: Any) -> None:
    backend = FakeBackend(state_dir=db.state_dir)
    try:
        backend.behind_back(cell_id, **change)
    finally:
        backend.close()


@pytest.fixture
def api(db: Database, ctx: Any) -> str:
    apply(db, cell_doc("api"))
    assert not converge_all(ctx, live_keys(db)).failed
    return record(db, "Cell", "api").id


@pytest.mark.parametrize("change", [{"state": "exited"}, {"frozen": True}, {"gone": True}],
                         ids=["stopped", "paused", "removed"])
def test_a_runtime_changed_behind_the_daemons_back_is_repaired_without_a_resync(
        db: Database, api: str, change: dict[str, Any]) -> None:
    with running(db) as manager:
        until(lambda: manager.stream_opens == 1, "the event stream opened")
        behind_back(db, api, **change)
        until(lambda: world(db, api) == ("running", 0), "the runtime running again")
        until(lambda: record(db, "Cell", "api").phase == "Running", "recorded Running")


def test_without_runtime_events_only_the_resync_would_find_it(db: Database, api: str) -> None:
    with running(db, runtime_events=False):
        behind_back(db, api, state="exited")
        time.sleep(1.0)
        assert world(db, api) == ("exited", 0)


def test_a_lost_event_stream_is_reopened_and_everything_observed(
        db: Database, api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real_watch = FakeBackend.watch
    calls = {"n": 0}

    def flaky(self: FakeBackend, on_event: Callable[[str], None], *, stop: threading.Event,
              on_open: Callable[[], None]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            on_open()
            # The engine restarts: the runtime died while nobody listened, and the stream ends.
            self.behind_back(api, state="exited")
            raise BackendUnavailable("the engine's event stream ended")
        real_watch(self, on_event, stop=stop, on_open=on_open)

    monkeypatch.setattr(FakeBackend, "watch", flaky)
    with running(db) as manager:
        until(lambda: manager.stream_opens >= 2, "the stream re-opened")
        until(lambda: world(db, api) == ("running", 0), "the runtime found and restarted")


def test_a_runtime_that_keeps_dying_backs_off(ctx: Any, db: Database, api: str) -> None:
    ctx.trigger = "engine"
    # First death: restarted at once.
    fake(ctx).behind_back(api, state="exited")
    assert not converge_all(ctx, [("Cell", api)]).failed
    assert world(db, api) == ("running", 0)
    assert record(db, "Cell", "api").status["restarts"]["deaths"] == 1
    # Second death within the reset window: held back, shown as CrashLoopBackOff.
    fake(ctx).behind_back(api, state="exited")
    decision = decide(ctx, "Cell", api)
    assert is_wait(decision)
    assert decision.reason == crashloop.REASON  # type: ignore[union-attr]
    assert 9 < decision.requeue_after <= crashloop.FIRST_BACKOFF_S  # type: ignore[union-attr]
    cell = record(db, "Cell", "api")
    assert cell.condition("Ready")["reason"] == crashloop.REASON  # type: ignore[index]
    assert world(db, api) == ("exited", 0)
    from devcell.cli import cmd_get

    assert [r["phase"] for r in cmd_get._rows(db, "cells", None, [])] == [crashloop.REASON]
    # Deciding again counts no second death for the same exit.
    decide(ctx, "Cell", api)
    assert record(db, "Cell", "api").status["restarts"]["deaths"] == 2
    # A user's `cell start` (trigger cli) does not wait.
    ctx.trigger = "cli"
    assert not converge_all(ctx, [("Cell", api)]).failed
    assert world(db, api) == ("running", 0)


def test_back_off_grows_is_capped_and_resets_after_a_long_run() -> None:
    assert [crashloop.delay(n) for n in range(1, 8)] == [0, 10, 20, 40, 80, 160, 300]
    assert crashloop.delay(30) == crashloop.MAX_BACKOFF_S
    alive = crashloop.started({"deaths": 5}, now=1000.0)
    assert crashloop.died(alive, now=1001.0)["deaths"] == 6
    assert crashloop.died(alive, now=1000.0 + crashloop.RESET_AFTER_S)["deaths"] == 1
