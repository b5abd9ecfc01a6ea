"""Freezing a cell for a checkpoint through its cgroup freezer, on the real engine: the
processes stop (a counter stops counting) while the engine still lists the container
running; resume thaws; a cell left frozen by a killed process is observed frozen and
resumed, and can be stopped and deleted without waiting on a process that cannot run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from devcell.backends.container import freezer
from devcell.backends.container.backend import QUIESCED, ContainerBackend
from tests.backends.container.support import cell, up, wait_for

COUNTER = {"name": "count", "command": [
    "sh", "-c", "i=0; while true; do i=$((i+1)); echo $i > /workspace/n.tmp; "
                "mv /workspace/n.tmp /workspace/n; sleep 0.02; done"]}


def _container(docker_client: Any, backend: ContainerBackend, ref: Any) -> dict[str, Any]:
    info = backend._find(ref)
    assert info is not None
    found: dict[str, Any] = docker_client.api.inspect_container(info["Id"])
    return found


def _count(workspace: Path) -> int:
    return int(wait_for(lambda: (workspace / "n").exists() and (workspace / "n").read_text()
                        .strip() or None))


def test_quiesce_freezes_the_processes_behind_the_engine_and_resume_thaws(
        backend: ContainerBackend, docker_client: Any) -> None:
    ref = cell(services=[COUNTER])
    up(backend, ref)
    workspace = backend.layout.workspace(ref.volume_id or "")
    wait_for(lambda: (workspace / "n").exists())
    found = freezer.of_container(_container(docker_client, backend, ref)["Id"])
    assert found is not None, "this machine's engine puts groups where container/freezer.py looks"
    backend.quiesce(ref)
    assert found.state() is freezer.State.FROZEN
    assert _container(docker_client, backend, ref)["State"]["Status"] == "running"
    assert backend.observe(ref).frozen
    stopped = _count(workspace)
    time.sleep(0.3)
    assert _count(workspace) == stopped, "frozen processes do not count"
    backend.checkpoint(ref, "snap_frozen")
    assert found.state() is freezer.State.FROZEN, "the checkpoint leaves the freeze to resume"
    backend.resume(ref)
    assert found.state() is freezer.State.THAWED and not backend.observe(ref).frozen
    wait_for(lambda: _count(workspace) > stopped)


def test_a_cell_a_kill_left_frozen_is_resumed_stopped_and_deleted(
        backend: ContainerBackend, docker_client: Any) -> None:
    ref = cell(services=[COUNTER])
    up(backend, ref)
    backend.quiesce(ref)  # and then the process that froze it died
    container_id = _container(docker_client, backend, ref)["Id"]
    found = freezer.of_container(container_id)
    assert found is not None and found.state() is freezer.State.FROZEN
    assert (backend.layout.run_dir(ref.id) / QUIESCED).exists()
    assert backend.observe(ref).frozen  # so the controller plans a resume first
    started = time.monotonic()
    backend.stop(ref)  # thawed first: SIGTERM reaches the shell, no 10 s stop timeout
    assert time.monotonic() - started < 8
    assert _container(docker_client, backend, ref)["State"]["Status"] == "exited"
    backend.start(ref)
    backend.quiesce(ref)
    backend.delete(ref)  # removal thaws too: a frozen v1 process cannot even die
    assert backend._find(ref) is None


def test_a_checkpoint_without_quiesce_freezes_and_thaws_itself(
        backend: ContainerBackend, docker_client: Any) -> None:
    ref = cell(services=[COUNTER])
    up(backend, ref)
    backend.checkpoint(ref, "snap_alone")
    found = freezer.of_container(_container(docker_client, backend, ref)["Id"])
    assert found is not None and found.state() is freezer.State.THAWED
    assert not backend.observe(ref).frozen


def test_a_checkpoint_that_freezes_a_cell_itself_marks_it_frozen_meanwhile(
        backend: ContainerBackend, docker_client: Any, monkeypatch: Any) -> None:
    """Killed while frozen, such a checkpoint must leave the cell observed frozen (and so
    resumed), as quiesce does."""
    ref = cell(services=[COUNTER])
    up(backend, ref)
    seen: list[bool] = []
    real = backend.store.checkpoint

    def watched(**kwargs: Any) -> Any:
        seen.append(backend.observe(ref).frozen)
        return real(**kwargs)

    monkeypatch.setattr(backend.store, "checkpoint", watched)
    backend.checkpoint(ref, "snap_marked")
    assert seen == [True]
    assert not backend.observe(ref).frozen
    assert not (backend.layout.run_dir(ref.id) / QUIESCED).exists()
