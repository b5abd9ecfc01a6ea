"""A directory source (`spec.workspace.source.directory`) copied into a new workspace by
backends/host/workspace_seed.py, while a cell may be writing it: nothing outside it is ever
copied, whatever is swapped in during the copy, and the copy is what `cp -a` makes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devcell.backends.host import workspace_seed
from devcell.errors import BackendError, BackendRefused


def _fill(src: Path, into: Path) -> None:
    """What the container backend does with a directory source once it was checked."""
    workspace_seed.fill(workspace_seed.DirectorySource(str(src)), into, cell_name="box")


_SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    libc.renameat2(-100, b"real", -100, b"link", 2)  # RENAME_EXCHANGE: a dir <-> a link
"""


def test_a_directory_swapped_for_a_link_during_the_copy_is_never_followed(
        tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    src = tmp_path / "src"
    (src / "real").mkdir(parents=True)
    for i in range(200):  # the same names as the secret's: a path copier reads them there
        (src / "real" / f"f{i}").write_text("harmless\n")
        (secret / f"f{i}").write_text("TOPSECRET\n")
    (src / "link").symlink_to(secret)
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(src), "60"])
    leaked = copied = 0
    try:
        time.sleep(0.2)
        for i in range(40):
            into = tmp_path / f"ws{i}"
            try:
                _fill(src, into)
                copied += 1
            except BackendError:
                pass  # the walk saw the swap: refused, never followed
            leaked += sum("TOPSECRET" in p.read_text() for p in into.rglob("*")
                          if p.is_file() and not p.is_symlink())
    finally:
        swapper.kill()
        swapper.wait()
    assert leaked == 0
    assert copied > 0


def test_the_copy_keeps_links_modes_owners_and_fifos_and_opens_nothing_else(
        tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "d" / "run.sh", 0o751)
    os.chown(src / "d" / "run.sh", 1234, 1235)
    (src / "pw").symlink_to("/etc/passwd")
    os.mkfifo(src / "fifo")  # opening it would block
    with open(src / "sparse", "wb") as f:
        f.truncate(2**30)
    _fill(src, tmp_path / "ws")
    ws = tmp_path / "ws"
    st = os.lstat(ws / "d" / "run.sh")
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o751, 1234, 1235)
    assert os.readlink(ws / "pw") == "/etc/passwd"
    assert stat.S_ISFIFO(os.lstat(ws / "fifo").st_mode)
    assert os.lstat(ws / "sparse").st_size == 2**30 and os.lstat(ws / "sparse").st_blocks == 0


def test_a_path_swapped_for_a_link_after_the_check_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed" / "sub").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / "project").mkdir()
    with pytest.raises(BackendRefused, match="changed since it was checked"):
        _fill(tmp_path / "allowed" / "sub" / "project", tmp_path / "ws")
