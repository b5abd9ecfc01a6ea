"""`snapshot create --consistency machine` as a user types it: on a backend that keeps no
memory it is refused with the field and the reason, and nothing is recorded."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli


def test_a_machine_snapshot_of_a_cell_without_memory_is_refused_and_changes_nothing(
        cli: Cli, tmp_path: Path) -> None:
    manifest = tmp_path / "api.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: api}\n"
                        "spec: {backend: fake}\n")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    refused = cli("snapshot", "create", "api", "--name", "mem", "--consistency", "machine")
    assert refused.returncode != 0
    assert "spec.consistency" in refused.stderr and "keeps no memory" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "mem" not in cli("get", "snapshots").stdout
    bad = cli("snapshot", "create", "api", "--name", "mem", "--consistency", "memory")
    assert bad.returncode != 0 and "invalid choice" in bad.stderr
    taken = cli("snapshot", "create", "api", "--name", "files")
    assert taken.returncode == 0, taken.stderr
