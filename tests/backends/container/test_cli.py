"""`devcell exec`, `devcell logs` and `devcell image build-base`, run as a user runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.backends.engine import IMAGE
from tests.conftest import REPO, Cli

CANARY = "canary-cli-7f3a9c"


def _manifest(tmp_path: Path, backend: str = "container") -> Path:
    path = tmp_path / "cell.yaml"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: box}}
        spec:
          backend: {backend}
          image: {IMAGE}
          network: {{mode: none}}
          env:
            - {{name: TOKEN, value: {CANARY}, secret: true}}
          services:
            - name: talker
              command: [sh, -c, "echo hello from talker; while true; do sleep 0.2; echo tick; done"]
            - name: quiet
              command: [sleep, "600"]
        """))
    return path


@pytest.fixture
def box(engine: None, cli: Cli, tmp_path: Path, state: Path) -> str:
    applied = cli("apply", "-f", str(_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    return "box"


def test_exec_passes_output_and_exit_status_through(cli: Cli, box: str) -> None:
    result = cli("exec", box, "--", "sh", "-c", "echo out; echo err >&2; exit 42")
    assert result.returncode == 42
    assert result.stdout == "out\n" and result.stderr == "err\n"
    ok = cli("exec", box, "--", "sh", "-c", 'test "$TOKEN" = ' + CANARY)
    assert ok.returncode == 0, ok.stderr


def test_exec_in_a_stopped_cell_says_how_to_start_it(cli: Cli, box: str) -> None:
    assert cli("cell", "sleep", box).returncode == 0
    result = cli("exec", box, "--", "true")
    assert result.returncode == 1
    assert "not running" in result.stderr and "devcell cell start box" in result.stderr
    assert "Traceback" not in result.stderr


def test_logs_of_one_service_or_all(cli: Cli, box: str) -> None:
    deadline = time.monotonic() + 10
    while "hello from talker" not in cli("logs", box, "talker").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    both = cli("logs", box).stdout
    assert "[talker] hello from talker" in both and "[quiet] [devcell" in both
    missing = cli("logs", box, "nope")
    assert missing.returncode == 1 and "no service 'nope'" in missing.stderr


def test_logs_follow_streams_until_interrupted(box: str, state_dir: Path) -> None:
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "logs", box, "talker", "-f"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(4)]
        assert any(b"tick" in line for line in lines), lines
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0


def test_secret_is_not_shown_by_get_or_describe(cli: Cli, box: str) -> None:
    for args in (("get", "cells", "-o", "yaml"), ("get", "cells", "-o", "json"),
                 ("describe", "cell", box), ("get", "events")):
        result = cli(*args)
        assert result.returncode == 0 and CANARY not in result.stdout + result.stderr, args


def test_exec_on_the_fake_backend_is_refused(cli: Cli, tmp_path: Path) -> None:
    assert cli("apply", "-f", str(_manifest(tmp_path, backend="fake"))).returncode == 0
    result = cli("exec", "box", "--", "true")
    assert result.returncode == 1 and "capability exec" in result.stderr


def test_exec_needs_a_command(cli: Cli) -> None:
    result = cli("exec", "box")
    assert result.returncode == 2 and "after --" in result.stderr


def test_build_base_is_idempotent(engine: None, cli: Cli) -> None:
    result = cli("image", "build-base")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"image/{IMAGE} unchanged")


def test_unreachable_engine_from_the_cli(cli: Cli, tmp_path: Path) -> None:
    env = {"DOCKER_HOST": "unix:///nonexistent"}
    applied = cli("apply", "-f", str(_manifest(tmp_path)), env=env)
    assert applied.returncode == 1
    assert "cannot reach the Docker engine at unix:///nonexistent" in applied.stderr
    assert "Traceback" not in applied.stderr
    described = cli("describe", "cell", "box").stdout
    assert "BackendUnavailable" in described
    built = cli("image", "build-base", env=env)
    assert built.returncode == 1 and "Traceback" not in built.stderr
