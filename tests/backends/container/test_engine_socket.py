"""The snapshot path's engine calls over the socket (container_observe), on the real engine:
pause and unpause classified as the SDK's errors are, and `devcell snapshot create` of a
container cell importing no part of the docker SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import observe as container_observe
from devcell.backends.container.backend import ContainerBackend
from devcell.backends.container.spec import CELL_ID
from devcell.errors import BackendConflict, BackendError, BackendNotFound
from tests.backends.container.support import box_manifest, cell, up
from tests.conftest import REPO, Cli

SDK = ("docker", "requests", "urllib3")
UNUSED_ON_THE_SNAPSHOT_PATH = (
    *SDK,
    "loguru", "asyncio", "multiprocessing",  # devcell.log: loguru only when a record is shown
    "http", "email", "ssl",  # engine_http speaks to the engine without http.client
    "concurrent", "logging",  # a pool only where one is made
    "tarfile", "secrets",  # images and archives are not this path's work
    "socket",  # `_socket` is enough: socket.py builds its enums at import (~2 ms)
)
"""Top-level modules a `devcell snapshot create` or `cell sleep` of a container cell without
hooks, logging nothing, never imports (each is start-up time paid for nothing)."""


def _state(docker_client: Any, container_id: str) -> dict[str, Any]:
    found: dict[str, Any] = docker_client.api.inspect_container(container_id)["State"]
    return found


def test_pause_and_unpause_over_the_socket(backend: ContainerBackend, state: Path,
                                           docker_client: Any) -> None:
    ref = cell(services=[{"name": "idle", "command": ["sleep", "600"]}])
    up(backend, ref)
    listed = container_observe.list_labelled(state, labels={CELL_ID: ref.id})
    assert listed is not None and len(listed) == 1
    container_id = listed[0]["Id"]
    assert container_observe.pause(container_id, "freezing") is True
    assert _state(docker_client, container_id)["Paused"] is True
    assert backend.observe(ref).frozen
    with pytest.raises(BackendConflict, match="freezing again: .*already paused"):
        container_observe.pause(container_id, "freezing again")
    assert container_observe.unpause(container_id, "thawing") is True
    found = _state(docker_client, container_id)
    assert found["Paused"] is False and found["Running"] is True
    with pytest.raises(BackendError, match="thawing again: .*not paused"):  # the engine: 500
        container_observe.unpause(container_id, "thawing again")


def test_a_container_that_is_gone_or_a_bad_id(engine: None) -> None:
    with pytest.raises(BackendNotFound, match="freezing: "):
        container_observe.pause("0" * 64, "freezing")
    with pytest.raises(BackendError, match="not a container id"):
        container_observe.unpause("../../version", "thawing")


def test_the_labels_filter_lists_one_cell_only(backend: ContainerBackend, state: Path) -> None:
    one, two = cell("one"), cell("two")
    for ref in (one, two):
        backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
        backend.create(ref, "h1")
    listed = container_observe.list_labelled(state, labels={CELL_ID: two.id})
    assert listed is not None
    assert [c["Labels"][CELL_ID] for c in listed] == [two.id]
    assert len(container_observe.list_containers(state)) == 2


def test_snapshot_create_imports_no_part_of_the_sdk(engine: None, cli: Cli, tmp_path: Path,
                                                    state: Path) -> None:
    applied = cli("apply", "-f", str(box_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    for name in ("s1", "s2"):  # the second names the first's tree: nothing changed
        made = subprocess.run(
            [sys.executable, "-c", _LISTING, "snapshot", "create", "box", "--name", name],
            capture_output=True, text=True, env=dict(os.environ, DEVCELL_HOME=str(state)),
            cwd=REPO, timeout=120)
        assert made.returncode == 0, made.stderr[-2000:]
        imported = made.stdout.rpartition("MODULES ")[2].split()
        assert "devcell.backends.container.backend" in imported  # the listing is there to read
        assert not [m for m in imported if m.split(".")[0] in UNUSED_ON_THE_SNAPSHOT_PATH]
    snaps = json.loads(cli("get", "snapshots", "-o", "json").stdout)["items"]
    assert {s["metadata"]["name"]: s["status"]["phase"] for s in snaps} == {
        "s1": "Ready", "s2": "Ready"}
    cells = json.loads(cli("get", "cells", "box", "-o", "json").stdout)
    assert cells["status"]["phase"] == "Running"
    states = [c["State"] for c in container_observe.list_containers(state)]
    assert states == ["running"]  # thawed after each checkpoint


def test_cell_sleep_imports_neither_the_sdk_nor_loguru(engine: None, cli: Cli, tmp_path: Path,
                                                       state: Path) -> None:
    """Sleep is a checkpoint and the container's stop (POST /stop over the socket: the
    stopped container keeps its root filesystem, issue 30)."""
    applied = cli("apply", "-f", str(box_manifest(tmp_path)))
    assert applied.returncode == 0, applied.stderr
    slept = subprocess.run([sys.executable, "-c", _LISTING, "cell", "sleep", "box"],
                           capture_output=True, text=True,
                           env=dict(os.environ, DEVCELL_HOME=str(state)), cwd=REPO, timeout=120)
    assert slept.returncode == 0, slept.stderr[-2000:]
    imported = slept.stdout.rpartition("MODULES ")[2].split()
    assert "devcell.backends.container.backend" in imported
    assert not [m for m in imported if m.split(".")[0] in UNUSED_ON_THE_SNAPSHOT_PATH]
    assert [c["State"] for c in container_observe.list_containers(state)] == ["exited"]
    cells = json.loads(cli("get", "cells", "box", "-o", "json").stdout)
    assert cells["status"]["phase"] == "Sleeping"
    started = cli("cell", "start", "box")
    assert started.returncode == 0, started.stderr
    assert [c["State"] for c in container_observe.list_containers(state)] == ["running"]


_LISTING = """
import atexit, sys
atexit.register(lambda: sys.__stdout__.write("\\nMODULES " + " ".join(sorted(sys.modules))))
sys.argv[0] = "devcell"
from devcell.cli.main import main
main()
"""
"""`devcell ARGS` as the console script runs it, listing every module it imported at exit."""


def test_an_engine_that_just_answered_is_not_asked_again(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """reachable() trusts an answer from the same address less than a second old (the
    snapshot's observe-first listing), and asks again once it is older."""
    from devcell.errors import BackendUnavailable

    address = f"unix://{tmp_path}/gone.sock"  # nothing listens: asking would fail
    monkeypatch.setenv("DOCKER_HOST", address)
    monkeypatch.setattr(container_observe, "_answered", {address: time.monotonic()})
    assert container_observe.reachable() is True
    container_observe._answered[address] -= container_observe.ANSWERED_FRESH_S
    with pytest.raises(BackendUnavailable, match="no such socket"):
        container_observe.reachable()
