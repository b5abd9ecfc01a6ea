"""SIGINT and SIGTERM at each step of checkpoint, restore, sleep, fork and import.

The crash matrix (test_crash_matrix.py) kills with SIGKILL: nothing can run after, and the
next command's recovery fails what was interrupted. A user's Ctrl-C, or a service manager's
SIGTERM, can be answered: the step in flight is recorded as interrupted, the plan's
compensations run (a frozen cell resumed, a stopped one started again) and the command exits
130 or 143. Before, Ctrl-C during `snapshot create` left the cell frozen while `get` said
Running, and SIGTERM ended `snapshot restore` on the spot (143, the cell stopped).

Each case runs the verb as a real process held at `step.<name>.before-call` (a pause point),
signals it there, and checks: the exit code, the operation recorded Failed with "interrupted",
the cell not frozen and in the state it had before the verb, and the next apply of the same
manifests converging. The steps of each verb are read from a run that was not interrupted, so
a step added later is covered too. Fake backend: its freeze and stop are recorded like an
engine's (`frozen`, `state` in its own database).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.e2e

CELL = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "api"},
        "spec": {"backend": "fake"}}
SNAP = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot", "metadata": {"name": "s1"},
        "spec": {"cell": "api"}}
VERBS: dict[str, list[str]] = {
    "snapshot": ["snapshot", "create", "api", "--name", "s2"],
    "restore": ["snapshot", "restore", "s1", "--approve"],
    "sleep": ["cell", "sleep", "api"],
    "fork": ["cell", "fork", "api", "--snapshot", "s1", "--name", "f1"],
}
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, DEVCELL_HOME=str(state), **extra)
    for var in ("DEVCELL_FAKE_FAIL", "DEVCELL_FAILPOINT"):
        env.pop(var, None)
    return env


def _devcell(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                          text=True, env=_env(state), cwd=REPO, timeout=120)


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    state = tmp_path / "state"
    manifest = tmp_path / "m.yaml"
    manifest.write_text(yaml.safe_dump(CELL) + "---\n" + yaml.safe_dump(SNAP))
    done = _devcell(state, "apply", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    return state, manifest


def _runtime(state: Path) -> dict[str, tuple[str, int]]:
    conn = sqlite3.connect(state / "backends" / "fake.db")
    try:
        return {i: (s, f) for i, s, f in conn.execute("SELECT id, state, frozen FROM cells")}
    finally:
        conn.close()


def _last_operation(state: Path) -> dict[str, Any]:
    conn = sqlite3.connect(state / "state.db")
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT * FROM operations ORDER BY rowid DESC LIMIT 1").fetchone()
        steps = conn.execute("SELECT name, status, error FROM operation_steps WHERE op_id = ? "
                             "ORDER BY idx", (row["id"],)).fetchall()
        return {**dict(row), "steps": [dict(s) for s in steps]}
    finally:
        conn.close()


def _steps_of(tmp_path: Path, verb: str) -> list[str]:
    state, _ = _setup(tmp_path / f"plain-{verb}")
    done = _devcell(state, *VERBS[verb])
    assert done.returncode == 0, done.stderr
    return [s["name"] for s in _last_operation(state)["steps"] if s["status"] == "Succeeded"]


def _cases() -> list[tuple[str, int, str]]:
    return [(verb, sig, point) for verb in VERBS for sig in (signal.SIGINT, signal.SIGTERM)
            for point in ("before-call", "after-call")]


@pytest.mark.parametrize(("verb", "sig", "point"), _cases(),
                         ids=[f"{v}-{signal.Signals(s).name}-{p}" for v, s, p in _cases()])
def test_an_interrupt_at_any_step_leaves_the_cell_as_it_was(
        tmp_path: Path, verb: str, sig: int, point: str) -> None:
    """`before-call`: the signal lands in the step's backend call. `after-call`: between
    steps, while the step's result is being recorded (it was taken at the next step, or
    once the operation was recorded, instead of skipping the compensations)."""
    steps = _steps_of(tmp_path, verb)
    assert steps, verb
    for n, step in enumerate(steps):
        last = point == "after-call" and n == len(steps) - 1
        where = tmp_path / f"{step}"
        where.mkdir()
        state, manifest = _setup(where)
        before = _runtime(state)
        pause = where / "pause"
        pause.write_text("")
        held = subprocess.Popen(
            [sys.executable, "-m", "devcell", *VERBS[verb]], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=REPO,
            env=_env(state, DEVCELL_PAUSEPOINT=f"step.{step}.{point}",
                     DEVCELL_PAUSEPOINT_FILE=str(pause)))
        deadline = time.monotonic() + 60
        while not Path(str(pause) + ".reached").exists():
            assert held.poll() is None, (step, held.communicate())
            assert time.monotonic() < deadline, f"{verb} never reached step {step}"
            time.sleep(0.02)
        held.send_signal(sig)
        time.sleep(0.2)  # taken (or, between steps, held) before the pause ends
        pause.unlink()
        out, err = held.communicate(timeout=120)
        case = f"{verb}, {signal.Signals(sig).name} at step {step} {point}: {err}"
        assert held.returncode == EXIT[sig], case
        assert "Traceback" not in err, case
        op = _last_operation(state)
        if last:  # every step had run: the operation is recorded done, then the exit
            assert op["status"] == "Succeeded", (case, op)
            assert all(f == 0 for _, f in _runtime(state).values()), case
            continue
        assert op["status"] == "Failed" and "interrupted" in (op["message"] or ""), (case, op)
        after = _runtime(state)
        for cell_id, (runtime, frozen) in before.items():
            assert after.get(cell_id) == (runtime, 0), (case, before, after)
            assert frozen == 0
        listed = json.loads(_devcell(state, "get", "cells", "-o", "json").stdout)
        phases = {c["metadata"]["name"]: c["status"]["phase"] for c in listed["items"]}
        assert phases.get("api") == "Running", (case, phases)
        assert "Frozen" not in _devcell(state, "get", "cells").stdout, case  # resumed, unmarked
        again = _devcell(state, "apply", "-f", str(manifest))
        assert again.returncode == 0, (case, again.stderr)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_import_leaves_nothing_behind(tmp_path: Path, sig: int) -> None:
    """Held with its checkpoint placed and its snapshot not yet recorded, then signalled:
    the checkpoint is removed again, no snapshot is recorded, and the import can be redone."""
    state, _ = _setup(tmp_path)
    archive = tmp_path / "s1.tar"
    assert _devcell(state, "snapshot", "export", "s1", "-o", str(archive)).returncode == 0
    conn = sqlite3.connect(state / "backends" / "fake.db")
    checkpoints = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    conn.close()
    pause = tmp_path / "pause"
    pause.write_text("")
    held = subprocess.Popen(
        [sys.executable, "-m", "devcell", "snapshot", "import", str(archive), "--name", "s2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env=_env(state, DEVCELL_PAUSEPOINT="import.before-record",
                 DEVCELL_PAUSEPOINT_FILE=str(pause)))
    deadline = time.monotonic() + 60
    while not Path(str(pause) + ".reached").exists():
        assert held.poll() is None and time.monotonic() < deadline, held.communicate()
        time.sleep(0.02)
    held.send_signal(sig)
    _, err = held.communicate(timeout=120)
    pause.unlink()
    assert held.returncode == EXIT[sig] and "Traceback" not in err, err
    conn = sqlite3.connect(state / "backends" / "fake.db")
    assert conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == checkpoints
    conn.close()
    assert "s2" not in _devcell(state, "get", "snapshots").stdout
    op = _last_operation(state)  # said, not silent: the import's operation, Failed
    assert (op["action"], op["status"], op["reason"]) == ("import", "Failed", "Interrupted"), op
    assert "nothing was imported" in op["message"]
    again = _devcell(state, "snapshot", "import", str(archive), "--name", "s2")
    assert again.returncode == 0, again.stderr


def test_a_cell_left_frozen_by_a_killed_snapshot_shows_as_frozen_until_resumed(
        tmp_path: Path) -> None:
    """SIGKILL (nothing can run after it) between quiesce and resume: the cell is frozen, and
    `get cells` says so instead of Running; the next apply resumes it and says Running."""
    state, manifest = _setup(tmp_path)
    env = dict(_env(state), DEVCELL_FAILPOINT="step.checkpoint.before-call")
    killed = subprocess.run([sys.executable, "-m", "devcell", *VERBS["snapshot"]],
                            capture_output=True, text=True, cwd=REPO, timeout=120, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert [f for _, f in _runtime(state).values()] == [1]  # really frozen
    table = _devcell(state, "get", "cells").stdout.splitlines()
    assert table[1].split()[:4] == ["api", "fake", "Running", "Frozen"], table
    again = _devcell(state, "apply", "-f", str(manifest))
    assert again.returncode == 0, again.stderr
    assert [f for _, f in _runtime(state).values()] == [0]
    table = _devcell(state, "get", "cells").stdout.splitlines()
    assert table[1].split()[:4] == ["api", "fake", "Running", "Running"], table
