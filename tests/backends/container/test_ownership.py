"""DevCell never touches a container it does not own, and finds its own by their labels."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.errors import BackendError
from tests.backends.container.support import cell, up
from tests.backends.engine import IMAGE


@pytest.fixture
def foreign(docker_client: Any, backend: ContainerBackend) -> Iterator[dict[str, str]]:
    """Containers DevCell must leave alone: one with no labels, one with DevCell's labels for
    another state directory (same cell id), and one squatting on the name of our next cell."""
    tag = secrets.token_hex(4)
    ref = cell("squatted")
    made = {
        "plain": docker_client.containers.run(IMAGE, ["sleep", "600"], detach=True,
                                              network_mode="none", name=f"foreign-{tag}"),
        "other-state": docker_client.containers.run(
            IMAGE, ["sleep", "600"], detach=True, network_mode="none", name=f"other-{tag}",
            labels={"dev.devcell.managed": "true", "dev.devcell.state-dir": "0" * 16,
                    "dev.devcell.cell-id": "cell_shared", "dev.devcell.cell": "shared"}),
        "squatter": docker_client.containers.run(
            IMAGE, ["sleep", "600"], detach=True, network_mode="none",
            name=backend.container_name(ref)),
    }
    yield {"squatted_cell_id": ref.id, **{k: c.id for k, c in made.items()}}
    for container in made.values():
        container.remove(force=True)


def _snapshot(docker_client: Any, ids: list[str]) -> list[tuple[str, str, bool]]:
    out = []
    for cid in ids:
        state = docker_client.api.inspect_container(cid)["State"]
        out.append((cid, state["StartedAt"], state["Running"]))
    return out


def test_foreign_containers_survive_every_operation(
        backend: ContainerBackend, docker_client: Any, foreign: dict[str, str]) -> None:
    ids = [foreign["plain"], foreign["other-state"], foreign["squatter"]]
    before = _snapshot(docker_client, ids)
    shared = cell("shared")
    shared = shared.__class__("cell_shared", "shared", shared.spec, shared.volume_id)
    assert not backend.observe(shared).exists  # the other state dir's container is not ours
    up(backend, shared)
    backend.quiesce(shared)
    backend.checkpoint(shared, "snap_owned")
    backend.resume(shared)
    backend.stop(shared)
    backend.start(shared)
    backend.delete(shared)
    backend.delete_volume(shared.volume_id or "")
    backend.delete_checkpoint("snap_owned")
    assert [o["cell_id"] for o in backend.owned_containers()] == []
    assert _snapshot(docker_client, ids) == before
    assert all(running for _, _, running in before)


def test_a_name_taken_by_a_foreign_container_is_refused(
        backend: ContainerBackend, docker_client: Any, foreign: dict[str, str]) -> None:
    ref = cell("squatted")
    ref = ref.__class__(foreign["squatted_cell_id"], ref.name, ref.spec, ref.volume_id)
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    with pytest.raises(BackendError, match="does not carry DevCell's labels.*refusing"):
        backend.create(ref, "h")
    assert not backend.observe(ref).exists
    for verb in (backend.stop, backend.delete, backend.resume):
        verb(ref)  # nothing of ours to act on: no error, and the squatter is untouched
    assert docker_client.api.inspect_container(foreign["squatter"])["State"]["Running"]


def test_two_state_directories_do_not_see_each_other(engine: None, tmp_path: Path) -> None:
    from tests.backends.engine import remove_containers

    first = ContainerBackend(state_dir=tmp_path / "one")
    second = ContainerBackend(state_dir=tmp_path / "two")
    try:
        ref = cell()
        up(first, ref)
        assert first.observe(ref).running
        assert not second.observe(ref).exists
        second.delete(ref)
        assert first.observe(ref).running
        assert second.owned_containers() == [] and len(first.owned_containers()) == 1
    finally:
        first.close()
        second.close()
        remove_containers(tmp_path / "one")
        remove_containers(tmp_path / "two")


def test_unsafe_ids_never_reach_a_path(backend: ContainerBackend) -> None:
    for bad in ("../x", "vol/../../etc", "", "A", "vol.1", "x" * 200, "vol\x00"):
        with pytest.raises(BackendError, match="refusing"):
            backend.volume_exists(bad)
        with pytest.raises(BackendError, match="refusing"):
            backend.find_checkpoint(bad)
    ref = cell()
    with pytest.raises(BackendError, match="refusing"):
        backend.observe(ref.__class__("../cell", "x", ref.spec, None))
