"""`devcell gc` reports only what it removed and names what it could not, and why (issue 31
item 2): a removal that failed is never counted as freed nor printed as removed, and the other
removals still happen; a dry run says a deletion waiting for approval is waiting for approval,
never "interrupted"."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from devcell.backends.host import treecopy
from devcell.errors import BackendError
from tests.conftest import EXAMPLES, Cli


def _leak(state_dir: Path, volume_id: str, cell_id: str) -> None:
    conn = sqlite3.connect(state_dir / "backends" / "fake.db", isolation_level=None)
    conn.execute("INSERT INTO volumes (id, cell_id, cell_name) VALUES (?, ?, 'gone')",
                 (volume_id, cell_id))
    conn.close()


FAIL_ONE = "delete_volume@gone:1"


@pytest.mark.daemon_env(DEVCELL_FAKE_FAIL=FAIL_ONE)  # through a server: the daemon removes
def test_a_removal_that_failed_is_named_with_why_and_not_counted(cli: Cli, state_dir: Path) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    _leak(state_dir, "vol_leftbehind000000001", "cell_gone00000000000001")
    _leak(state_dir, "vol_leftbehind000000002", "cell_gone00000000000002")
    done = cli("gc", "--approve", env={"DEVCELL_FAKE_FAIL": FAIL_ONE})
    assert done.returncode == 1, done
    lines = done.stdout.splitlines()
    removed = [line for line in lines if " removed " in line]
    assert len(removed) == 1, done.stdout  # the other one still went
    failed = [line for line in done.stderr.splitlines() if "not removed" in line]
    assert len(failed) == 1 and "injected failure in step delete_volume" in failed[0], done
    kept_id = failed[0].split()[1].split("/")[1].rstrip(":")
    assert kept_id not in removed[0]
    left = sqlite3.connect(state_dir / "backends" / "fake.db").execute(
        "SELECT id FROM volumes WHERE cell_name = 'gone'").fetchall()
    assert [row[0] for row in left] == [kept_id]
    assert lines[-1].startswith("freed ")


def test_a_dry_run_says_a_deletion_waits_for_approval(cli: Cli, state_dir: Path) -> None:
    assert cli("apply", "-f", str(EXAMPLES / "api.yaml")).returncode == 0
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1")  # someone edits the workspace
    conn.commit()
    conn.close()
    waits = cli("delete", "cell", "api")  # for approval: said as such, through a server too
    assert (waits.returncode, waits.stdout) == (1, "cell/api deletion waiting for approval\n")
    assert waits.stderr.startswith("error: cell/api: operation op_"), waits.stderr
    assert " awaiting approval: " in waits.stderr and "`devcell op resume op_" in waits.stderr
    assert waits.stderr.count("\n") == 1, waits.stderr
    dry = cli("gc", "--dry-run")
    assert dry.returncode == 0, dry
    assert "interrupted" not in dry.stdout, dry.stdout
    line = next(line for line in dry.stdout.splitlines() if line.startswith("cell/api"))
    assert line.startswith("cell/api: its deletion waits for approval (operation op_"), line
    assert "devcell op resume op_" in line


@pytest.fixture
def immutable(tmp_path: Path) -> Path:
    tree = tmp_path / "volume"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "pinned").write_text("x")
    if subprocess.run(["chattr", "+i", str(tree / "sub" / "pinned")],
                      capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    yield tree
    for pinned in tmp_path.rglob("pinned"):
        subprocess.run(["chattr", "-i", str(pinned)], capture_output=True)


def test_a_tree_removal_that_leaves_files_says_so(immutable: Path, tmp_path: Path) -> None:
    """Root-owned files in a workspace a non-root DevCell deletes: `rm` fails on them. The
    removal (delete, gc) was quiet about it (a log line) and gc counted it as freed."""
    trash = tmp_path / ".trash-x"
    with pytest.raises(BackendError, match=r"could not remove all of .*volume: .*pinned"):
        treecopy.remove_tree_fully(immutable, trash)
