"""A pruned cell's workspace is kept, on the real Docker engine: `apply --prune` of a cell
whose manifest is gone leaves a safety snapshot holding its files exactly (tree digest), and
restoring it onto the cell made again from the manifest brings them back."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.backends.container.support import box_manifest
from tests.backends.container.test_restore import _checkpoint, ok
from tests.backends.tree_digest import digest
from tests.conftest import Cli


def test_a_pruned_cell_leaves_its_files_in_a_snapshot_that_restores_them(
        engine: None, cli: Cli, tmp_path: Path, state: Path) -> None:
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    shutil.copy(box_manifest(tmp_path), manifests / "box.yaml")
    ok(cli, "apply", "-f", str(manifests))
    ok(cli, "exec", "box", "--", "sh", "-c",
       "mkdir -p src && echo work > src/main.txt && ln -s src/main.txt entry")
    (manifests / "box.yaml").rename(tmp_path / "box.yaml")
    (manifests / "other.yaml").write_text((tmp_path / "box.yaml").read_text()
                                          .replace("name: box", "name: other"))
    pruned = ok(cli, "apply", "--prune", "-f", str(manifests))
    assert "cell/box pruned" in pruned
    assert "box-pruned-1" in ok(cli, "get", "snapshots")
    kept = _checkpoint(state, "box-pruned-1")
    assert (kept / "src" / "main.txt").read_text() == "work\n"
    before = digest(kept)
    (tmp_path / "box.yaml").rename(manifests / "box.yaml")  # the manifest comes back
    ok(cli, "apply", "-f", str(manifests))
    assert "No such file" in cli("exec", "box", "--", "cat", "src/main.txt").stderr
    ok(cli, "snapshot", "restore", "box-pruned-1", "--approve")  # into the cell made again
    assert ok(cli, "exec", "box", "--", "cat", "entry") == "work\n"
    assert digest(_checkpoint(state, "box-pruned-1")) == before
