"""Leaks after a kill: a DevCell process killed mid-copy leaves no child copying, and the next
command's recovery removes the temporary directory it was filling (its owner is provably
dead), while a live owner's temporaries are left alone. No engine needed: the workspace store
copies on the host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from devcell.backends.host import temporaries
from devcell.controllers.context import Context
from devcell.reconciler.converge import converge
from devcell.store.db import open_database
from tests.conftest import REPO

COPIER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from devcell.backends.container.layout import Layout
    from devcell.backends.container.workspaces import WorkspaceStore

    store = WorkspaceStore(Layout(Path(sys.argv[1])))
    store.create_volume(cell_id="cell_a", cell_name="a", volume_id="vol_a", from_checkpoint=None)
    workspace = store.layout.workspace("vol_a")
    for i in range(3000):  # past treecopy.IN_PROCESS_FILES: copied by cp processes
        (workspace / f"d{i % 10}").mkdir(exist_ok=True)
        (workspace / f"d{i % 10}" / f"f{i}").write_text("x")
    store.checkpoint(checkpoint_id="snap_a", cell_id="cell_a", volume_id="vol_a")
""")


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"Z"  # a zombie is dead
    except FileNotFoundError:
        return True


def _slow_cp(bin_dir: Path, pids: Path) -> None:
    """A `cp` that records its pid and then takes a minute: a copy caught in the middle."""
    bin_dir.mkdir()
    cp = bin_dir / "cp"
    cp.write_text(f'#!/bin/sh\necho $$ >> "{pids}"\nexec sleep 60\n')
    cp.chmod(0o755)


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def test_a_copy_killed_mid_way_leaves_no_child_and_its_temporary_is_removed(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    open_database(state).close()
    pids = tmp_path / "cp.pids"
    _slow_cp(tmp_path / "bin", pids)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               PYTHONPATH=str(REPO))
    copier = subprocess.Popen([sys.executable, "-c", COPIER, str(state)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while len(_pids(pids)) < 2 and time.monotonic() < deadline:
            assert copier.poll() is None, copier.stderr.read() if copier.stderr else ""
            time.sleep(0.05)
        assert len(_pids(pids)) >= 2, "the copy never started its cp processes"
        copier.send_signal(signal.SIGKILL)
        copier.wait(10)
        deadline = time.monotonic() + 5
        while not all(_dead(p) for p in _pids(pids)) and time.monotonic() < deadline:
            time.sleep(0.05)
        survivors = [p for p in _pids(pids) if not _dead(p)]
        assert survivors == [], f"cp processes outlived the killed copy: {survivors}"
    finally:
        for pid in _pids(pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if copier.poll() is None:
            copier.kill()
        copier.wait(10)
        if copier.stderr:
            copier.stderr.close()

    checkpoints = state / "images" / "checkpoints"
    left = [n for n in os.listdir(checkpoints) if n.startswith(temporaries.TMP)]
    assert len(left) == 1 and left[0].startswith(".tmp-snap_a-")
    db = open_database(state)
    ctx = Context(db, trigger="test")
    try:
        converge(ctx, [])  # the next command's recovery
    finally:
        ctx.close()
        db.close()
    assert os.listdir(checkpoints) == []  # nothing half-built, no trash


def _finished_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_only_temporaries_of_dead_owners_are_removed(tmp_path: Path) -> None:
    dead = _finished_pid()
    names = {
        "mine": temporaries.temp_name("snap_live"),
        "dead": f".tmp-snap_dead-{dead}.1-abcd1234",
        "recycled": f".tmp-snap_recycled-{os.getpid()}.1-abcd1234",  # same pid, other start
        "older devcell": ".tmp-snap_old-abcd1234",
        "not devcell's": ".tmp-my-notes",
        "dead trash": f".trash-{dead}.1-abcdef123456",
        "live trash": temporaries.trash(tmp_path).name,
        "a checkpoint": "snap_done",
    }
    for name in names.values():
        (tmp_path / name / "workspace").mkdir(parents=True)
        (tmp_path / name / "workspace" / "f").write_text("x")

    removed = temporaries.remove_dead(tmp_path)

    assert sorted(removed) == sorted(names[k] for k in (
        "dead", "recycled", "older devcell", "dead trash"))
    # a name with no owner and not of DevCell's shape (a user's `.tmp-my-notes`): kept
    assert sorted(os.listdir(tmp_path)) == sorted(
        names[k] for k in ("mine", "live trash", "a checkpoint", "not devcell's"))


def test_a_temporary_that_is_a_link_is_unlinked_never_followed(tmp_path: Path) -> None:
    """`.trash-x -> /elsewhere` planted beside DevCell's temporaries: recovery resolved it,
    detached the mounts under its target and removed what they held."""
    dead = _finished_pid()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "kept").mkdir(parents=True)
    (elsewhere / "kept" / "f").write_text("not DevCell's\n")
    parent = tmp_path / "volumes"
    parent.mkdir()
    for name in (f".trash-{dead}.1-abcdef123456", f".tmp-vol_x-{dead}.1-abcd1234"):
        (parent / name).symlink_to(elsewhere)
    removed = temporaries.remove_dead(parent)
    assert len(removed) == 2 and os.listdir(parent) == []
    assert (elsewhere / "kept" / "f").read_text() == "not DevCell's\n"


def test_a_child_dies_with_the_thread_that_started_it(tmp_path: Path) -> None:
    """children.run's child gets SIGKILL when its parent dies, whoever kills the parent."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from devcell.backends.host import children
        children.run(["sh", "-c", "echo $$ > {tmp_path / 'pid'}; exec sleep 60"])
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    pid_file = tmp_path / "pid"
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert os.getpgid(child) == child  # its own process group: Ctrl-C goes to DevCell
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 5
        while not _dead(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _dead(child)
    finally:
        if pid_file.exists() and pid_file.read_text().strip():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if parent.poll() is None:
            parent.kill()
        parent.wait(10)
