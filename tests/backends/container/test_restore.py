"""`devcell snapshot restore` on the real Docker engine, run as a user runs it: the approval
gate with what would be replaced, the restored workspace exactly the snapshot's tree (tree
digest: contents, modes, owners, links, mtimes), the safety snapshot exactly the tree
before, the cell running again and seeing the restored files, and a write after the
restore never reaching the snapshot. Also a fork restored in place."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest

from tests.backends.container.support import box_manifest
from tests.backends.tree_digest import digest, entries, inodes
from tests.conftest import Cli


def _ids(state: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT name, id FROM snapshots WHERE deleted_at IS NULL "
                            "UNION ALL SELECT name, id FROM cells WHERE deleted_at IS NULL")
        return dict(rows.fetchall())
    finally:
        conn.close()


def _workspace(state: Path, cell: str) -> Path:
    conn = sqlite3.connect(f"file:{state / 'state.db'}?mode=ro", uri=True)
    try:
        (volume,) = conn.execute("SELECT v.id FROM volumes v JOIN cells c ON c.id = v.cell_id "
                                 "WHERE c.name = ? AND v.deleted_at IS NULL", (cell,)).fetchone()
    finally:
        conn.close()
    return state / "volumes" / volume / "workspace"


def _checkpoint(state: Path, snapshot: str) -> Path:
    return state / "images" / "checkpoints" / _ids(state)[snapshot] / "workspace"


def ok(cli: Cli, *args: str) -> str:
    done = cli(*args)
    assert done.returncode == 0, f"devcell {' '.join(args)}: {done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


@pytest.fixture
def box(engine: None, cli: Cli, tmp_path: Path, state: Path) -> Path:
    ok(cli, "apply", "-f", str(box_manifest(tmp_path)))
    ok(cli, "exec", "box", "--", "sh", "-c",
       "mkdir -p src/deep && echo v1 > src/main.txt && echo keep > notes && chmod 640 notes "
       "&& ln -s src/main.txt entry && echo x > src/deep/leaf && touch -d 2020-01-02 notes")
    time.sleep(0.05)
    ok(cli, "snapshot", "create", "box", "--name", "s1")
    return state


def test_restore_waits_for_approval_then_brings_back_exactly_the_snapshot(
        cli: Cli, box: Path) -> None:
    state = box
    snap = digest(_checkpoint(state, "s1"))
    ok(cli, "exec", "box", "--", "sh", "-c",
       "echo v2 > src/main.txt && rm notes && echo new > added && chmod 700 src/deep")
    workspace = _workspace(state, "box")
    before = entries(workspace)

    dry = ok(cli, "snapshot", "restore", "s1", "--dry-run")
    assert "steps: stop, checkpoint (safety), restore-workspace, start" in dry
    assert "1 added, 2 changed, 1 removed: +added, ~src/deep, ~src/main.txt, -notes" in dry

    held = cli("snapshot", "restore", "s1")
    assert held.returncode == 1, held.stderr
    assert "cell/box restore waiting for approval" in held.stdout
    assert "+added, ~src/deep, ~src/main.txt, -notes" in held.stderr
    assert "the safety snapshot box-pre-restore-1 keeps them" in held.stderr
    assert entries(workspace) == before, "nothing done before approval"
    op = re.search(r"devcell op resume (op_\w+)", held.stderr)
    assert op is not None, held.stderr

    ok(cli, "op", "resume", op[1], "--input", "confirm=box")

    assert digest(workspace) == snap
    assert entries(_checkpoint(state, "box-pre-restore-1")) == before
    assert ok(cli, "exec", "box", "--", "cat", "src/main.txt") == "v1\n"
    cells = json.loads(ok(cli, "get", "cells", "box", "-o", "json"))
    assert cells["status"]["phase"] == "Running"
    assert cells["status"]["restore"]["safetySnapshot"] == "box-pre-restore-1"


def test_a_write_after_restore_never_changes_the_snapshot(cli: Cli, box: Path) -> None:
    state = box
    snap = digest(_checkpoint(state, "s1"))
    ok(cli, "exec", "box", "--", "sh", "-c", "echo v2 > src/main.txt")
    out = ok(cli, "snapshot", "restore", "s1", "--approve", "--no-safety-snapshot")
    assert "cell/box restored from snapshot/s1" in out and "safety" not in out
    workspace = _workspace(state, "box")
    assert not inodes(workspace) & inodes(_checkpoint(state, "s1"))
    # every path a process in the cell can write through
    ok(cli, "exec", "box", "--", "sh", "-c",
       "printf X | dd of=src/main.txt conv=notrunc 2>/dev/null; : > src/deep/leaf; "
       "echo more >> notes; chmod 777 notes; ln notes notes.link; "
       "echo over > tmp && mv tmp src/main.txt")
    assert digest(_checkpoint(state, "s1")) == snap
    assert "box-pre-restore-1" not in _ids(state)


def test_restoring_the_safety_snapshot_rolls_forward_again(cli: Cli, box: Path) -> None:
    state = box
    ok(cli, "exec", "box", "--", "sh", "-c", "echo v2 > src/main.txt")
    changed = digest(_workspace(state, "box"))
    ok(cli, "snapshot", "restore", "s1", "--approve")
    ok(cli, "snapshot", "restore", "box-pre-restore-1")  # unchanged since: no approval needed
    assert digest(_workspace(state, "box")) == changed


def test_a_fork_restored_in_place(cli: Cli, box: Path) -> None:
    state = box
    ok(cli, "cell", "fork", "box", "--snapshot", "s1", "--name", "fk")
    ok(cli, "exec", "fk", "--", "sh", "-c", "echo fork > src/main.txt && echo f > f.txt")
    time.sleep(0.05)
    ok(cli, "snapshot", "create", "fk", "--name", "fs1")
    wanted = digest(_checkpoint(state, "fs1"))
    ok(cli, "exec", "fk", "--", "sh", "-c", "rm -r src && echo g > g.txt")
    ok(cli, "snapshot", "restore", "fs1", "--approve")
    assert digest(_workspace(state, "fk")) == wanted
    assert ok(cli, "exec", "fk", "--", "cat", "src/main.txt") == "fork\n"
    # back to where it was forked from: its own writes dropped, the parent untouched
    ok(cli, "snapshot", "restore", "s1", "--cell", "fk", "--approve")
    assert digest(_workspace(state, "fk")) == digest(_checkpoint(state, "s1"))
    assert ok(cli, "exec", "box", "--", "cat", "src/main.txt") == "v1\n"
    upper = _workspace(state, "fk").parent / "upper"
    assert not os.listdir(upper), "a fork back at its own snapshot holds nothing of its own"


def test_another_cells_snapshot_is_refused_with_the_way_to_fork(cli: Cli, box: Path,
                                                                tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    manifest = box_manifest(other)
    manifest.write_text(manifest.read_text().replace("name: box", "name: other"))
    ok(cli, "apply", "-f", str(manifest))
    refused = cli("snapshot", "restore", "s1", "--cell", "other")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert 'was taken of cell "box", not of cell "other"' in refused.stderr
    assert "devcell cell fork" in refused.stderr
