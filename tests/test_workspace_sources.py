"""The live-folder and archive workspace sources at apply, with the fake backend and the CLI
as a user runs it: what is refused says file, line and field and records nothing; a live
folder's path is immutable and `snapshot restore` into it is refused before anything is
recorded (DevCell never overwrites the developer's own files)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Cli, allow_host_paths


def _cell(directory: Path, name: str, backend: str, source: str) -> Path:
    manifest = directory / f"{name}.yaml"
    manifest.write_text(
        f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}}}\nspec:\n"
        f"  backend: {backend}\n  image: devcell/busybox:latest\n"
        f"  workspace:\n    source: {source}\n")
    return manifest




def test_a_vm_cell_with_a_live_folder_is_refused_at_apply(cli: Cli, tmp_path: Path,
                                                          state_dir: Path) -> None:
    (tmp_path / "app").mkdir()
    allow_host_paths(state_dir, tmp_path)
    manifest = _cell(tmp_path, "box", "vm", f"{{hostPath: {{path: '{tmp_path / 'app'}'}}}}")
    done = cli("apply", "-f", str(manifest))
    assert done.returncode != 0 and "box.yaml:8" in done.stderr, done.stderr
    assert "spec.workspace.source.hostPath" in done.stderr
    assert "needs the container backend; use directory: to copy it" in done.stderr
    assert "Traceback" not in done.stderr
    assert cli("get", "cells", "-o", "name").stdout == ""


def test_a_file_that_is_no_archive_is_refused_at_apply(cli: Cli, tmp_path: Path,
                                                       state_dir: Path) -> None:
    bogus = tmp_path / "not-an-archive.tar"
    bogus.write_bytes(b"hello" * 100)
    allow_host_paths(state_dir, tmp_path)
    manifest = _cell(tmp_path, "box", "fake", f"{{archive: {{path: '{bogus}'}}}}")
    done = cli("apply", "-f", str(manifest))
    assert done.returncode != 0 and "box.yaml:8" in done.stderr, done.stderr
    assert "spec.workspace.source.archive.path" in done.stderr and "damaged" in done.stderr
    assert cli("get", "cells", "-o", "name").stdout == ""


def test_a_live_folder_is_immutable_and_never_restored_into(cli: Cli, tmp_path: Path,
                                                             state_dir: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "mine.txt").write_text("the developer's\n")
    (tmp_path / "other").mkdir()
    allow_host_paths(state_dir, tmp_path)
    manifest = _cell(tmp_path, "box", "fake", f"{{hostPath: {{path: '{tmp_path / 'app'}'}}}}")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    _cell(tmp_path, "box", "fake", f"{{hostPath: {{path: '{tmp_path / 'other'}'}}}}")
    moved = cli("apply", "-f", str(manifest))
    assert moved.returncode != 0 and "immutable" in moved.stderr, moved.stderr
    assert "box.yaml:8" in moved.stderr
    assert cli("snapshot", "create", "box", "--name", "s1").returncode == 0
    restore = cli("snapshot", "restore", "s1", "--approve")
    assert restore.returncode != 0, restore.stdout
    assert "never overwrites" in restore.stderr and "devcell cell fork" in restore.stderr
    assert "Traceback" not in restore.stderr
    assert "restore" not in cli("get", "operations").stdout.lower()  # nothing recorded
    assert (tmp_path / "app" / "mine.txt").read_text() == "the developer's\n"


def test_a_source_used_once_may_be_gone_when_its_cell_is_applied_again(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    """A directory copied in once is not needed again: after it is removed, the cell's
    manifest still applies (here with a label edited, so it is read again), where a new cell
    naming it is refused."""
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.txt").write_text("a\n")
    allow_host_paths(state_dir, tmp_path)
    manifest = _cell(tmp_path, "box", "fake", f"{{directory: {{path: '{seed}'}}}}")
    assert cli("apply", "-f", str(manifest)).returncode == 0
    (seed / "a.txt").unlink()
    seed.rmdir()
    manifest.write_text(manifest.read_text().replace("name: box}", "name: box, labels: {a: b}}"))
    again = cli("apply", "-f", str(manifest))
    assert again.returncode == 0 and "cell/box configured" in again.stdout, again.stderr
    other = _cell(tmp_path, "other", "fake", f"{{directory: {{path: '{seed}'}}}}")
    refused = cli("apply", "-f", str(other))
    assert refused.returncode != 0 and "other.yaml:8" in refused.stderr, refused.stderr
    assert "does not exist" in refused.stderr
