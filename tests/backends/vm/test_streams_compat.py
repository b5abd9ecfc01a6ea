"""A vm cell made before the stream ports (its record has no `streams`) keeps its machine's
devices as they were and its commands on the guest agent: a saved machine's device state names
every port, so a wake that added the stream ports would not load. One boot (~10 s under TCG).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.base import CellRef
from devcell.backends.interactive import Terminal
from devcell.backends.vm.backend import VmBackend
from devcell.backends.vm.drivers import qemu
from devcell.errors import CapabilityMissing
from tests.backends.vm.conftest import SPEC, make_state, run
from tests.backends.vm_machines import kill_machines


@pytest.fixture(scope="module")
def old_machine(tmp_path_factory: pytest.TempPathFactory, vm_cache: Path
                ) -> Iterator[tuple[VmBackend, CellRef]]:
    ref = CellRef("cell_vmoldports1", "old", SPEC, "vol_vmoldports1")
    state = tmp_path_factory.mktemp("vmold") / "state"
    backend = VmBackend(state_dir=make_state(state, vm_cache))
    try:
        backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
        backend.create(ref, "hash-1")
        meta = backend._update(ref.id, streams=None)  # as an older DevCell wrote it
        assert "streams" not in {k for k, v in meta.items() if v is not None}
        backend.start(ref)
        yield backend, ref
    finally:
        kill_machines(state)


def test_an_old_machine_sleeps_and_wakes_without_stream_ports_and_uses_its_agent(
        old_machine: tuple[VmBackend, CellRef]) -> None:
    backend, ref = old_machine
    config = backend._config(ref.id, backend._meta(ref.id) or {})
    assert config.streams == 0
    assert not any("devcell.streams" in word for word in qemu.QemuDriver().argv(config))
    assert not list(config.directory.glob("streams*.sock"))
    assert run(backend, ref, "echo via-agent; exit 4") == (4, "via-agent\n", "")
    backend.save_machine(ref, "sleep-vmold-g1")
    assert backend.restore_machine(ref, "sleep-vmold-g1")["restored"] is True
    assert run(backend, ref, "echo awake") == (0, "awake\n", "")
    with pytest.raises(CapabilityMissing, match="made before vm cells had stream ports"):
        backend.exec(ref, ["true"], stdout=io.BytesIO(), stderr=io.BytesIO(),
                     terminal=Terminal(lambda: (24, 80)))
    with pytest.raises(CapabilityMissing, match="delete it and apply it again"):
        backend.open_port(ref, 80)
    assert backend.subsystem(ref, "sftp", "/workspace") is None
