"""What a cell's or a sidecar's users read on the host side (a workspace's top, a sidecar's
data directory) is 0755 whatever the daemon's umask: mkdir(0o755) went through it, and a
umask of 077 made them 0700. No engine needed: the workspace store works on the host."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devcell.backends.container import sidecar_data
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore


@pytest.mark.parametrize("umask", [0o077, 0o000], ids=["umask 077", "umask 000"])
def test_a_new_workspace_and_its_sidecar_data_are_0755(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        store = WorkspaceStore(Layout(tmp_path / "state"))
        store.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a",
                            from_checkpoint=None)
        data = sidecar_data.ensure(store.layout, "vol_a", "db")
    finally:
        os.umask(old)
    volume = store.layout.volume("vol_a")
    assert {str(p.relative_to(volume)): stat.S_IMODE(p.stat().st_mode)
            for p in volume.iterdir()} == {
        "workspace": 0o755, "logs": 0o700, "volume.json": 0o600, "sidecars": 0o755}
    assert stat.S_IMODE(data.stat().st_mode) == 0o755
