"""A cell's life on the real engine: create, start, services writing, stop, recreate, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.backends.container.spec import ALLOWED_CAPS
from devcell.errors import BackendError, BackendNotFound
from tests.backends.container.support import cell, up, wait_for

WRITER = {"name": "writer",
          "command": ["sh", "-c", "echo started >> /workspace/boot.txt; "
                                  "while true; do date >> /workspace/ticks.txt; sleep 0.2; done"]}


def test_full_lifecycle_with_a_service_writing_to_the_workspace(
        backend: ContainerBackend, docker_client: Any) -> None:
    ref = cell(services=[WRITER], env=[{"name": "MODE", "value": "dev"}],
               resources={"cpus": 0.5, "memory": "64Mi"})
    workspace = backend.layout.workspace(ref.volume_id or "")
    up(backend, ref)
    observed = backend.observe(ref)
    assert observed.exists and observed.running and not observed.frozen
    assert observed.runtime_hash == "h1"
    wait_for(lambda: (workspace / "ticks.txt").exists())
    # the service's log is kept on the host, beside the workspace
    log = backend.log_paths(ref)["writer"]
    wait_for(lambda: log.exists() and "starting writer" in log.read_text())

    backend.stop(ref)
    observed = backend.observe(ref)
    assert observed.exists and not observed.running
    ticks = (workspace / "ticks.txt").read_text()
    backend.start(ref)  # a stopped cell starts again with its workspace as it was
    wait_for(lambda: (workspace / "boot.txt").read_text().count("started") == 2)
    assert (workspace / "ticks.txt").read_text().startswith(ticks)

    # recreate on a spec change (what the controller plans): the workspace is kept
    backend.stop(ref)
    backend.delete(ref)
    assert not backend.observe(ref).exists
    backend.create(ref, "h2")
    backend.start(ref)
    assert backend.observe(ref).runtime_hash == "h2"
    wait_for(lambda: (workspace / "boot.txt").read_text().count("started") == 3)

    backend.delete(ref)
    backend.delete_volume(ref.volume_id or "")
    assert not backend.observe(ref).exists and not workspace.exists()


def test_the_container_is_locked_down_and_labelled(backend: ContainerBackend,
                                                   docker_client: Any, state: Path) -> None:
    ref = cell(resources={"cpus": 0.25, "memory": "32Mi"})
    up(backend, ref)
    info = docker_client.api.inspect_container(backend.container_name(ref))
    host = info["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and set(host["CapAdd"]) <= set(ALLOWED_CAPS)
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidMode"] == "" and host["IpcMode"] in ("private", "shareable", "")
    assert host["NetworkMode"] == "none"
    assert host["NanoCpus"] == 250_000_000 and host["Memory"] == 32 * 2**20
    assert host["PidsLimit"] == 4096 and host["Init"] is True
    for mount in info["Mounts"]:
        assert Path(mount["Source"]).resolve().is_relative_to(state.resolve()), mount
    labels = info["Config"]["Labels"]
    assert labels["dev.devcell.managed"] == "true"
    assert labels["dev.devcell.cell-id"] == ref.id and labels["dev.devcell.cell"] == ref.name
    assert labels["dev.devcell.state-dir"] == backend.owner
    assert labels["dev.devcell.runtime-hash"] == "h1"


def test_services_are_restarted_by_policy(backend: ContainerBackend) -> None:
    ref = cell(services=[
        {"name": "flaky", "command": ["sh", "-c", "echo run >> /workspace/flaky; exit 3"]},
        {"name": "once", "restart": "Never",
         "command": ["sh", "-c", "echo run >> /workspace/once; exit 3"]},
        {"name": "fine", "restart": "OnFailure",
         "command": ["sh", "-c", "echo run >> /workspace/fine; exit 0"]},
    ])
    workspace = backend.layout.workspace(ref.volume_id or "")
    up(backend, ref)
    wait_for(lambda: (workspace / "flaky").exists()
             and (workspace / "flaky").read_text().count("run") >= 2, timeout=8)
    assert (workspace / "once").read_text().count("run") == 1
    assert (workspace / "fine").read_text().count("run") == 1
    log = backend.log_paths(ref)["flaky"].read_text()
    assert "flaky exited with status 3" in log
    assert backend.observe(ref).running  # the supervisor itself keeps running


def test_stop_is_prompt_and_clean(backend: ContainerBackend) -> None:
    import time

    ref = cell(services=[{"name": "sleeper", "command": ["sleep", "1000"]}])
    up(backend, ref)
    started = time.monotonic()
    backend.stop(ref)
    assert time.monotonic() - started < 4, "the supervisor should stop its services on SIGTERM"


def test_missing_image_is_a_clear_error(backend: ContainerBackend) -> None:
    ref = cell(image="devcell/not-built:1")
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    with pytest.raises(BackendNotFound, match="ImageNotFound.*devcell image build-base"):
        backend.create(ref, "h")
    assert not backend.observe(ref).exists


def test_create_needs_its_volume(backend: ContainerBackend) -> None:
    with pytest.raises(BackendNotFound, match="volume"):
        backend.create(cell(), "h")


def test_create_with_another_spec_while_running_is_refused(backend: ContainerBackend) -> None:
    ref = cell()
    up(backend, ref)
    with pytest.raises(BackendError, match="another spec"):
        backend.create(ref, "h2")
    backend.stop(ref)
    backend.create(ref, "h2")  # a stopped one is replaced
    assert backend.observe(ref).runtime_hash == "h2"


def test_a_deleted_volume_in_use_is_refused(backend: ContainerBackend) -> None:
    ref = cell()
    up(backend, ref)
    with pytest.raises(BackendError, match="still mounted"):
        backend.delete_volume(ref.volume_id or "")
    assert backend.volume_exists(ref.volume_id or "")


def test_parallel_workers_share_one_bridge_network(engine: None, state: Path,
                                                   docker_client: Any) -> None:
    """Engines before API 1.44 allow duplicate network names: the check-and-create is locked."""
    import threading

    backends = [ContainerBackend(state_dir=state) for _ in range(6)]
    ids: list[str] = []
    barrier = threading.Barrier(len(backends))

    def ensure(backend: ContainerBackend) -> None:
        barrier.wait()
        ids.append(backend._ensure_bridge())

    threads = [threading.Thread(target=ensure, args=(b,)) for b in backends]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        name = backends[0].bridge_name()
        named = [n for n in docker_client.api.networks(names=[name]) if n["Name"] == name]
        assert len(named) == 1 and set(ids) == {named[0]["Id"]}
    finally:
        for n in docker_client.api.networks(names=[backends[0].bridge_name()]):
            docker_client.api.remove_network(n["Id"])
        for b in backends:
            b.close()


def test_the_bridge_network_goes_with_its_last_container(backend: ContainerBackend,
                                                         docker_client: Any) -> None:
    """Created only (never started: no test sends traffic on a bridge)."""
    refs = [cell(f"b{i}", network={"mode": "bridge"}) for i in range(2)]
    for ref in refs:
        backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
        backend.create(ref, "h1")
    name = backend.bridge_name()

    def networks() -> list[Any]:
        return [n for n in docker_client.api.networks(names=[name]) if n["Name"] == name]

    assert len(networks()) == 1
    backend.delete(refs[0])
    assert len(networks()) == 1  # still used by the other cell
    backend.delete(refs[1])
    assert networks() == []


def test_one_container_port_on_two_host_ports_is_published_on_both(
        backend: ContainerBackend, docker_client: Any) -> None:
    """`-p 8080:80 -p 8081:80`: the engine takes both bindings (once only the last was kept,
    and the cell was Ready with one port missing). Created only, as above: no bridge traffic."""
    ports = [{"containerPort": 80, "hostPort": 18080, "hostIP": "127.0.0.1"},
             {"containerPort": 80, "hostPort": 18081, "hostIP": "127.0.0.1"}]
    ref = cell("twoports", network={"mode": "bridge", "ports": ports})
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    backend.create(ref, "h1")
    try:
        container = backend._find(ref)
        assert container is not None
        bindings = docker_client.api.inspect_container(container["Id"])["HostConfig"][
            "PortBindings"]
        assert sorted((b["HostIp"], b["HostPort"]) for b in bindings["80/tcp"]) == [
            ("127.0.0.1", "18080"), ("127.0.0.1", "18081")]
    finally:
        backend.delete(ref)


def test_delete_removes_what_an_interrupted_run_dir_write_left(backend: ContainerBackend) -> None:
    """A kill during the run directory's write leaves `.secrets.env.tmp` (secret values in
    it): delete removes it with the rest, so the directory goes too."""
    ref = cell()
    up(backend, ref)
    run = backend.layout.run_dir(ref.id)
    for name in (".secrets.env.tmp", ".supervisor.sh.tmp"):
        (run / name).write_text("TOKEN=canary\n")
    backend.delete(ref)
    assert not run.exists()


def test_a_service_that_leaves_a_child_holding_its_output_is_seen_to_exit(
        backend: ContainerBackend) -> None:
    """The restart policy follows the service's own exit, not the last holder of its output."""
    ref = cell(services=[
        {"name": "forker", "restart": "Never",
         "command": ["sh", "-c", "sleep 600 & echo parent-done; exit 4"]},
    ])
    up(backend, ref)
    log_path = backend.log_paths(ref)["forker"]
    # The supervisor creates the log when the service starts: absent until then.
    wait_for(lambda: log_path.exists() and "forker exited with status 4" in log_path.read_text(),
             timeout=15)
    log = log_path.read_text()
    assert log.index("parent-done") < log.index("forker exited with status 4")
