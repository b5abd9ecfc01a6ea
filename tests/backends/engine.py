"""The real Docker engine for tests: present, or a loud failure in CI and a clear skip elsewhere.

No test mocks docker. Tests that need the engine call `require_engine()`; everything they
create carries DevCell's labels naming their private state directory, and `remove_containers`
clears exactly those containers afterwards (never anything else on the engine).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest

IMAGE = "devcell/busybox:latest"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@functools.cache
def _problem() -> str | None:
    """Why the engine (with DevCell's base image) cannot be used, or None when it can."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        return f"the docker SDK is not installed ({exc})"
    try:
        client = docker.from_env(timeout=30)
    except Exception as exc:
        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        reason = str(exc).split(":")[0][:120] or type(exc).__name__
        return f"the Docker engine is not reachable at {where} ({reason})"
    try:
        try:
            client.images.get(IMAGE)
        except docker.errors.ImageNotFound:
            from devcell.backends.container import base_image

            repository, _, tag = IMAGE.rpartition(":")
            client.api.import_image_from_data(base_image.rootfs_tar(), repository=repository,
                                              tag=tag, changes=['CMD ["/bin/sh"]'])
        return None
    except Exception as exc:
        return f"the base image {IMAGE} is missing and could not be built ({exc})"
    finally:
        client.close()


def engine_available() -> bool:
    return _problem() is None


def require_engine() -> None:
    """Fail (CI) or skip (a developer machine) the calling test when there is no engine."""
    problem = _problem()
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI needs the Docker engine: {problem}; scripts/docker-setup starts it",
                    pytrace=False)
    pytest.skip(f"no Docker engine here: {problem}; run scripts/docker-setup as root to test "
                "the container backend")


def remove_containers(state_dir: Path) -> int:
    """Remove every container DevCell made for `state_dir` (found by its label only)."""
    if not engine_available():
        return 0
    import docker

    from devcell.backends.host.ids import state_hash

    client = docker.from_env(timeout=60)
    try:
        found = client.api.containers(all=True, filters={"label": [
            "dev.devcell.managed=true", f"dev.devcell.state-dir={state_hash(state_dir)}"]})
        for info in found:
            client.api.remove_container(info["Id"], force=True)
        _remove_kept_root_filesystems(client, lambda labels: labels.get(
            "dev.devcell.state-dir") == state_hash(state_dir))
        _remove_bridge_networks(client, {state_hash(state_dir)})
        _remove_volumes(client, lambda labels: labels.get(
            "dev.devcell.state-dir") == state_hash(state_dir))
        return len(found)
    finally:
        client.close()


def _remove_volumes(client: Any, ours: Any) -> None:
    """The engine volumes of cells (spec.volumes) of the state directories `ours(labels)`
    accepts, after their containers."""
    listed = client.api.volumes(filters={"label": "dev.devcell.managed=true"}) or {}
    for volume in listed.get("Volumes") or []:
        if ours(volume.get("Labels") or {}):
            client.api.remove_volume(volume["Name"], force=True)


def _remove_kept_root_filesystems(client: Any, ours: Any) -> None:
    """Root filesystems a recreate kept (devcell/backends/container/rootfs.py) for the state
    directories `ours(labels)` accepts, after their containers."""
    for image in client.api.images(filters={"label": "dev.devcell.rootfs=true"}):
        if ours(image.get("Labels") or {}):
            for tag in image.get("RepoTags") or []:
                if tag.startswith("devcell-rootfs/"):
                    client.api.remove_image(tag)


def _remove_bridge_networks(client: Any, states: set[str]) -> None:
    """The bridge network DevCell made for each of these state directories (by their labels),
    once no container uses it: DevCell removes it when its last cell is deleted, but not
    when a test's teardown removes the containers itself, and every network left holds one
    of the engine's few address pools (about 30), after which no bridged cell starts."""
    import docker

    for network in client.api.networks(filters={"label": ["dev.devcell.managed=true"]}):
        if (network.get("Labels") or {}).get("dev.devcell.state-dir") in states:
            try:
                client.api.remove_network(network["Id"])
            except docker.errors.APIError:  # in use by a container of another test: kept
                pass


def remove_containers_under(root: Path) -> int:
    """Remove every container DevCell made for a state directory under `root` (a test
    session's base temporary directory), found by its labels: what a test left behind."""
    if not engine_available():
        return 0
    import docker

    client = docker.from_env(timeout=60)
    try:
        found = [info for info in client.api.containers(
                     all=True, filters={"label": ["dev.devcell.managed=true"]})
                 if Path(info["Labels"].get("dev.devcell.state-path", "/")).is_relative_to(root)]
        for info in found:
            client.api.remove_container(info["Id"], force=True)
        _remove_kept_root_filesystems(client, lambda labels: Path(labels.get(
            "dev.devcell.state-path") or "/").is_relative_to(root))
        _remove_bridge_networks(client, {info["Labels"].get("dev.devcell.state-dir", "")
                                         for info in found} - {""})
        _remove_volumes(client, lambda labels: Path(labels.get(
            "dev.devcell.state-path") or "/").is_relative_to(root))
        return len(found)
    finally:
        client.close()
