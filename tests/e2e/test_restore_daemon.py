"""`devcell snapshot restore` while a daemon holds the lease: the command records the request,
the daemon carries the restore out as its operation, and the command waits for it; a gate is
reported (exit 1, what would be replaced) or, with --approve, approved and finished."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_crash_matrix import Daemon, World, cell_doc, procs, settled, snap_doc

__all__ = ["procs"]  # the fixture, used by name


@pytest.mark.e2e
def test_restore_is_carried_out_by_the_daemon(procs: list[subprocess.Popen[bytes]],
                                              tmp_path: Path) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "a.yaml").write_text(cell_doc("a"))
    (watched / "s1.yaml").write_text(snap_doc("s1", "a"))
    world = World(tmp_path, watched)
    world.accept(watched)
    daemon = Daemon(world, procs, watched)
    daemon.wait_for("a and s1 converged", lambda: settled(world), timeout=60)

    done = world.run("snapshot", "restore", "s1")
    assert done.returncode == 0, world.transcript()
    assert "cell/a restored from snapshot/s1; safety snapshot/a-pre-restore-1" in done.stdout

    conn = sqlite3.connect(world.state / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 3")  # someone edits the workspace
    conn.commit()
    conn.close()
    held = world.run("snapshot", "restore", "s1")
    assert held.returncode == 1 and "restore waiting for approval" in held.stdout
    assert re.search(r"0 added, [1-9]\d* changed, 0 removed", held.stderr), held.stderr
    assert "devcell op resume" in held.stderr
    op = held.stderr.split("devcell op resume ")[1].split()[0]
    resumed = world.run("op", "resume", op, "--input", "confirm=a")
    assert resumed.returncode == 0, world.transcript()
    with world.db() as db:
        rows = db.execute("SELECT action, status FROM operations WHERE object_name = "
                          "'a' AND action = 'restore' ORDER BY rowid").fetchall()
        assert [tuple(r) for r in rows] == [("restore", "Succeeded")] * 2
        assert db.execute("SELECT restore FROM cells WHERE name = 'a'").fetchone()[0] is None
    assert daemon.terminate() == 0, daemon.text()
