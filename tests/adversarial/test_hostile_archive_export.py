"""`snapshot export` and `import` of a checkpoint a hostile cell shaped (the planted workspace
of test_hostile_cell): the archive never holds a byte of a host file the cell linked to, links
stay links, special files are left out, a sparse bomb refuses the export by name, and the
rest arrives in another state directory as it was, in bounded time and memory."""

from __future__ import annotations

import io
import os
import tracemalloc
from pathlib import Path

import pytest

from devcell.backends.archives import read as archive_read
from devcell.backends.archives import write as archive_write
from devcell.backends.container.layout import Layout
from devcell.backends.container.workspaces import WorkspaceStore
from devcell.errors import BackendError
from tests.adversarial.test_hostile_cell import HOST_SECRET, _host_secret, _plant
from tests.backends.archive_support import HEADER


def test_a_planted_checkpoint_exports_without_host_bytes_and_imports_as_it_was(
        tmp_path: Path) -> None:
    source = WorkspaceStore(Layout(tmp_path / "source"))
    source.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a",
                         from_checkpoint=None)
    workspace = source.layout.workspace("vol_a")
    _plant(workspace, _host_secret(tmp_path))
    source.checkpoint(checkpoint_id="chk_bomb", cell_id="cell_a", volume_id="vol_a")
    with pytest.raises(BackendError, match="'workspace/sparse' is a sparse file"):
        archive_write.write(io.BytesIO(), HEADER, source.checkpoint_files("chk_bomb"))

    os.unlink(workspace / "sparse")
    source.checkpoint(checkpoint_id="chk_1", cell_id="cell_a", volume_id="vol_a")
    out = io.BytesIO()
    tracemalloc.start()
    try:
        written = archive_write.write(out, HEADER, source.checkpoint_files("chk_1"))
        target = WorkspaceStore(Layout(tmp_path / "target"))

        def fill(directory: Path) -> tuple[int, int]:
            read = archive_read.read(io.BytesIO(out.getvalue()), directory)
            return read.files, read.bytes

        target.import_checkpoint(checkpoint_id="chk_2", cell_id="cell_a", fill=fill)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert HOST_SECRET.encode() not in out.getvalue()  # the link's target was never read
    assert written.skipped == (3 if os.geteuid() == 0 else 2)  # FIFO, socket, device node
    assert peak < 32 * 2**20
    copy = target.checkpoint_files("chk_2")
    assert os.readlink(copy / "leak") == str(tmp_path / "host-secret")
    assert os.readlink(copy / "etc") == "/etc" and os.readlink(copy / "up") == "../../.."
    assert (copy / "new\nline\x1b[31m").read_text() == "odd name\n"
    assert os.lstat(copy / "hardlink").st_ino == os.lstat(copy / "file").st_ino
    assert sorted(p.name for p in copy.iterdir()) == sorted(
        ["leak", "etc", "up", "new\nline\x1b[31m", "file", "hardlink"])
    assert (tmp_path / "host-secret").read_text() == HOST_SECRET + "\n"
