"""Idle sleep: when a running cell nobody uses goes to sleep, and what counts as use.

A cell sleeps `spec.idle.sleepAfter` (else the configuration's `idle.sleepAfter`) after its
last activity, as long as nothing is open. Activity is what DevCell can see (store/activity.py):

- an SSH connection (`devcell ssh`, or OpenSSH through `devcell ssh-proxy`) or a `devcell
  exec` open now, and the time the last one closed;
- a `devcell port-forward` with a connection open, and when its last connection closed;
- a connection open now to one of the cell's published host ports (the host's TCP table);
- the cell's start or wake (its Ready condition's transition), so a cell nobody touched sleeps
  `sleepAfter` after it came up.

Level-triggered like the rest of the controller: every decide of a settled, running cell
judges afresh and asks to be decided again at the deadline (sooner while something is open, to
notice the close). A due cell is held Sleeping by `idle` with the reason, then slept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from devcell.store import activity, objects

if TYPE_CHECKING:
    from devcell.store.db import Database

RECHECK_BUSY = 60.0
"""While something is open, look again this often (at most): its close is not an event."""


@dataclass(frozen=True)
class Idle:
    """A running cell's idleness, judged at `now`."""

    sleep_after: int
    """Seconds of idleness before it sleeps."""
    busy: tuple[activity.Activity, ...]
    """What is open now (the cell is not idle while any is)."""
    last: activity.Activity
    """The latest activity that ended (or the cell's start)."""
    now: datetime

    @property
    def deadline(self) -> datetime | None:
        """When it sleeps unless something happens first; None while something is open."""
        return None if self.busy else self.last.at + timedelta(seconds=self.sleep_after)

    @property
    def due(self) -> bool:
        return self.deadline is not None and self.now >= self.deadline

    def recheck_after(self) -> float:
        """Seconds until the controller should judge again."""
        deadline = self.deadline
        if deadline is None:
            return min(float(self.sleep_after), RECHECK_BUSY)
        return max((deadline - self.now).total_seconds(), 0.001)

    def describe(self) -> str:
        """'idle for 12m (last: ssh session closed 10:02:00 UTC), sleeps at 10:32:00 UTC',
        or what keeps it awake."""
        if self.busy:
            shown = "; ".join(f"{a.what} since {clock(a.at)}" for a in self.busy)
            return (f"active: {shown} (sleeps {span(self.sleep_after)} after the last of "
                    "them closes)")
        deadline = self.deadline
        assert deadline is not None
        idle_for = max(int((self.now - self.last.at).total_seconds()), 0)
        return (f"idle for {span(idle_for)} (last: {self.last.what} {clock(self.last.at)}), "
                f"sleeps at {clock(deadline)}")

    def reason(self) -> str:
        """Why it slept, for the event and the hold: 'idle for 30m: last activity ssh session
        closed at 10:02:00 UTC'."""
        return (f"idle for {span(self.sleep_after)}: last activity {self.last.what} at "
                f"{clock(self.last.at)}")


def sleep_after(cell: objects.ObjectRecord, state_dir: Path) -> int | None:
    """The cell's idle timeout in seconds: its spec's, else the configuration's default; None
    when it never sleeps for idleness (`sleepAfter: never`, or neither says)."""
    from devcell.manifests import quantities

    given = (cell.spec.get("idle") or {}).get("sleepAfter")
    if given is None:
        given = _configured(state_dir)
    if given is None or given == "never":
        return None
    return quantities.duration_seconds(str(given))


_CONFIGURED: dict[tuple[str, int, int, int, int, int], str | None] = {}


def _configured(state_dir: Path) -> str | None:
    """The configuration's idle.sleepAfter, parsed again only when its file changed: every
    decide of a running cell without spec.idle asks (a daemon with many cells)."""
    import os

    from devcell import config

    path = config.config_path(state_dir)
    try:
        st = os.stat(path)
    except OSError:
        return config.load(state_dir).idle.sleep_after  # none: the defaults (or its error)
    key = (str(path), st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)
    if key not in _CONFIGURED:
        _CONFIGURED.clear()
        _CONFIGURED[key] = config.load(state_dir).idle.sleep_after
    return _CONFIGURED[key]


def judge(cell: objects.ObjectRecord, state_dir: Path, *, now: datetime,
          sleep_after: int, host_ports: set[int] | None = None) -> Idle:
    """The cell's idleness at `now` from its recorded activity, its start and the connections
    open to `host_ports` (its published ports on the host)."""
    seen = activity.seen(state_dir, cell.id)
    busy = list(seen.open)
    last = started(cell)
    if seen.last is not None and seen.last.at > last.at:
        last = seen.last
    if host_ports:
        from devcell.backends.host import connections

        open_now = connections.established(host_ports)
        for port, count in sorted(open_now.items()):
            busy.append(activity.Activity(
                f"{count} connection{'s' if count != 1 else ''} to published port {port}", now))
        if open_now:  # its close is never seen: being seen open is the activity recorded
            activity.note(state_dir, cell.id,
                          f"connection to published port {min(open_now)} seen open")
    return Idle(sleep_after, tuple(busy), last, now)


def started(cell: objects.ObjectRecord) -> activity.Activity:
    """When DevCell last brought the cell up (status.startedAt; a wake says so), else when it
    was last updated. Never its Ready condition's transitions: a cell's own readiness checks
    turn those, and a hostile cell flapping them would keep itself awake."""
    at = (_parse(cell.status.get("startedAt")) or _parse(cell.updated_at)
          or datetime.now(UTC))
    woken = _parse((cell.status.get("lastStart") or {}).get("at"))
    if woken is not None and woken >= at:
        return activity.Activity("cell woken", woken)
    return activity.Activity("cell started", at)


def host_ports(spec: dict[str, Any]) -> set[int]:
    """The host ports the cell's spec publishes."""
    ports = (spec.get("network") or {}).get("ports") or []
    return {int(p.get("hostPort") or p["containerPort"]) for p in ports
            if isinstance(p, dict) and p.get("containerPort")}


def clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S UTC")


def span(seconds: int) -> str:
    """12m, 1h5m, 40s: short, as durations are written in manifests."""
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m" + (f"{secs}s" if secs and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h" + (f"{minutes}m" if minutes else "")


def _parse(stamp: Any) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        found = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def check(cell: objects.ObjectRecord, state_dir: Path, *, desired: str, running: bool,
          now: datetime) -> Idle | None:
    """The idleness of a settled cell that is to run and runs, with an idle timeout; None
    for any other."""
    if desired != "Running" or not running or cell.deleting:
        return None
    seconds = sleep_after(cell, state_dir)
    if seconds is None:
        return None
    return judge(cell, state_dir, now=now, sleep_after=seconds,
                 host_ports=host_ports(cell.spec))


def hold_asleep(db: Database, cell: objects.ObjectRecord, idle: Idle) -> None:
    """Put the idle cell to sleep: a runtime decision (by `idle`, with the reason), the same
    as `cell sleep` records; the next decide plans the sleep itself."""
    from devcell.store import desired, events

    desired.set_cell_state(db, cell.id, "Sleeping", by="idle", reason=idle.reason())
    with db.write() as conn:
        events.record(conn, kind="Cell", object_id=cell.id, name=cell.name,
                      reason="IdleSleep", message=f"{idle.reason()}; putting it to sleep")


def sooner(requeue_after: float | None, idle: Idle | None) -> float | None:
    """The earlier of a settled cell's own requeue and its idle deadline's."""
    if idle is None:
        return requeue_after
    mine = idle.recheck_after()
    return mine if requeue_after is None else min(requeue_after, mine)
