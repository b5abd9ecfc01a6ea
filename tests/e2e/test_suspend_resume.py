"""Suspend and resume end to end: a daemon stopped mid-operation resumes it without repeating
completed steps; an approval-gated delete waits, rejects bad input and proceeds on good input."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import EXAMPLES, REPO, Cli


def _calls(state_dir: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    try:
        return [(r[0], r[1]) for r in conn.execute("SELECT method, target FROM calls ORDER BY seq")]
    finally:
        conn.close()


def _ops(cli: Cli) -> list[dict]:  # type: ignore[type-arg]
    return list(json.loads(cli("get", "operations", "-o", "json").stdout)["items"])


def _poll(predicate, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout}s")


class Daemon:
    def __init__(self, state_dir: Path, manifests: Path, env: dict[str, str],
                 run_store: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devcell", "controller", "run", "--manifests", str(manifests),
             "--run-store", run_store],
            env=dict(os.environ, DEVCELL_HOME=str(state_dir), **env), cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=processes.child_setup)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(10)


@pytest.mark.parametrize("run_store", ["sqlite", "file"])
def test_sigterm_suspends_and_restart_resumes_without_repeating_steps(
        cli: Cli, state_dir: Path, tmp_path: Path, daemons: list[Daemon], run_store: str) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    first = Daemon(state_dir, manifests, {"DEVCELL_FAKE_DELAY": "create:2.5"}, run_store)
    daemons.append(first)
    _poll(lambda: (state_dir / "state.db").exists() and cli("get", "controllers").returncode == 0
          and "yes" in cli("get", "controllers").stdout)
    (manifests / "api.yaml").write_text((EXAMPLES / "worker.json").read_text()
                                        .replace('"Stopped"', '"Running"'))

    def create_in_flight() -> bool:
        ops = _ops(cli)
        return bool(ops) and ops[0]["current_step"] == "create" and ops[0]["status"] == "Running"

    _poll(create_in_flight)
    started = time.monotonic()
    assert first.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 5, "the daemon must exit right after the step in flight"
    op = _ops(cli)[0]
    assert (op["status"], op["reason"], op["current_step"]) == ("Suspended", "Shutdown", "start")
    if run_store == "file":
        snapshot = state_dir / "runs" / op["id"] / "snapshot.json"
        assert json.loads(snapshot.read_text())["snapshot"]["suspendedStepId"] == "2:start"
    assert _calls(state_dir) == [("create_volume", "worker"), ("create", "worker")]

    second = Daemon(state_dir, manifests, {}, run_store)
    daemons.append(second)
    _poll(lambda: _ops(cli)[0]["status"] == "Succeeded")
    assert _calls(state_dir) == [("create_volume", "worker"), ("create", "worker"),
                                 ("start", "worker")]
    steps = json.loads(cli("get", "operations", "-o", "json").stdout)["items"][0]["steps"]
    assert [(s["name"], s["status"]) for s in steps] == [
        ("create-volume", "Succeeded"), ("create", "Succeeded"), ("start", "Succeeded")]
    cell = json.loads(cli("get", "cell", "worker", "-o", "json").stdout)
    assert cell["status"]["phase"] == "Running"
    assert second.stop() == 0
    if run_store == "file":
        assert not (state_dir / "runs" / op["id"] / "snapshot.json").exists()


def test_a_crash_is_not_a_suspension(cli: Cli, state_dir: Path, tmp_path: Path,
                                     daemons: list[Daemon]) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    crashing = Daemon(state_dir, manifests, {"DEVCELL_FAILPOINT": "step.create.after-call"},
                      "sqlite")
    daemons.append(crashing)
    time.sleep(0.5)
    (manifests / "api.yaml").write_text((EXAMPLES / "api.yaml").read_text())
    assert crashing.proc.wait(15) == -signal.SIGKILL
    restarted = Daemon(state_dir, manifests, {}, "sqlite")
    daemons.append(restarted)
    _poll(lambda: any(o["status"] == "Succeeded" and o["object_name"] == "api-before-change"
                      for o in _ops(cli)))
    interrupted = [o for o in _ops(cli) if o["reason"] == "Interrupted"]
    assert len(interrupted) == 1 and interrupted[0]["current_step"] == "create"
    assert [c for c in _calls(state_dir) if c[0] == "create"] == [("create", "api")]
    assert restarted.stop() == 0


def _phases(cli: Cli, kind: str) -> dict[str, str]:
    """NAME -> PHASE as the `get` table shows them."""
    lines = cli("get", kind).stdout.splitlines()
    at = lines[0].index("PHASE")
    return {line.split()[0]: line[at:].split()[0] for line in lines[1:]}


def _api_edited_then_gone(cli: Cli, state_dir: Path, tmp_path: Path) -> Path:
    """A manifests directory applied (api, worker), api's workspace edited, then api's file
    removed: the directory an `apply --prune` then prunes api from."""
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "api.yaml").write_text((EXAMPLES / "api.yaml").read_text())
    (manifests / "worker.json").write_text((EXAMPLES / "worker.json").read_text())
    assert cli("apply", "-f", str(manifests)).returncode == 0
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1 WHERE cell_name = 'api'")
    conn.commit()
    conn.close()
    (manifests / "api.yaml").unlink()
    return manifests


def test_a_prune_waiting_for_approval_says_so(cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    manifests = _api_edited_then_gone(cli, state_dir, tmp_path)
    pruned = cli("apply", "--prune", "--keep-pruned", "0", "-f", str(manifests))
    assert pruned.returncode == 1
    assert "cell/api deletion waiting for approval\n" in pruned.stdout
    assert "cell/api pruned" not in pruned.stdout
    assert "devcell op resume op_" in pruned.stderr
    assert _phases(cli, "cells")["api"] == "Deleting"


def test_a_prune_keeps_a_changed_workspace_as_a_safety_snapshot_instead_of_asking(
        cli: Cli, state_dir: Path, tmp_path: Path) -> None:
    manifests = _api_edited_then_gone(cli, state_dir, tmp_path)
    pruned = cli("apply", "--prune", "--keep-pruned", "12h", "-f", str(manifests))
    assert pruned.returncode == 0, pruned.stderr
    assert "cell/api pruned" in pruned.stdout  # no approval: nothing is lost
    assert "api" not in _phases(cli, "cells")
    assert _phases(cli, "snapshots") == {"api-pruned-1": "Ready"}
    shown = json.loads(cli("get", "snapshots", "api-pruned-1", "-o", "json").stdout)
    assert shown["spec"] == {"cell": "api", "ttl": "12h"}  # expires like any snapshot
    assert "pruning cell api" in shown["metadata"]["annotations"]["devcell.dev/safety-snapshot"]
    events = cli("get", "events").stdout
    assert "its workspace is kept as snapshot api-pruned-1 for 12h" in events
    assert "Checkpoints   1" in cli("df").stdout


def _dirty_api(cli: Cli, state_dir: Path) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1")  # someone edits the workspace
    conn.commit()
    conn.close()


def test_approval_gated_delete(cli: Cli, state_dir: Path) -> None:
    _dirty_api(cli, state_dir)
    asked = cli("delete", "cell", "api")
    assert asked.returncode == 1
    assert asked.stdout == "cell/api deletion waiting for approval\n"  # never "deleted"
    assert "awaiting approval: the workspace changed since its last snapshot" in asked.stderr
    assert "approve it with `devcell op resume op_" in asked.stderr
    assert "--input confirm=api` (or pass --approve)" in asked.stderr  # the input, spelled out
    assert "Traceback" not in asked.stderr
    assert _phases(cli, "cells") == {"api": "Deleting"}
    op = next(o for o in _ops(cli) if o["status"] == "Suspended")
    assert (op["action"], op["reason"]) == ("delete", "AwaitingApproval")
    table = cli("get", "operations").stdout
    assert "Suspended" in table
    assert f"approval: devcell op resume {op['id']} --input confirm=api" in table
    assert ("delete_volume", "api") not in _calls(state_dir)

    wrong = cli("op", "resume", op["id"], "--input", "confirm=apj")
    assert wrong.returncode == 1 and "stays suspended" in wrong.stderr
    missing = cli("op", "resume", op["id"])
    assert missing.returncode == 1 and "'confirm' is a required property" in missing.stderr
    assert next(o for o in _ops(cli) if o["id"] == op["id"])["status"] == "Suspended"
    assert cli("get", "cell", "api").returncode == 0

    approved = cli("op", "resume", op["id"], "--input", "confirm=api")
    assert approved.returncode == 0, approved.stderr
    assert next(o for o in _ops(cli) if o["id"] == op["id"])["status"] == "Succeeded"
    assert cli("get", "cell", "api").returncode == 1  # gone
    assert _calls(state_dir).count(("delete_volume", "api")) == 1
    assert _calls(state_dir).count(("stop", "api")) == 1


def test_approve_up_front_and_cancel(cli: Cli, state_dir: Path) -> None:
    _dirty_api(cli, state_dir)
    assert cli("delete", "cell", "api").returncode == 1
    op = next(o for o in _ops(cli) if o["status"] == "Suspended")
    cancelled = cli("op", "cancel", op["id"])
    assert cancelled.returncode == 0, cancelled.stderr
    assert next(o for o in _ops(cli) if o["id"] == op["id"])["reason"] == "Cancelled"
    cell = json.loads(cli("get", "cell", "api", "-o", "json").stdout)
    assert "deletionTimestamp" not in cell["metadata"] and cell["status"]["phase"] == "Running"

    assert _phases(cli, "cells") == {"api": "Running"}  # no longer being deleted

    forced = cli("delete", "cell", "api", "--approve")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout == "cell/api deleted\n"
    assert cli("get", "cell", "api").returncode == 1
    events = cli("get", "events").stdout
    assert "approved up front" in events


def test_clean_workspace_deletes_without_asking(cli: Cli, state_dir: Path) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    assert cli("delete", "cell", "api").returncode == 0
    assert not any(o["status"] == "Suspended" for o in _ops(cli))
