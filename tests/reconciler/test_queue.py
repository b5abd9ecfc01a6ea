"""The work queue on its own: one reconcile per key at a time, de-duplication, delays, and a
backoff that grows with failures up to its cap."""

from __future__ import annotations

import random
import threading
import time

import pytest

from devcell.reconciler.queue import Backoff, WorkQueue


def test_a_key_being_processed_is_not_handed_out_again_until_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=1) == "a"
    queue.add("a")  # a change arrives while a worker reconciles "a"
    assert queue.get(timeout=0.05) is None
    assert queue.busy == 1 and len(queue) == 0
    queue.done("a")
    assert queue.get(timeout=1) == "a"  # the parked request, handed out once
    queue.done("a")
    assert queue.get(timeout=0.05) is None


def test_a_parked_request_keeps_its_earliest_due_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=1) == "a"
    queue.add("a", after=30)
    queue.add("a", after=0)
    queue.add("a", after=60)
    queue.done("a")
    assert queue.get(timeout=1) == "a"


def test_a_discarded_parked_request_is_not_handed_out() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=1) == "a"
    queue.add("a")
    queue.discard_parked("a")
    queue.done("a")
    assert queue.get(timeout=0.05) is None and queue.idle()


def test_keys_are_de_duplicated_and_the_earliest_request_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", after=60)
    queue.add("a", after=0)
    queue.add("a", after=30)
    queue.add("b", after=60)
    assert len(queue) == 2
    assert queue.get(timeout=1) == "a"
    assert queue.get(timeout=0.05) is None  # b is not due, a is not queued twice


def test_keys_come_out_in_due_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("late", after=0.2)
    queue.add("soon", after=0.1)
    queue.add("now")
    assert [queue.get(timeout=2) for _ in range(3)] == ["now", "soon", "late"]


def test_get_waits_for_a_delayed_key() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", after=0.2)
    t0 = time.monotonic()
    assert queue.get(timeout=5) == "a"
    assert time.monotonic() - t0 >= 0.19


def test_shutdown_wakes_getters_and_ignores_new_keys() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    getter = threading.Thread(target=lambda: got.append(queue.get()))
    getter.start()
    time.sleep(0.05)
    queue.shutdown()
    getter.join(5)
    assert not getter.is_alive() and got == [None]
    queue.add("a")
    assert len(queue) == 0 and queue.get(timeout=0) is None


def test_idle_means_nothing_processing_and_nothing_due() -> None:
    queue: WorkQueue[str] = WorkQueue()
    assert queue.idle()
    queue.add("later", after=60)
    assert queue.idle()  # queued, not due
    queue.add("a")
    assert not queue.idle()
    assert queue.get(timeout=1) == "a"
    assert not queue.idle()  # being processed
    queue.done("a")
    assert queue.idle()


def test_no_key_is_ever_processed_by_two_workers_at_once() -> None:
    """Four workers and a producer adding keys at random: a key handed out is never handed
    out again before its worker calls done(), and every key added is processed."""
    queue: WorkQueue[int] = WorkQueue()
    lock = threading.Lock()
    processing: set[int] = set()
    overlaps: list[int] = []
    processed: set[int] = set()
    rng = random.Random(7)

    def worker() -> None:
        while (key := queue.get()) is not None:
            with lock:
                if key in processing:
                    overlaps.append(key)
                processing.add(key)
            time.sleep(0.001)
            with lock:
                processing.discard(key)
                processed.add(key)
            queue.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        for _ in range(2000):
            queue.add(rng.randrange(5))
            if rng.random() < 0.1:
                time.sleep(0.001)
        deadline = time.monotonic() + 10
        while not queue.idle() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        queue.shutdown()
        for w in workers:
            w.join(5)
    assert overlaps == []
    assert processed == set(range(5))


# -- backoff -----------------------------------------------------------------------------------


def test_backoff_doubles_with_each_failure_up_to_its_cap() -> None:
    backoff = Backoff(base=0.05, cap=1.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.delay(10_000) == 1.0  # no overflow, still capped


def test_backoff_jitter_stays_within_its_spread_and_the_cap() -> None:
    backoff = Backoff(base=0.05, cap=1.0, jitter=0.2)
    for failures in range(1, 12):
        raw = min(1.0, 0.05 * 2 ** (failures - 1))
        for _ in range(50):
            delay = backoff.delay(failures)
            assert raw * 0.8 - 1e-9 <= delay <= min(1.0, raw * 1.2) + 1e-9


def test_add_rate_limited_grows_with_failures_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(backoff=Backoff(base=0.01, cap=0.08, jitter=0.0))
    delays = []
    for _ in range(6):
        delays.append(queue.add_rate_limited("a"))
        assert queue.get(timeout=2) == "a"
        queue.done("a")
    assert delays == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]
    assert queue.failures("a") == 6
    queue.forget("a")
    assert queue.failures("a") == 0
    assert queue.add_rate_limited("a") == 0.01
    assert queue.add_rate_limited("b", at_least=0.5) == 0.5  # an error's own delay wins


@pytest.mark.parametrize("failures", [1, 3, 5])
def test_a_failed_key_is_not_handed_out_before_its_backoff(failures: int) -> None:
    queue: WorkQueue[str] = WorkQueue(backoff=Backoff(base=0.02, cap=10, jitter=0.0))
    for _ in range(failures - 1):
        queue.add_rate_limited("a")
        assert queue.get(timeout=5) == "a"
        queue.done("a")
    t0 = time.monotonic()
    delay = queue.add_rate_limited("a")
    assert queue.get(timeout=5) == "a"
    assert time.monotonic() - t0 >= delay - 0.005
    assert delay == pytest.approx(0.02 * 2 ** (failures - 1))


def test_delays_at_the_cap_are_still_spread() -> None:
    """Keys that all failed many times must not retry in lockstep: jitter applies at the cap
    too (below it, never above)."""
    backoff = Backoff(base=0.05, cap=1.0, jitter=0.2)
    delays = {backoff.delay(40) for _ in range(50)}
    assert len(delays) > 10 and min(delays) >= 0.8 and max(delays) <= 1.0


def test_a_stale_entry_left_by_an_earlier_request_never_blocks_the_next_key() -> None:
    """a's later request stays in the heap after a was handed out (superseded); it must be
    skipped, not wait in front of b."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", after=0.2)
    queue.add("a", after=0)  # the earlier request wins; the later one is now stale
    assert queue.get(timeout=1) == "a"
    queue.done("a")
    queue.add("b", after=0.3)
    assert queue.get(timeout=2) == "b"


def test_a_short_timeout_still_hands_out_a_key_due_within_it() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a", after=0.1)
    assert queue.get(timeout=0.6) == "a"
