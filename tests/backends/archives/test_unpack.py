"""An archive source (`spec.workspace.source.archive`) opened by backends/archives/unpack.py:
only the file at the path judged against the host-path rules, never one a link swapped in
on the way leads to."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcell.backends.archives import unpack
from devcell.backends.host.workspace_seed import ArchiveSource
from devcell.errors import BackendRefused


def test_an_archive_whose_path_now_leads_elsewhere_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "snap.tar").write_bytes(b"not read")
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed" / "sub").symlink_to(tmp_path / "elsewhere")
    into = tmp_path / "ws"
    with pytest.raises(BackendRefused, match="changed since it was checked"):
        unpack.unpack(ArchiveSource(str(tmp_path / "allowed" / "sub" / "snap.tar")), into)
    assert not into.exists()
