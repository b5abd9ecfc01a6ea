"""Retention in the GitOps daemon, as real processes: it wakes when something falls due (no
resync, no file change), takes a cell's scheduled snapshots at their periods, and a restart
after missed periods takes one snapshot, never a burst, and never one twice."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from devcell.controllers import retention
from tests.e2e.test_crash_matrix import (
    SCHEDULED_LABEL,
    Daemon,
    World,
    cell_doc,
    daemon_log_clean,
    snap_doc,
)
from tests.e2e.test_crash_matrix import procs as _procs

pytestmark = pytest.mark.e2e
procs = _procs
"""Every daemon a test starts, killed at teardown if still alive (the matrix's fixture)."""
NO_RESYNC = ("--resync", "0")
"""The periodic resync re-queues everything; with it off, only a timed wake-up can act."""


def _world(tmp_path: Path) -> tuple[World, Path]:
    watched = tmp_path / "watched"
    watched.mkdir()
    return World(tmp_path, tmp_path / "m"), watched


def _rows(world: World, sql: str, *args: object) -> list[sqlite3.Row]:
    try:
        with world.db() as conn:
            return list(conn.execute(sql, args).fetchall())
    except sqlite3.OperationalError:
        return []


def _scheduled(world: World) -> list[sqlite3.Row]:
    return _rows(world, "SELECT name, phase, created_at, deleted_at, json_extract(status, "
                        "'$.schedule.slot') AS slot FROM snapshots WHERE json_extract(labels, "
                        f"'$.\"{SCHEDULED_LABEL}\"') IS NOT NULL ORDER BY rowid")


def _stop(daemon: Daemon) -> None:
    assert daemon.terminate() == 0, daemon.text()[-3000:]
    daemon_log_clean(daemon.text())


def test_the_daemon_wakes_when_a_ttl_runs_out(procs: list[subprocess.Popen[bytes]],
                                              tmp_path: Path) -> None:
    world, watched = _world(tmp_path)
    (watched / "a.yaml").write_text(cell_doc("a") + "---\n" + snap_doc("s1", "a", ttl="3s"))
    daemon = Daemon(world, procs, watched, args=NO_RESYNC)
    daemon.wait_for("s1 Ready", lambda: bool(_rows(
        world, "SELECT 1 FROM snapshots WHERE name = 's1' AND phase = 'Ready'")))
    (created,) = _rows(world, "SELECT created_at FROM snapshots WHERE name = 's1'")[0]
    due = retention.parse_time(created).timestamp() + 3
    daemon.wait_for("s1 Expired", lambda: bool(_rows(
        world, "SELECT 1 FROM snapshots WHERE name = 's1' AND phase = 'Expired'")), timeout=10)
    (deleted,) = _rows(world, "SELECT deleted_at FROM snapshots WHERE name = 's1'")[0]
    late = retention.parse_time(deleted).timestamp() - due
    assert 0 <= late < 1.5, f"expired {late:.2f}s after its ttl ran out"
    with world.fake() as fake:
        assert fake.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 0
    # Its file is unchanged and stays: the daemon's syncs do not take it again.
    time.sleep(0.5)
    assert len(_rows(world, "SELECT 1 FROM snapshots WHERE name = 's1'")) == 1
    _stop(daemon)


def test_the_schedule_takes_snapshots_at_their_periods_and_retains_the_newest(
        procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    world, watched = _world(tmp_path)
    doc = yaml.safe_load(cell_doc("a"))
    doc["spec"]["snapshots"] = {"every": "2s", "retain": 2}
    (watched / "a.yaml").write_text(yaml.safe_dump(doc))
    daemon = Daemon(world, procs, watched, args=NO_RESYNC)
    seen: dict[str, list[sqlite3.Row]] = {}

    def retained() -> bool:
        rows = _scheduled(world)
        seen["rows"] = rows
        return len(rows) >= 4 and sum(r["deleted_at"] is None for r in rows) == 2

    daemon.wait_for("4 scheduled snapshots, 2 retained", retained, timeout=15)
    _stop(daemon)
    rows = seen["rows"]
    (cell_created,) = _rows(world, "SELECT created_at FROM cells WHERE name = 'a'")[0]
    anchor = retention.parse_time(cell_created).timestamp()
    for i, row in enumerate(rows[:4], 1):
        slot = retention.parse_time(row["slot"]).timestamp()
        assert slot == pytest.approx(anchor + 2 * i, abs=0.002), dict(row)  # every period
        taken = retention.parse_time(row["created_at"]).timestamp() - slot
        assert 0 <= taken < 1.0, f"{row['name']} taken {taken:.2f}s after its period began"
    live = [r for r in rows if r["deleted_at"] is None]
    assert [r["name"] for r in live] == [r["name"] for r in rows[-2:]]
    assert all(r["phase"] == "Expired" for r in rows[:-2])


def test_a_restart_after_missed_periods_takes_one_snapshot(
        procs: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    world, watched = _world(tmp_path)
    doc = yaml.safe_load(cell_doc("a"))
    doc["spec"]["snapshots"] = {"every": "1s"}
    (watched / "a.yaml").write_text(yaml.safe_dump(doc))
    daemon = Daemon(world, procs, watched, args=NO_RESYNC)
    daemon.wait_for("a scheduled snapshot", lambda: len(_scheduled(world)) >= 1)
    daemon.proc.send_signal(signal.SIGKILL)  # down, hard, for several periods
    daemon.wait_exit(10)
    before = [r["name"] for r in _scheduled(world)]
    time.sleep(4.5)
    restart = time.time()
    restarted = Daemon(world, procs, watched, args=NO_RESYNC)
    restarted.wait_for("the missed period's snapshot", lambda: len(_scheduled(world)) > len(before))
    after = _scheduled(world)

    def taken() -> bool:  # nothing lost: what the killed daemon had recorded is taken too
        phases = {r["name"]: r["phase"] for r in _scheduled(world)}
        return all(phases[r["name"]] == "Ready" for r in after)

    restarted.wait_for("the snapshots recorded so far Ready", taken)
    _stop(restarted)
    new = sorted((r for r in after if r["name"] not in before), key=lambda r: r["slot"])
    t = retention.parse_time
    last_before = max(t(r["slot"]).timestamp() for r in after if r["name"] in before)
    first = new[0]
    first_slot = t(first["slot"]).timestamp()
    # The periods that began while it was down (4 at least) took one snapshot: the latest's.
    assert first_slot - last_before >= 4.0, (last_before, dict(first))
    assert 0 <= t(first["created_at"]).timestamp() - first_slot < 1.0, dict(first)
    assert t(first["created_at"]).timestamp() >= restart
    names = [r["name"] for r in after]
    assert len(names) == len(set(names)), "a period taken twice"
