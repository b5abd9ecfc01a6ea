"""`devcell gc` on the container backend (real engine, the CLI as a user runs it): a deleted
snapshot's leftover checkpoint is freed with its bytes; an orphan holding files goes only with
--approve; bytes shared by hard links with a kept checkpoint are neither counted nor lost."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from devcell.backends.container.layout import Layout
from devcell.backends.host import usage
from tests.backends.container.test_storage_freed import _cell, _snap
from tests.conftest import Cli

BLOB = 400_000


@pytest.fixture
def world(engine: None, cli: Cli, tmp_path: Path, state: Path) -> dict[str, str]:
    path = tmp_path / "a.yaml"
    path.write_text(_cell("base", write=f"head -c {BLOB} /dev/urandom > /workspace/.blob && "
                                        "mv /workspace/.blob /workspace/blob"))
    applied = cli("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    # The blob complete, and older than the checkpoints' clock tick, before s1 is taken: a
    # file still being written (or written within s1's tick) is copied again by s2, not shared.
    deadline = time.monotonic() + 60
    while cli("exec", "base", "--", "test", "-e", "/workspace/blob").returncode != 0:
        assert time.monotonic() < deadline, "the cell never wrote its blob"
        time.sleep(0.2)
    time.sleep(0.05)
    path.write_text(path.read_text() + "---\n" + _snap("s1", "base") + "---\n"
                    + _snap("s2", "base"))
    applied = cli("apply", "-f", str(path))
    assert applied.returncode == 0, applied.stderr
    conn = sqlite3.connect(state / "state.db")
    rows = dict(conn.execute("SELECT name, id FROM snapshots").fetchall())
    conn.close()
    return rows


def _freed(line_start: str, stdout: str) -> float:
    for line in stdout.splitlines():
        if line.startswith(line_start):
            number, unit = re.search(r"\((\d+(?:\.\d+)?) (B|KiB|MiB)\)", line).groups()
            return float(number) * {"B": 1, "KiB": 1024, "MiB": 1 << 20}[unit]
    raise AssertionError(f"no line {line_start!r} in:\n{stdout}")


def test_a_deleted_snapshots_leftover_checkpoint_is_freed(
        cli: Cli, state: Path, world: dict[str, str]) -> None:
    # An older DevCell (or a crash in it) marked s2 deleted and left its checkpoint.
    conn = sqlite3.connect(state / "state.db")
    conn.execute("UPDATE snapshots SET deleted_at = '2026-01-01', phase = 'Deleted' "
                 "WHERE name = 's2'")
    conn.commit()
    conn.close()
    leftover = Layout(state).checkpoint(world["s2"])
    assert leftover.is_dir()
    # s2 shares the unchanged blob with s1 (a hard link): it frees only what is its own
    own = usage.exclusive_bytes(leftover)
    assert own < BLOB
    done = cli("gc")
    assert done.returncode == 0, done.stderr
    assert _freed(f"checkpoint/{world['s2']} removed", done.stdout) == pytest.approx(own,
                                                                                     rel=0.05)
    assert not leftover.exists()
    assert (Layout(state).checkpoint(world["s1"]) / "workspace" / "blob").stat().st_size == BLOB
    assert "gc/container" in cli("get", "ops").stdout


def test_an_orphan_holding_files_goes_only_with_approval_and_shared_bytes_stay(
        cli: Cli, state: Path, world: dict[str, str], tmp_path: Path) -> None:
    layout = Layout(state)
    orphan = layout.checkpoint("snap_orphanlinked0000001")
    # A checkpoint no object names, sharing the blob with s1's by a hard link.
    subprocess.run(["cp", "-al", str(layout.checkpoint(world["s1"])), str(orphan)], check=True)
    meta_path = orphan / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    meta_path.unlink()
    meta_path.write_text(json.dumps(dict(meta, id=orphan.name, cell_id="cell_neverrecorded01")))
    kept = cli("gc")
    assert kept.returncode == 0, kept.stderr
    assert f"checkpoint/{orphan.name} kept" in kept.stdout and "--approve" in kept.stdout
    assert orphan.is_dir()
    done = cli("gc", "--approve")
    assert done.returncode == 0, done.stderr
    assert _freed(f"checkpoint/{orphan.name} removed", done.stdout) < BLOB  # the blob is s1's
    assert not orphan.exists()
    fork = tmp_path / "fork.yaml"
    fork.write_text(_cell("fork", fork_of="s1"))
    assert cli("apply", "-f", str(fork)).returncode == 0
    size = cli("exec", "fork", "--", "sh", "-c", "wc -c < /workspace/blob")
    assert size.stdout.strip() == str(BLOB), size.stderr
