"""The host reads a cell's service state files as it reads anything a cell wrote
(backends/service_state.py): plain key=value files parsed, and links, FIFOs, directories,
huge files and nonsense values never followed, blocked on, or believed."""

from __future__ import annotations

import os
from pathlib import Path

from devcell.backends import service_state


def test_state_and_readiness_files_are_read(tmp_path: Path) -> None:
    (tmp_path / "web").write_text("state=running\nrestarts=2\nstreak=0\nlastExit=143\n"
                                  "since=1796409381\n")
    (tmp_path / "web.ready").write_text("ready=true\nok=1\nfailed=0\nlast=0\nat=1796409382\n")
    (tmp_path / "db").write_text("state=crash-looping\nrestarts=5\nlastExit=127\n")
    (tmp_path / "web.pid").write_text("26\n")
    assert service_state.read(tmp_path) == {
        "db": {"state": "crash-looping", "restarts": 5, "lastExit": 127},
        "web": {"state": "running", "restarts": 2, "streak": 0, "lastExit": 143,
                "since": 1796409381,
                "check": {"ready": True, "ok": 1, "failed": 0, "last": 0, "at": 1796409382}},
    }


def test_what_a_cell_plants_is_not_followed_or_believed(tmp_path: Path) -> None:
    secret = tmp_path.parent / "secret"
    secret.write_text("state=running\nrestarts=9\n")
    (tmp_path / "linked").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "huge").write_bytes(b"state=running\nrestarts=1\n" + b"x" * (1 << 20))
    (tmp_path / "odd").write_text("state=sleeping\nrestarts=lots\nlastExit=1e9\n")
    (tmp_path / "web").write_text("state=exited\nrestarts=0\nlastExit=0\n")
    (tmp_path / "web.ready").symlink_to(secret)
    found = service_state.read(tmp_path)
    assert found == {"huge": {"state": "running", "restarts": 1},
                     "web": {"state": "exited", "restarts": 0, "lastExit": 0}}


def test_a_state_directory_that_is_a_link_is_not_read(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "web").write_text("state=running\n")
    (tmp_path / "state").symlink_to(real)
    assert service_state.read(tmp_path / "state") == {}
    assert service_state.read(tmp_path / "missing") == {}
