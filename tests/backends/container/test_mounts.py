"""Host bind mounts on the real engine: allowed ones work, and stay what was checked."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.errors import BackendError
from tests.backends.container.support import cell, up


def allow(state: Path, *roots: Path) -> None:
    state.mkdir(parents=True, exist_ok=True)
    config = state / "config.yaml"
    config.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
                      f"  allowedHostPaths: [{', '.join(str(r) for r in roots)}]\n")
    config.chmod(0o600)


def run(backend: ContainerBackend, ref: Any, *argv: str) -> tuple[int, str]:
    out = io.BytesIO()
    code = backend.exec(ref, list(argv), stdout=out, stderr=out)
    return code, out.getvalue().decode()


def test_a_link_swapped_in_after_create_is_refused_at_the_next_start(
        backend: ContainerBackend, state: Path, tmp_path: Path,
        docker_client: Any) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "a" / "b").mkdir(parents=True)
    (allowed / "a" / "b" / "note").write_text("fine\n")
    allow(state, allowed)
    ref = cell(mounts=[{"hostPath": str(allowed / "a" / "b"), "mountPath": "/m",
                        "readOnly": True}])
    up(backend, ref)
    assert run(backend, ref, "cat", "/m/note") == (0, "fine\n")
    backend.stop(ref)
    shutil.rmtree(allowed / "a" / "b")
    os.symlink("/etc", allowed / "a" / "b")  # what a writable mount of allowed/a could do
    with pytest.raises(BackendError, match="now resolves to /etc") as refused:
        backend.start(ref)
    assert refused.value.reason == "MountRefused"
    state_now = docker_client.api.inspect_container(backend.container_name(ref))["State"]
    assert state_now["Running"] is False  # never started with /etc mounted


def test_tightening_the_configuration_stops_the_next_start(
        backend: ContainerBackend, state: Path, tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    allow(state, allowed)
    ref = cell(mounts=[{"hostPath": str(allowed), "mountPath": "/src"}])
    up(backend, ref)
    backend.stop(ref)
    allow(state, tmp_path / "elsewhere")
    with pytest.raises(BackendError, match="outside the host paths"):
        backend.start(ref)


def test_the_cells_own_mounts_start_again_normally(backend: ContainerBackend) -> None:
    ref = cell()
    up(backend, ref)
    backend.stop(ref)
    backend.start(ref)
    assert backend.observe(ref).running


def test_a_link_into_the_state_directory_is_refused_too(
        backend: ContainerBackend, state: Path, tmp_path: Path) -> None:
    """A source that now resolves into the state directory is not one of DevCell's own."""
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    allow(state, allowed)
    ref = cell(mounts=[{"hostPath": str(allowed / "sub"), "mountPath": "/sub",
                        "readOnly": True}])
    up(backend, ref)
    backend.stop(ref)
    (allowed / "sub").rmdir()
    os.symlink(state, allowed / "sub")
    with pytest.raises(BackendError, match="now resolves to") as refused:
        backend.start(ref)
    assert refused.value.reason == "MountRefused"


def test_two_cells_may_share_a_host_directory_only_read_only(
        backend: ContainerBackend, state: Path, tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    allow(state, allowed)
    writer = cell("writer", mounts=[{"hostPath": str(allowed), "mountPath": "/src"}])
    up(backend, writer)
    reader = cell("reader", mounts=[{"hostPath": str(allowed / "sub"), "mountPath": "/sub",
                                     "readOnly": True}])
    backend.create_volume(reader, reader.volume_id or "", from_checkpoint=None)
    backend.create(reader, "h1")
    with pytest.raises(BackendError, match="which cell writer mounts read-write") as refused:
        backend.start(reader)
    assert refused.value.reason == "MountRefused"
    backend.stop(writer)
    backend.delete(writer)
    backend.start(reader)  # alone now: nobody can swap its source
    assert backend.observe(reader).running


def test_the_shared_path_rule_spans_state_directories(
        backend: ContainerBackend, state: Path, tmp_path: Path) -> None:
    """Another state directory's writable mount could swap this cell's source just as well."""
    from tests.backends.engine import remove_containers

    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    allow(state, allowed)
    other_state = tmp_path / "other-state"
    allow(other_state, allowed)
    other = ContainerBackend(state_dir=other_state)
    try:
        writer = cell("writer", mounts=[{"hostPath": str(allowed), "mountPath": "/src"}])
        up(other, writer)
        reader = cell("reader", mounts=[{"hostPath": str(allowed / "sub"), "mountPath": "/sub",
                                         "readOnly": True}])
        backend.create_volume(reader, reader.volume_id or "", from_checkpoint=None)
        backend.create(reader, "h1")
        with pytest.raises(BackendError, match=f"writer \\(of state directory {other_state}"):
            backend.start(reader)
    finally:
        other.close()
        remove_containers(other_state)


def test_a_setuid_program_planted_through_a_writable_host_mount_is_not_root_s(
        backend: ContainerBackend, state: Path, tmp_path: Path, docker_client: Any) -> None:
    """Issue 10, item 2: the cell's root was the host's root, so `chmod 4755` of a copied
    shell left a setuid-root program in the host directory."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    allowed.chmod(0o777)  # the administrator lets cells write here, as nobody
    allow(state, allowed)
    ref = cell(mounts=[{"hostPath": str(allowed), "mountPath": "/src"}])
    up(backend, ref)
    # stderr (the refused chown and mknod) is dropped: it shares the stream with `id -u` and
    # may arrive after it.
    code, out = run(backend, ref, "sh", "-c", "exec 2>/dev/null; "
                    "cp /bin/busybox /src/sh && chmod 4755 /src/sh; "
                    "chown 0:0 /src/sh; mknod /src/null c 1 3; mknod /workspace/null c 1 3; "
                    "touch /workspace/mine /var/log/devcell/mine; id -u")
    # stdout and stderr share one stream whose order the engine does not keep: find the line
    assert "65534" in out.splitlines(), out
    planted = os.lstat(allowed / "sh")
    assert planted.st_uid == 65534 and planted.st_uid != 0
    assert not (planted.st_mode & 0o4000 and planted.st_uid == 0)
    assert not (allowed / "null").exists() and not list(state.glob("volumes/*/workspace/null"))
    # What it must write it still can: its workspace and its service logs.
    assert list(state.glob("volumes/*/workspace/mine"))
    assert list(state.glob("volumes/*/logs/mine"))
    inspected = docker_client.api.inspect_container(backend.container_name(ref))
    assert inspected["Config"]["User"] == "65534:65534"
    assert "no-new-privileges" in inspected["HostConfig"]["SecurityOpt"]
    # Without the user a writable host mount is refused at the last check before the engine.
    from devcell.backends.container import spec as container_spec
    from devcell.backends.container.layout import Layout
    from devcell.config import SecurityPolicy
    policy = SecurityPolicy(allowed_host_paths=(str(allowed),))
    kwargs = container_spec.create_kwargs(
        Layout(state), name="x", cell_id="cell_x", cell_name="x", spec=dict(ref.spec),
        volume_id=None, runtime_hash="h", policy=policy)
    kwargs.pop("user")
    with pytest.raises(BackendError, match="must not run as root"):
        container_spec.check_security(Layout(state), kwargs, policy)
