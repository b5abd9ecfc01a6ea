"""The work queue: keyed by object, de-duplicated, one reconcile per key at a time.

As in controller-runtime, the queue owns de-duplication, delays and backoff; workers own only
the business logic. A key added while it is being processed is parked ("dirty") and handed out
again once the worker is done with it, so a key is never reconciled by two workers at once.
"""

from __future__ import annotations

import heapq
import random
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class Backoff:
    """Exponential backoff with jitter and a cap: base * 2**failures, +-jitter, at most cap."""

    base: float = 0.05
    cap: float = 60.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        # The exponent is bounded: past 2**64 the cap has long won, and 0.05 * 2**1024 would
        # overflow a float (a key failing every minute for 17 hours killed its worker).
        raw = min(self.cap, self.base * (2 ** min(max(failures - 1, 0), 64)))
        spread = raw * self.jitter
        return max(0.0, min(self.cap, raw + random.uniform(-spread, spread)))


@dataclass
class WorkQueue(Generic[K]):
    backoff: Backoff = field(default_factory=Backoff)
    _heap: list[tuple[float, int, K]] = field(default_factory=list)
    _due: dict[K, float] = field(default_factory=dict)
    _processing: set[K] = field(default_factory=set)
    _dirty: dict[K, float] = field(default_factory=dict)
    _failures: dict[K, int] = field(default_factory=dict)
    _seq: int = 0
    _closed: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def add(self, key: K, *, after: float = 0.0) -> None:
        """Queue `key` to be handed out in `after` seconds (earliest request wins)."""
        due = time.monotonic() + after
        with self._cond:
            if self._closed:
                return
            if key in self._processing:
                self._dirty[key] = min(due, self._dirty.get(key, due))
                return
            if key in self._due and self._due[key] <= due:
                return
            self._push(key, due)

    def _push(self, key: K, due: float) -> None:
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))
        self._cond.notify()

    def add_rate_limited(self, key: K, *, at_least: float = 0.0) -> float:
        """Requeue after a failure; returns the delay chosen (grows with each failure, and is
        never below `at_least`: an error's own delay)."""
        with self._cond:
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
        delay = max(self.backoff.delay(failures), at_least)
        self.add(key, after=delay)
        return delay

    def discard_parked(self, key: K) -> None:
        """Drop a request to hand `key` out again that arrived while it was being processed:
        the worker found the request had nothing new to act on."""
        with self._cond:
            self._dirty.pop(key, None)

    def forget(self, key: K) -> None:
        """Reset the key's failure count (it succeeded)."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """The next due key, or None on timeout or shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._closed:
                    return None
                now = time.monotonic()
                while self._heap:
                    due, _, key = self._heap[0]
                    if self._due.get(key) != due:  # superseded by an earlier request
                        heapq.heappop(self._heap)
                        continue
                    if due > now:
                        break
                    heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing.add(key)
                    return key
                wait = None if not self._heap else self._heap[0][0] - now
                if deadline is not None:
                    remaining = deadline - now
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            due = self._dirty.pop(key, None)
            if due is not None and not self._closed:
                if key not in self._due or self._due[key] > due:
                    self._push(key, due)

    def __len__(self) -> int:
        with self._cond:
            return len(self._due)

    @property
    def busy(self) -> int:
        with self._cond:
            return len(self._processing)

    def idle(self) -> bool:
        with self._cond:
            now = time.monotonic()
            return not self._processing and not any(d <= now for d in self._due.values())

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
