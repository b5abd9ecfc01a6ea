"""`devcell gc --approve` raced against every verb that places storage (store/storage_lock.py).

Each verb is held, as a real process, at the moment its storage is in place and its record not
yet written (a pause point); `gc --approve` is started then. Before the storage lock, gc judged
that storage an orphan and removed it: the import said success and the snapshot showed Ready,
then `export` said its checkpoint did not exist. Now gc waits for the verb, and what the verb
made is there afterwards. The fake backend keeps its volumes and checkpoints as records gc
collects like any other backend's, so the race is the same without an engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

CELL = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "api"},
        "spec": {"backend": "fake"}}
SNAP = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Snapshot", "metadata": {"name": "s1"},
        "spec": {"cell": "api"}}


def _env(state: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, DEVCELL_HOME=str(state), **extra)
    env.pop("DEVCELL_FAKE_FAIL", None)
    return env


def _devcell(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                          text=True, env=_env(state), cwd=REPO, timeout=120)


def _start(state: Path, args: list[str], **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "devcell", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(state, **extra),
                            cwd=REPO)


def _gc_held_back(state: Path, pause: Path, held: subprocess.Popen[str],
                  what: str) -> subprocess.Popen[str]:
    """Once `held` reaches its pause point, `gc --approve` started: still waiting 1 s later."""
    deadline = time.monotonic() + 60
    while not Path(str(pause) + ".reached").exists():
        assert held.poll() is None, held.communicate()
        assert time.monotonic() < deadline, f"{what}: the pause point was never reached"
        time.sleep(0.02)
    gc = _start(state, ["gc", "--approve"])
    time.sleep(1.0)
    assert gc.poll() is None, (f"gc did not wait for {what}", gc.communicate())
    return gc


@pytest.mark.parametrize(("verb", "point", "made"), [
    (["snapshot", "import", "{archive}", "--name", "s2"], "import.before-record",
     ["snapshot", "export", "s2", "-o", "{out}"]),
    (["snapshot", "create", "api", "--name", "s3"], "step.checkpoint.after-call",
     ["snapshot", "export", "s3", "-o", "{out}"]),
    (["cell", "fork", "api", "--snapshot", "s1", "--name", "f1"],
     "step.create-volume.after-call", ["describe", "cell", "f1"]),
    (["snapshot", "restore", "s1", "--approve"], "step.checkpoint.after-call",
     ["get", "snapshots", "-o", "name"]),
], ids=["import", "snapshot-create", "fork", "restore"])
def test_gc_waits_for_a_verb_placing_storage_and_removes_none_of_it(
        tmp_path: Path, verb: list[str], point: str, made: list[str]) -> None:
    state = tmp_path / "state"
    manifest = tmp_path / "api.yaml"
    manifest.write_text(yaml.safe_dump(CELL) + "---\n" + yaml.safe_dump(SNAP))
    assert _devcell(state, "apply", "-f", str(manifest)).returncode == 0
    archive = tmp_path / "s1.tar"
    assert _devcell(state, "snapshot", "export", "s1", "-o", str(archive)).returncode == 0
    fill = {"archive": str(archive), "out": str(tmp_path / "out.tar")}

    pause = tmp_path / "pause"
    pause.write_text("")
    held = _start(state, [a.format(**fill) for a in verb], DEVCELL_PAUSEPOINT=point,
                  DEVCELL_PAUSEPOINT_FILE=str(pause))
    try:
        gc = _gc_held_back(state, pause, held, "the verb placing storage")
    finally:
        pause.unlink()
    out, err = held.communicate(timeout=120)
    assert held.returncode == 0, (out, err)
    gc_out, gc_err = gc.communicate(timeout=120)
    assert gc.returncode == 0, (gc_out, gc_err)
    after = _devcell(state, *[a.format(**fill) for a in made])
    assert after.returncode == 0, after.stderr
    if verb[1] == "fork":
        assert "Phase:" in after.stdout and "Running" in after.stdout, after.stdout
    listed = _devcell(state, "get", "snapshots")
    assert "Failed" not in listed.stdout, listed.stdout


def test_gc_waits_for_the_daemon_placing_a_checkpoint(tmp_path: Path) -> None:
    """Under the daemon no reconcile lock is held by the verb: only the storage lock keeps a
    collection from judging a checkpoint its worker has placed and not yet recorded."""
    state, watched = tmp_path / "state", tmp_path / "manifests"
    watched.mkdir()
    (watched / "api.yaml").write_text(yaml.safe_dump(CELL))
    pause = tmp_path / "pause"
    pause.write_text("")
    daemon = _start(state, ["controller", "run", "--manifests", str(watched)],
                    DEVCELL_PAUSEPOINT="step.checkpoint.after-call",
                    DEVCELL_PAUSEPOINT_FILE=str(pause))
    gc: subprocess.Popen[str] | None = None
    try:
        (watched / "s1.yaml").write_text(yaml.safe_dump(SNAP))
        gc = _gc_held_back(state, pause, daemon, "the daemon's checkpoint")
        pause.unlink()
        gc_out, gc_err = gc.communicate(timeout=120)
        assert gc.returncode == 0, (gc_out, gc_err)
        deadline = time.monotonic() + 30
        while "Ready" not in _devcell(state, "get", "snapshot", "s1").stdout:
            assert time.monotonic() < deadline, _devcell(state, "get", "snapshot", "s1")
            time.sleep(0.1)
        exported = _devcell(state, "snapshot", "export", "s1", "-o", str(tmp_path / "s1.tar"))
        assert exported.returncode == 0, exported.stderr
    finally:
        if pause.exists():
            pause.unlink()
        daemon.terminate()
        daemon.communicate(timeout=60)
        if gc is not None and gc.poll() is None:
            gc.kill()
