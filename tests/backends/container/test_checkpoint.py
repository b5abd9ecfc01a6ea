"""Checkpoints on the real engine: consistent while services write, forks, hooks, failures."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from devcell.backends.base import Consistency
from devcell.backends.container import workspaces
from devcell.backends.container.backend import ContainerBackend
from devcell.backends.host import treecopy
from devcell.errors import BackendError
from tests.backends.container.support import cell, up, wait_for

SIZE = 65536
# Each file is written in full, fsynced, then renamed into place; `done` lists finished ones.
WRITER = {"name": "writer", "command": ["sh", "-c", """
mkdir -p /workspace/data; i=0
while true; do
    i=$((i + 1))
    head -c 65536 /dev/zero | tr '\\0' x > /workspace/data/.f$i.tmp
    sync /workspace/data/.f$i.tmp
    mv /workspace/data/.f$i.tmp /workspace/data/f$i
    sync
    echo $i >> /workspace/data/done
done"""]}


def _complete(root: Path) -> list[int]:
    """Indices of the files under root/data, each checked to be whole."""
    found = []
    for path in (root / "data").glob("f*"):
        data = path.read_bytes()
        assert len(data) == SIZE and data == b"x" * SIZE, f"{path} is torn ({len(data)} bytes)"
        found.append(int(path.name[1:]))
    return sorted(found)


def test_checkpoint_while_a_service_writes_is_consistent(backend: ContainerBackend) -> None:
    ref = cell(services=[WRITER])
    workspace = backend.layout.workspace(ref.volume_id or "")
    up(backend, ref)
    wait_for(lambda: (workspace / "data" / "done").exists()
             and len((workspace / "data" / "done").read_text().split()) >= 20)
    before_freeze = int((workspace / "data" / "done").read_text().split()[-1])
    backend.quiesce(ref)
    assert backend.observe(ref).frozen
    info = backend.checkpoint(ref, "snap_consistent")
    backend.resume(ref)
    assert info.consistency is Consistency.FILESYSTEM
    saved = Path(info.ref) / "workspace"
    indices = _complete(saved)
    done = [int(x) for x in (saved / "data" / "done").read_text().split()]
    # every file finished (fsynced and listed) before the freeze is there, whole
    assert before_freeze in indices and set(done) <= set(indices)
    assert indices == list(range(1, len(indices) + 1))
    assert info.files == len(list(saved.rglob("*"))) - 1  # minus the data/ directory
    # the service carries on after resume
    wait_for(lambda: int((workspace / "data" / "done").read_text().split()[-1]) > indices[-1])


def test_a_fork_sees_checkpointed_files_and_not_later_ones(backend: ContainerBackend) -> None:
    ref = cell()
    up(backend, ref)
    workspace = backend.layout.workspace(ref.volume_id or "")
    out = io.BytesIO()
    assert backend.exec(ref, ["sh", "-c", "echo before > /workspace/kept.txt"],
                        stdout=out, stderr=out) == 0
    backend.quiesce(ref)
    backend.checkpoint(ref, "snap_forkme")
    backend.resume(ref)
    (workspace / "later.txt").write_text("after the checkpoint\n")

    fork = cell("fork")
    restored = backend.create_volume(fork, fork.volume_id or "", from_checkpoint="snap_forkme")
    assert restored["restoredFrom"] == "snap_forkme" and restored["files"] == 1
    backend.create(fork, "h")
    backend.start(fork)
    seen = io.BytesIO()
    assert backend.exec(fork, ["ls", "/workspace"], stdout=seen, stderr=seen) == 0
    assert seen.getvalue().split() == [b"kept.txt"]
    assert backend.volumes_of(fork.id) == [fork.volume_id]
    # the fork's workspace is its own: writes do not reach the parent or the checkpoint
    assert backend.exec(fork, ["sh", "-c", "echo fork > /workspace/kept.txt"],
                        stdout=seen, stderr=seen) == 0
    assert (workspace / "kept.txt").read_text() == "before\n"
    saved = Path(backend.find_checkpoint("snap_forkme").ref)  # type: ignore[union-attr]
    assert (saved / "workspace" / "kept.txt").read_text() == "before\n"


def test_hooks_run_around_the_freeze(backend: ContainerBackend) -> None:
    ref = cell(hooks={"preCheckpoint": [["sh", "-c", "echo pre >> /workspace/hooks"]],
                      "postCheckpoint": [["sh", "-c", "echo post >> /workspace/hooks"]]})
    up(backend, ref)
    workspace = backend.layout.workspace(ref.volume_id or "")
    assert backend.quiesce(ref)["hooks"] == 1
    info = backend.checkpoint(ref, "snap_hooks")
    assert backend.resume(ref)["hooks"] == 1
    assert backend.resume(ref)["hooks"] == 0  # resume is idempotent: post hooks ran once
    assert (Path(info.ref) / "workspace" / "hooks").read_text() == "pre\n"
    assert (workspace / "hooks").read_text() == "pre\npost\n"


def test_a_failing_pre_hook_fails_quiesce_and_resume_recovers(backend: ContainerBackend) -> None:
    ref = cell(hooks={"preCheckpoint": [["sh", "-c", "echo flush failed >&2; exit 4"]]})
    up(backend, ref)
    with pytest.raises(BackendError, match="preCheckpoint hook .* status 4: flush failed"):
        backend.quiesce(ref)
    assert backend.observe(ref).frozen  # left mid-quiesce: the controller plans a resume
    backend.resume(ref)
    observed = backend.observe(ref)
    assert observed.running and not observed.frozen


def test_checkpoint_freezes_a_running_cell_even_without_quiesce(backend: ContainerBackend) -> None:
    ref = cell()
    up(backend, ref)
    backend.checkpoint(ref, "snap_unquiesced")
    observed = backend.observe(ref)
    assert observed.running and not observed.frozen


def test_a_failed_copy_leaves_no_checkpoint(backend: ContainerBackend,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ref = cell()
    up(backend, ref)
    (backend.layout.workspace(ref.volume_id or "") / "a.txt").write_text("a")

    def broken_copy(src: Path, dst: Path, **_: object) -> treecopy.Snapshot:
        dst.mkdir()
        (dst / "half").write_text("half")
        raise BackendError("disk full (simulated)")

    monkeypatch.setattr(treecopy, "checkpoint_tree", broken_copy)
    backend.quiesce(ref)
    with pytest.raises(BackendError, match="simulated"):
        backend.checkpoint(ref, "snap_broken")
    backend.resume(ref)
    assert backend.find_checkpoint("snap_broken") is None
    assert not backend.checkpoint_exists("snap_broken")
    assert os.listdir(backend.layout.checkpoints) == []
    monkeypatch.undo()
    assert backend.checkpoint(ref, "snap_broken").files == 1


def test_incomplete_leftovers_are_never_reported(backend: ContainerBackend) -> None:
    # a crash mid-copy leaves a temporary directory, or a directory without its metadata
    (backend.layout.checkpoints / ".tmp-snap_crash-0000").mkdir()
    (backend.layout.checkpoints / "snap_crash").mkdir()
    assert backend.find_checkpoint("snap_crash") is None
    ref = cell()
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    assert backend.checkpoint(ref, "snap_crash").files == 0
    assert sorted(os.listdir(backend.layout.checkpoints)) == ["snap_crash"]


def test_workspace_changes_are_detected(backend: ContainerBackend) -> None:
    ref = cell()
    vol = ref.volume_id or ""
    backend.create_volume(ref, vol, from_checkpoint=None)
    workspace = backend.layout.workspace(vol)
    assert not backend.workspace_changed_since(vol, None)
    (workspace / "a.txt").write_text("a")
    assert backend.workspace_changed_since(vol, None)
    backend.checkpoint(ref, "snap_changes")
    assert not backend.workspace_changed_since(vol, "snap_changes")
    (workspace / "a.txt").write_text("ab")
    assert backend.workspace_changed_since(vol, "snap_changes")
    fork = cell("fork")
    backend.create_volume(fork, fork.volume_id or "", from_checkpoint="snap_changes")
    assert not backend.workspace_changed_since(fork.volume_id or "", None)


def test_volume_markers_name_their_cell(backend: ContainerBackend) -> None:
    ref = cell()
    backend.create_volume(ref, ref.volume_id or "", from_checkpoint=None)
    marker = backend.store.marker(ref.volume_id or "")
    assert marker is not None and marker["cell_id"] == ref.id
    assert oct(backend.layout.volume(ref.volume_id or "").stat().st_mode & 0o777) == "0o700"
    assert workspaces.MARKER_VERSION == marker["version"]
