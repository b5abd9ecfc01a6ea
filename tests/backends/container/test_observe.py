"""Observe before acting, against the real engine (issue 10, item 7): a container stopped,
paused or killed behind DevCell's back is seen by the next command and by the daemon, and the
observation costs one list call made without the docker SDK."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import observe as container_observe
from devcell.backends.container.backend import ContainerBackend
from tests.backends.container.support import box_manifest, cell, up, wait_for
from tests.conftest import REPO, Cli


def test_one_list_call_observes_what_observe_sees(backend: ContainerBackend, state: Path,
                                                  docker_client: Any) -> None:
    refs = [cell("a"), cell("b"), cell("c")]
    for ref in refs:
        up(backend, ref)
    docker_client.containers.get(backend.container_name(refs[1])).pause()
    docker_client.containers.get(backend.container_name(refs[2])).stop(timeout=1)
    try:
        listed = container_observe.observe_all(state)
        for ref in refs:
            one = backend.observe(ref)
            assert (listed[ref.id].running, listed[ref.id].frozen, listed[ref.id].runtime_hash) \
                == (one.running, one.frozen, one.runtime_hash)
        assert [listed[r.id].detail["state"] for r in refs] == ["running", "paused", "exited"]
    finally:
        docker_client.containers.get(backend.container_name(refs[1])).unpause()


def _container(docker_client: Any, state: Path) -> Any:
    from devcell.backends.host.ids import state_hash

    found = docker_client.containers.list(
        all=True, filters={"label": f"dev.devcell.state-dir={state_hash(state)}"})
    assert len(found) == 1, found
    return found[0]


def _phase(cli: Cli) -> str:
    return cli("get", "cells").stdout.splitlines()[1].split()[3]


@pytest.fixture
def box(engine: None, cli: Cli, tmp_path: Path, state: Path) -> str:
    """The cell `box` in the `cli` fixture's state directory (`state`: removed afterwards)."""
    path = str(box_manifest(tmp_path))
    applied = cli("apply", "-f", path)
    assert applied.returncode == 0, applied.stderr
    return path


@pytest.mark.parametrize("how", ["stop", "pause"])
@pytest.mark.parametrize("verb", ["apply", "cell start"])
def test_a_container_changed_behind_devcells_back_is_repaired(
        cli: Cli, box: str, state_dir: Path, docker_client: Any, how: str, verb: str) -> None:
    container = _container(docker_client, state_dir)
    getattr(container, how)(**({"timeout": 1} if how == "stop" else {}))
    args = ["apply", "-f", box] if verb == "apply" else ["cell", "start", "box"]
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "cell/box repaired"
    container.reload()
    assert container.status == "running"
    assert _phase(cli) == "Running"


def test_a_no_op_reapply_of_container_cells_never_imports_the_docker_sdk(
        cli: Cli, box: str, state_dir: Path) -> None:
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "devcell", "apply", "-f",
                          box], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "cell/box unchanged", out.stderr
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines()}
    assert not {m for m in imported if m.split(".")[0] in ("docker", "requests", "urllib3")}


@pytest.fixture
def daemon(box: str, state_dir: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    manifests = tmp_path / "gitops"
    manifests.mkdir()
    (manifests / "box.yaml").write_text(Path(box).read_text())
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    proc = subprocess.Popen([sys.executable, "-m", "devcell", "controller", "run", "--manifests",
                             str(manifests), "--resync", "0"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_daemon_restarts_a_killed_container_at_once(
        cli: Cli, daemon: subprocess.Popen[bytes], state_dir: Path, docker_client: Any) -> None:
    """With the periodic resync off, only the engine's event stream can bring it back."""
    container = _container(docker_client, state_dir)
    time.sleep(1.5)  # the daemon is up and follows the events
    started = container.attrs["State"]["StartedAt"]
    container.kill()

    def back() -> bool:
        container.reload()
        return container.status == "running" and container.attrs["State"]["StartedAt"] != started

    wait_for(back, timeout=20)
    wait_for(lambda: _phase(cli) == "Running", timeout=10)
