"""proctree: a process and everything it started are killed; its ancestors are not."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from devcell.backends.host import proctree


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ")[1][:1] not in (b"Z", b"X")
    except (FileNotFoundError, IndexError):
        return False


def test_kill_tree_kills_the_process_and_its_descendants_only() -> None:
    # sh -> (sh -> sleep) and sleep: grandchildren included; the test itself is an ancestor.
    top = subprocess.Popen(["sh", "-c", "sh -c 'sleep 300 & wait' & sleep 301 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(proctree.descendants(top.pid)) < 3:
            assert time.monotonic() < deadline, "the tree never formed"
            time.sleep(0.02)
        below = proctree.descendants(top.pid)
        assert proctree.kill_tree(top.pid) >= 4
        top.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in below):
            assert time.monotonic() < deadline, "a descendant survived"
            time.sleep(0.02)
        assert _alive(os.getpid())
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()


def test_a_name_with_parentheses_and_spaces_is_parsed(tmp_path: Path) -> None:
    """A cell names its processes: comm may hold ") S 1 " to forge a parent."""
    for pid, stat in {"10": "10 (top) S 1 10", "11": "11 (x) S 1 ) S 10 11", "12": "12 (y) S 11 12",
                      "13": "13 (z) S 1 13", "self": "not a pid"}.items():
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "stat").write_text(stat)
    assert sorted(proctree.descendants(10, tmp_path)) == [11, 12]
    assert proctree.descendants(13, tmp_path) == []
