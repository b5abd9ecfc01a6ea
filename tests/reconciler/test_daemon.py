"""The daemon's start (reconciler/daemon.py), as a process: what it recovers.

Cost: ~2-4 s (one apply, one daemon started and stopped).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests import processes
from tests.conftest import REPO


def test_a_starting_daemon_leaves_an_inline_converge_in_flight_alone(tmp_path: Path) -> None:
    """A `devcell apply` converging without a daemon holds the reconcile lock, its operation
    Running. A daemon started meanwhile recovered at once, without the lock: it failed that
    live operation as a crash's (Interrupted) and queued the object, to make it a second
    time beside the command. It now waits for the lock, and recovers only what is left once
    its holder is gone."""
    from devcell.reconciler import reconcile_lock
    from devcell.store import objects, operations
    from devcell.store.db import open_database

    state, watched, log = tmp_path / "state", tmp_path / "watched", tmp_path / "daemon.log"
    watched.mkdir()
    (watched / "c.yaml").write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
                                    "metadata: {name: c}\nspec: {backend: fake, image: x}\n")
    devcell = [sys.executable, "-m", "devcell", "--state-dir", str(state)]
    done = subprocess.run([*devcell, "apply", "-f", str(watched)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    db = open_database(state)

    def status(op_id: str) -> tuple[str, str | None]:
        row = db.conn.execute("SELECT status, reason FROM operations WHERE id = ?",
                              (op_id,)).fetchone()
        return str(row[0]), row[1]

    def until(what: object, check: object) -> None:
        deadline = time.monotonic() + 60
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, f"{what}: {log.read_text()}"
            time.sleep(0.05)

    try:
        cell = objects.require(db.conn, "Cell", "c")
        op_id = operations.new_operation_id()
        with reconcile_lock.holding(state):  # this test is the command in flight
            with db.write() as conn:
                operations.create(conn, op_id=op_id, object_kind="Cell", object_id=cell.id,
                                  object_name="c", action="update", trigger="apply",
                                  generation=cell.generation, step_names=["stop", "start"])
            with open(log, "wb") as out:
                daemon = subprocess.Popen(
                    [*devcell, "controller", "run", "--manifests", str(watched),
                     "--resync", "0"], stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                    preexec_fn=processes.child_setup)
            try:
                until("the daemon waits for the lock",
                      lambda: "waiting for it to end" in log.read_text())
                assert status(op_id) == ("Running", None)
            except BaseException:
                processes.end(daemon)
                raise
        try:  # the command gone, its operation Running: a crash's, recovered now
            until("the operation recovered", lambda: status(op_id)[0] != "Running")
            assert status(op_id) == ("Failed", "Interrupted")
        finally:
            daemon.terminate()
            try:
                daemon.wait(15)
            finally:
                processes.end(daemon)
    finally:
        db.close()
