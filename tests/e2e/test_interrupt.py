"""Ctrl-C during a parallel `devcell apply`: steps in flight finish and are recorded, the
reconcile lock is held until they have, and nothing is left Running."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.conftest import REPO, Cli

pytestmark = pytest.mark.e2e


def _lock_is_held(state_dir: Path) -> bool:
    fd = os.open(state_dir / "reconcile.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_two_interrupts_still_wait_for_the_steps_in_flight(cli: Cli, state_dir: Path,
                                                           tmp_path: Path) -> None:
    manifests = tmp_path / "m"
    manifests.mkdir()
    for i in range(6):
        (manifests / f"c{i}.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Cell\n"
            f"metadata: {{name: c{i}}}\nspec: {{backend: fake}}\n")
    env = dict(os.environ, DEVCELL_HOME=str(state_dir), DEVCELL_FAKE_DELAY="start:2")
    env.pop("DEVCELL_FAKE_FAIL", None)
    # child_setup: SIGINT at its default in the child, even when pytest runs with SIGINT
    # ignored (a CI shell's background job), else Ctrl-C would never reach devcell
    proc = subprocess.Popen(
        [sys.executable, "-m", "devcell", "apply", "-f", str(manifests), "--workers", "2"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=processes.child_setup)
    try:
        _interrupt_twice(cli, proc, state_dir, manifests)
    finally:
        processes.end(proc)


def _interrupt_twice(cli: Cli, proc: subprocess.Popen[str], state_dir: Path,
                     manifests: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until two start steps are in flight
        ops = cli("get", "operations", "-o", "json")
        running = [o for o in json.loads(ops.stdout)["items"]
                   if o["status"] == "Running"] if ops.returncode == 0 else []
        if len(running) == 2:
            break
        time.sleep(0.05)
    else:
        pytest.fail("two operations never ran at once")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None, "exited while steps were in flight"
    assert _lock_is_held(state_dir)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "finishing the steps in flight" in stderr and "Traceback" not in stderr
    ops = json.loads(cli("get", "operations", "-o", "json").stdout)["items"]
    assert ops and all(o["status"] != "Running" for o in ops), ops
    assert len(ops) == 2  # no operation started after the interrupt
    assert not _lock_is_held(state_dir)
    # the next apply finishes the job
    again = cli("apply", "-f", str(manifests))
    assert again.returncode == 0, again.stderr
    cells = json.loads(cli("get", "cells", "-o", "json").stdout)["items"]
    assert len(cells) == 6 and {c["status"]["phase"] for c in cells} == {"Running"}


def test_an_interrupted_delete_says_the_deletion_is_requested(cli: Cli, state_dir: Path) -> None:
    """Never `deleted` for a cell that is not gone: interrupted mid-delete, the line says
    what was recorded."""
    from tests.conftest import EXAMPLES

    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    env = dict(os.environ, DEVCELL_HOME=str(state_dir), DEVCELL_FAKE_DELAY="stop:3")
    env.pop("DEVCELL_FAKE_FAIL", None)
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "delete", "cell", "api"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=processes.child_setup)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until the stop step is in flight
            ops = json.loads(cli("get", "operations", "-o", "json").stdout)["items"]
            if any(o["action"] == "delete" and o["status"] == "Running" for o in ops):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        processes.end(proc)
    assert proc.returncode == 130, err
    assert out == "cell/api deletion requested\n"
