"""Idle sleep and wake on access against the real engine and a running daemon: an exec
session open past `sleepAfter` keeps a container cell awake, its close lets the daemon put the
cell to sleep at the deadline (with the reason), and the next exec wakes it and says so.

Costs one container cell and a daemon: about 30 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.store import activity
from tests.backends.container.support import box_manifest, wait_for
from tests.conftest import REPO, Cli

SLEEP_AFTER = 3


def _phase(cli: Cli) -> str:
    return cli("get", "cells").stdout.splitlines()[1].split()[3]


@pytest.fixture
def idle_box(engine: None, cli: Cli, tmp_path: Path, state: Path) -> Path:
    path = box_manifest(tmp_path)
    path.write_text(path.read_text() + f"  idle: {{sleepAfter: {SLEEP_AFTER}s}}\n")
    applied = cli("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    return path


@pytest.fixture
def daemon(idle_box: Path, state_dir: Path, tmp_path: Path) -> Iterator[None]:
    manifests = tmp_path / "gitops"
    manifests.mkdir()
    (manifests / "box.yaml").write_text(idle_box.read_text())
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "controller", "run", "--manifests",
                             str(manifests), "--resync", "0"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cell_id(cli: Cli) -> str:
    return cli("get", "cell", "box", "-o", "jsonpath={.metadata.id}").stdout.strip()


def test_an_open_exec_keeps_it_awake_its_close_lets_it_sleep_and_exec_wakes_it(
        cli: Cli, daemon: None, state_dir: Path) -> None:
    cell_id = _cell_id(cli)
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    hold = SLEEP_AFTER * 3
    session = subprocess.Popen([sys.executable, "-m", "devcell", "exec", "box", "--", "sleep",
                                str(hold)], env=env, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        wait_for(lambda: activity.seen(state_dir, cell_id).open, timeout=60)
        time.sleep(SLEEP_AFTER * 2)  # well past the deadline, with the session open
        assert _phase(cli) == "Running"
        described = cli("describe", "cell", "box").stdout
        assert "Idle sleep:" in described and "active: exec session since" in described
    finally:
        _, err = session.communicate(timeout=120)
    assert session.returncode == 0, err
    wait_for(lambda: _phase(cli) == "Sleeping", timeout=120, interval=0.5)
    events = cli("describe", "cell", "box").stdout
    assert f"idle for {SLEEP_AFTER}s: last activity exec session closed at" in events

    woken = cli("exec", "box", "--", "echo", "hello")
    assert woken.returncode == 0, woken.stderr
    assert woken.stdout == "hello\n"
    assert "cell box is asleep; waking it for exec..." in woken.stderr
    assert "cell box woken in " in woken.stderr
