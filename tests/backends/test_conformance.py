"""Conformance suite for the Backend protocol, run against every registered backend.

Every method is idempotent (repeating a call that took effect is not an error), what a backend
creates is visible to a second instance on the same state directory, and its capabilities are
honest about what its checkpoints preserve.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell import backends
from devcell.backends.base import (
    Backend,
    Capabilities,
    CellRef,
    CheckpointInfo,
    Consistency,
    Observed,
    Owned,
    OwnedKind,
)
from devcell.errors import BackendError, BackendRefused, BackendUnavailable
from tests.backends.engine import remove_containers, require_engine
from tests.backends.vm_machines import kill_machines, require_qemu, seed_images

BACKENDS = sorted(backends.REGISTRY)
PROTOCOL_METHODS = sorted(n for n, v in vars(Backend).items()
                          if not n.startswith("_") and callable(v))
SPEC: dict[str, Any] = {"backend": "fake", "image": "devcell/busybox:latest", "state": "Running",
                        "workspace": {"mountPath": "/workspace"}}


@pytest.fixture(autouse=True)
def _no_injected_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEVCELL_FAKE_FAIL", raising=False)


def load(name: str, state_dir: Path) -> Backend:
    """Backend `name` on `state_dir`; the container backend needs the real engine (see
    engine.py), the vm backend real QEMU (vm_machines.py, images seeded once per session)."""
    if name == "container":
        require_engine()
    if name == "vm":
        require_qemu()
        seed_images(state_dir, _VM_CACHE[0])
    return backends.load(name, state_dir)


_VM_CACHE: list[Path] = []


@pytest.fixture(autouse=True, scope="session")
def _vm_image_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    _VM_CACHE[:] = [tmp_path_factory.mktemp("vm-images")]


@pytest.fixture(autouse=True)
def _remove_test_containers(tmp_path: Path) -> Iterator[None]:
    yield
    for state in tmp_path.iterdir():
        if (state / "containers").is_dir():
            remove_containers(state)
        if (state / "vm").is_dir():
            kill_machines(state)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    instance = load(request.param, tmp_path / "state")
    yield instance
    instance.close()


def cell(n: int = 1, volume_id: str | None = None) -> CellRef:
    return CellRef(f"cell_conformance{n:04d}", f"cell-{n}", dict(SPEC, backend="x"), volume_id)


def assert_scalar_outputs(outputs: Any) -> None:
    assert isinstance(outputs, dict)
    for key, value in outputs.items():
        assert isinstance(key, str)
        assert value is None or isinstance(value, str | int | float | bool), (key, value)


@pytest.mark.parametrize("name", BACKENDS)
def test_registry_names_every_backend_class_by_its_name(tmp_path: Path, name: str) -> None:
    assert {"fake", "container", "vm"} <= set(BACKENDS)
    instance = load(name, tmp_path / name)
    try:
        assert instance.name == name
        assert isinstance(instance.capabilities, Capabilities)
        for method in PROTOCOL_METHODS:
            assert callable(getattr(instance, method)), method
            protocol = inspect.signature(getattr(Backend, method))
            actual = inspect.signature(getattr(type(instance), method))
            assert list(actual.parameters) == list(protocol.parameters), method
    finally:
        instance.close()


def test_planned_backends_are_refused_clearly(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backends.PLANNED, "firecracker", "microVMs on KVM")
    with pytest.raises(BackendUnavailable, match="backend firecracker"):
        backends.load("firecracker", tmp_path)


def test_unknown_backend_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="unknown backend 'nope'"):
        backends.load("nope", tmp_path)


def test_protocol_is_what_the_suite_expects() -> None:
    assert {"observe", "volume_exists", "create_volume", "delete_volume", "create", "start",
            "stop", "delete", "quiesce", "checkpoint", "resume", "checkpoint_exists",
            "delete_checkpoint", "list_owned", "close"} <= set(PROTOCOL_METHODS)


def test_capabilities_are_honest(backend: Backend) -> None:
    caps = backend.capabilities
    if not caps.workspace_files:
        assert caps.snapshot_consistency is Consistency.METADATA
    if caps.snapshot_consistency is Consistency.MACHINE:
        assert caps.memory_state
    if caps.keeps_rootfs:  # the cell controller plans keep-rootfs and create-from-kept
        from devcell.backends.base import KeepsRootfs

        assert isinstance(backend, KeepsRootfs)


def test_observe_unknown_cell(backend: Backend) -> None:
    observed = backend.observe(cell(99))
    assert isinstance(observed, Observed)
    assert observed == Observed(exists=False)


def test_lifecycle_is_idempotent(backend: Backend) -> None:
    ref = cell()
    for _ in range(2):
        assert_scalar_outputs(backend.create(ref, "hash-1"))
    observed = backend.observe(ref)
    assert observed.exists and not observed.running and observed.runtime_hash == "hash-1"
    for _ in range(2):
        assert_scalar_outputs(backend.start(ref))
        assert backend.observe(ref).running
    for _ in range(2):
        assert_scalar_outputs(backend.stop(ref))
        observed = backend.observe(ref)
        assert observed.exists and not observed.running
    for _ in range(2):
        assert_scalar_outputs(backend.delete(ref))
        assert not backend.observe(ref).exists


def test_create_after_delete_gives_a_fresh_stopped_cell(backend: Backend) -> None:
    ref = cell()
    backend.create(ref, "hash-1")
    backend.start(ref)
    backend.delete(ref)
    backend.create(ref, "hash-2")
    observed = backend.observe(ref)
    assert observed.exists and not observed.running and observed.runtime_hash == "hash-2"


def test_cells_are_independent(backend: Backend) -> None:
    a, b = cell(1), cell(2)
    backend.create(a, "ha")
    backend.create(b, "hb")
    backend.start(a)
    assert backend.observe(a).running and not backend.observe(b).running
    backend.delete(a)
    assert not backend.observe(a).exists and backend.observe(b).exists


def test_start_of_a_cell_that_does_not_exist_is_an_error(backend: Backend) -> None:
    with pytest.raises(BackendError):
        backend.start(cell(7))


def test_volumes(backend: Backend) -> None:
    ref = cell(volume_id="vol_conformance0001")
    assert not backend.volume_exists("vol_conformance0001")
    for _ in range(2):
        assert_scalar_outputs(backend.create_volume(ref, "vol_conformance0001",
                                                    from_checkpoint=None))
        assert backend.volume_exists("vol_conformance0001")
    for _ in range(2):
        assert_scalar_outputs(backend.delete_volume("vol_conformance0001"))
        assert not backend.volume_exists("vol_conformance0001")


def test_volume_from_a_missing_checkpoint_is_refused(backend: Backend) -> None:
    with pytest.raises(BackendError):
        backend.create_volume(cell(), "vol_conformance0002", from_checkpoint="snap_missing")
    assert not backend.volume_exists("vol_conformance0002")


def test_checkpoints(backend: Backend) -> None:
    ref = cell(volume_id="vol_conformance0003")
    backend.create_volume(ref, "vol_conformance0003", from_checkpoint=None)
    backend.create(ref, "h")
    backend.start(ref)
    assert not backend.checkpoint_exists("snap_conformance01")
    assert_scalar_outputs(backend.quiesce(ref))
    first = backend.checkpoint(ref, "snap_conformance01")
    assert_scalar_outputs(backend.resume(ref))
    assert isinstance(first, CheckpointInfo)
    assert first.consistency is backend.capabilities.snapshot_consistency
    assert first.ref and first.size_bytes >= 0 and first.files >= 0
    assert backend.checkpoint_exists("snap_conformance01")
    again = backend.checkpoint(ref, "snap_conformance01")
    assert again.ref == first.ref
    assert backend.observe(ref).running  # a checkpoint does not stop the cell
    # a new volume can be restored from it
    fork = cell(2, volume_id="vol_conformance0004")
    outputs = backend.create_volume(fork, "vol_conformance0004",
                                    from_checkpoint="snap_conformance01")
    assert_scalar_outputs(outputs)
    assert backend.volume_exists("vol_conformance0004")
    # the checkpoint outlives the cell and its volume
    backend.delete(ref)
    backend.delete_volume("vol_conformance0003")
    assert backend.checkpoint_exists("snap_conformance01")
    # a checkpoint a fork's volume stands on is never lost under it: its deletion is refused
    # while the fork lives (an overlay on it), or the fork holds a copy of its own
    try:
        backend.delete_checkpoint("snap_conformance01")
    except BackendRefused as exc:
        assert "vol_conformance0004" in str(exc)
        assert backend.checkpoint_exists("snap_conformance01")
    assert backend.volume_exists("vol_conformance0004")
    backend.delete_volume("vol_conformance0004")
    for _ in range(2):
        assert_scalar_outputs(backend.delete_checkpoint("snap_conformance01"))
        assert not backend.checkpoint_exists("snap_conformance01")


@pytest.mark.parametrize("name", BACKENDS)
def test_state_is_shared_by_instances_on_the_same_state_dir(tmp_path: Path, name: str) -> None:
    state = tmp_path / name
    first, second = load(name, state), load(name, state)
    try:
        ref = cell(volume_id="vol_conformance0005")
        first.create_volume(ref, "vol_conformance0005", from_checkpoint=None)
        first.create(ref, "h")
        first.start(ref)
        observed = second.observe(ref)
        assert observed.exists and observed.running and observed.runtime_hash == "h"
        assert second.volume_exists("vol_conformance0005")
        second.delete(ref)
        assert not first.observe(ref).exists
    finally:
        first.close()
        second.close()


def test_quiesce_and_resume_leave_the_cell_observably_unfrozen(backend: Backend) -> None:
    ref = cell()
    backend.create(ref, "h")
    backend.start(ref)
    backend.quiesce(ref)
    for _ in range(2):
        backend.resume(ref)
        observed = backend.observe(ref)
        assert observed.running and not observed.frozen


def test_find_checkpoint_and_volumes_of(backend: Backend) -> None:
    ref = cell(volume_id="vol_conformance0006")
    assert backend.find_checkpoint("snap_conformance02") is None
    assert backend.volumes_of(ref.id) == []
    backend.create_volume(ref, "vol_conformance0006", from_checkpoint=None)
    assert backend.volumes_of(ref.id) == ["vol_conformance0006"]
    assert backend.volumes_of(cell(2).id) == []
    taken = backend.checkpoint(ref, "snap_conformance02")
    found = backend.find_checkpoint("snap_conformance02")
    assert found is not None
    assert (found.ref, found.consistency) == (taken.ref, taken.consistency)
    backend.delete_checkpoint("snap_conformance02")
    assert backend.find_checkpoint("snap_conformance02") is None
    backend.delete_volume("vol_conformance0006")
    assert backend.volumes_of(ref.id) == []


def test_list_owned_names_every_resource_with_its_cell(backend: Backend) -> None:
    """The orphan sweep's view: what the backend holds, owners read from the backend itself."""
    assert backend.list_owned() == []
    ref = cell(7, volume_id="vol_conformance0007")
    backend.create_volume(ref, "vol_conformance0007", from_checkpoint=None)
    backend.create(ref, "hash-1")
    backend.checkpoint(ref, "snap_conformance07")
    owned = backend.list_owned()
    assert all(isinstance(o, Owned) and isinstance(o.kind, OwnedKind) for o in owned)
    assert sorted((o.kind, o.id, o.cell_id) for o in owned) == [
        (OwnedKind.CELL, ref.id, ref.id),
        (OwnedKind.CHECKPOINT, "snap_conformance07", ref.id),
        (OwnedKind.VOLUME, "vol_conformance0007", ref.id)]
    # A cell's runtime that may hold the user's work (a vm's root disk) says where.
    (runtime,) = (o for o in owned if o.kind is OwnedKind.CELL)
    assert runtime.content is None or ref.id in runtime.content
    backend.delete(ref)
    backend.delete_checkpoint("snap_conformance07")
    backend.delete_volume("vol_conformance0007")
    assert backend.list_owned() == []


def test_imported_checkpoints_appear_whole_or_not_at_all(backend: Backend, tmp_path: Path
                                                         ) -> None:
    """import_checkpoint: `fill` is given a directory exactly when the backend keeps files;
    the checkpoint exists only once fill returned, is readable through checkpoint_files and
    forks like any; a fill that raises leaves nothing (no checkpoint, no temporary)."""
    keeps_files = backend.capabilities.workspace_files

    def fill(directory: Path | None, *, sidecars: Path | None = None) -> tuple[int, int]:
        assert (directory is not None) == keeps_files
        assert not backend.checkpoint_exists("snap_imported01")
        if directory is not None:
            directory.mkdir()
            (directory / "moved.txt").write_text("moved\n")
        if sidecars is not None:  # a backend that keeps sidecars' data
            (sidecars / "db").mkdir(parents=True)
            (sidecars / "db" / "rows").write_text("1\n")
        return 1, 6

    info = backend.import_checkpoint("snap_imported01", cell_id="cell_elsewhere01",
                                     cell_name="api", fill=fill)
    assert info.consistency == backend.capabilities.snapshot_consistency
    assert backend.checkpoint_exists("snap_imported01")
    tree = backend.checkpoint_files("snap_imported01")
    assert (tree is not None) == keeps_files
    if tree is not None:
        assert (tree / "moved.txt").read_text() == "moved\n"
    saved = backend.checkpoint_sidecars("snap_imported01")
    assert saved is None or (saved / "db" / "rows").read_text() == "1\n"
    backend.create_volume(cell(9), "vol_conformance0009", from_checkpoint="snap_imported01")
    with pytest.raises(BackendError):
        backend.import_checkpoint("snap_imported01", cell_id="cell_elsewhere01",
                                  cell_name="api", fill=fill)

    def broken(directory: Path | None, *, sidecars: Path | None = None) -> tuple[int, int]:
        if directory is not None:
            directory.mkdir()
            (directory / "half").write_text("half")
        raise BackendError("the archive was refused")

    with pytest.raises(BackendError, match="refused"):
        backend.import_checkpoint("snap_imported02", cell_id="cell_elsewhere01",
                                  cell_name="api", fill=broken)
    assert not backend.checkpoint_exists("snap_imported02")
    assert not [p for p in tmp_path.rglob("*") if "snap_imported02" in p.name]
    with pytest.raises(BackendError):
        backend.checkpoint_files("snap_missing")


def test_restore_workspace_refuses_a_running_cell_and_is_idempotent(backend: Backend) -> None:
    """Restoring: a backend that offers it (Restoring) refuses while the cell runs, refuses a
    checkpoint that does not exist, and restoring twice is no error."""
    from devcell.backends.base import Changes, Restoring
    from devcell.errors import BackendNotFound

    if not isinstance(backend, Restoring):
        assert not backends.restores(backend.name)
        return
    assert backends.restores(backend.name)
    ref = cell(5, volume_id="vol_conformance0005")
    backend.create_volume(ref, "vol_conformance0005", from_checkpoint=None)
    backend.create(ref, "h")
    backend.start(ref)
    backend.checkpoint(ref, "snap_conformance05")
    with pytest.raises(BackendRefused):
        backend.restore_workspace(ref, "snap_conformance05")
    backend.stop(ref)
    with pytest.raises(BackendNotFound):
        backend.restore_workspace(ref, "snap_conformance_gone")
    for _ in range(2):
        outputs = backend.restore_workspace(ref, "snap_conformance05")
        assert_scalar_outputs(outputs)
        assert outputs["restoredFrom"] == "snap_conformance05"
    assert isinstance(backend.workspace_changes("vol_conformance0005", "snap_conformance05"),
                      Changes)
    assert backend.checkpoint_exists("snap_conformance05")
    backend.start(ref)
    assert backend.observe(ref).running
    backend.delete(ref)
    backend.delete_volume("vol_conformance0005")
    backend.delete_checkpoint("snap_conformance05")
