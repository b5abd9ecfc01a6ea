"""Back off restarting a cell whose runtime keeps dying (CrashLoopBackOff, as the kubelet does).

A cell that should run and whose runtime exited behind DevCell's back (killed, out of memory,
its supervisor crashed) is restarted; when it keeps dying, each restart waits longer, so a
broken cell does not take the engine's time in a tight loop. The kubelet's numbers, scaled so
that a single death costs nothing: the first death of a streak restarts at once, the next
after 10 s, then 20 s, 40 s... capped at 5 minutes; a runtime that ran 10 minutes before it
died starts a new streak. The record lives in the cell's status (`status.restarts`), so the
rule holds whichever process reconciles, and `get` shows the phase as CrashLoopBackOff while
a restart waits.

A restart asked for by a user (`apply`, `cell start`: triggers apply and cli) does not wait.
"""

from __future__ import annotations

from typing import Any

FIRST_BACKOFF_S = 10.0
MAX_BACKOFF_S = 300.0
RESET_AFTER_S = 600.0
USER_TRIGGERS = frozenset({"apply", "cli"})
REASON = "CrashLoopBackOff"


def delay(deaths: int) -> float:
    """How long the restart after the `deaths`-th death in a streak waits."""
    if deaths <= 1:
        return 0.0
    return min(FIRST_BACKOFF_S * 2 ** (deaths - 2), MAX_BACKOFF_S)


def started(record: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """The record once DevCell (re)started the runtime: alive, the streak kept."""
    deaths = int((record or {}).get("deaths", 0))
    return {"deaths": deaths, "startedAt": now, "dead": False}


def died(record: dict[str, Any], now: float) -> dict[str, Any]:
    """The record once the runtime was found dead: one more death (or a new streak, after a
    long run) and when the restart may happen."""
    ran = now - float(record.get("startedAt", now))
    deaths = 1 if ran >= RESET_AFTER_S else int(record.get("deaths", 0)) + 1
    return {"deaths": deaths, "startedAt": record.get("startedAt"), "dead": True,
            "diedAt": now, "retryAt": now + delay(deaths)}
