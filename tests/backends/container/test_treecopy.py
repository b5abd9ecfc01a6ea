"""The parallel tree copy keeps exactly what `cp -a` keeps (no engine needed)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from devcell.backends.host import treecopy
from devcell.errors import BackendError


def _tree(root: Path, files: int) -> None:
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty").mkdir()
    for i in range(files):
        (root / "a" / f"f{i}").write_text(str(i))
        (root / "a" / "b" / f"g{i}").write_text(str(i) * 3)
    (root / "-rf").write_text("dash")
    (root / "new\nline").write_text("n")
    (root / "a" / "b" / "rel").symlink_to("../f1")
    (root / "dangling").symlink_to("nowhere")
    os.link(root / "a" / "f1", root / "a" / "b" / "c" / "hard")
    os.mkfifo(root / "fifo")
    (root / "suid").write_text("s")
    os.chmod(root / "suid", 0o4755)
    os.chmod(root / "a" / "b" / "c", 0o700)
    os.chmod(root / "empty", 0o1777)
    try:
        os.setxattr(root / "a" / "f2", "user.k", b"v1")
        os.setxattr(root / "a" / "b", "user.d", b"dv")
    except OSError:
        pass  # a filesystem without user xattrs: the rest still applies
    for path in (root / "a" / "b", root / "a", root / "empty"):
        os.utime(path, (1_000_000_000, 1_000_000_000))


def _dirs(root: Path) -> dict[str, tuple[int, int, list[str]]]:
    out = {}
    for path, _, _ in os.walk(root):
        st = os.lstat(path)
        out[os.path.relpath(path, root)] = (st.st_mode, st.st_mtime_ns, sorted(os.listxattr(path)))
    return out


@pytest.mark.parametrize("files", [3, 200])  # the serial path and the parallel one
def test_copy_matches_cp_a(tmp_path: Path, files: int) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _tree(src, files)
    stats = treecopy.copy_tree(src, tmp_path / "mine")
    subprocess.run(["cp", "-a", str(src), str(tmp_path / "ref")], check=True)
    assert treecopy.signature(tmp_path / "mine") == treecopy.signature(tmp_path / "ref")
    assert _dirs(tmp_path / "mine") == _dirs(tmp_path / "ref")
    assert stats == treecopy.measure(src) and stats.files == 2 * files + 7
    mine = tmp_path / "mine"
    assert os.lstat(mine / "a" / "f1").st_ino == os.lstat(mine / "a" / "b" / "c" / "hard").st_ino
    assert (mine / "new\nline").read_text() == "n" and (mine / "-rf").read_text() == "dash"


def test_copy_refuses_an_existing_target(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    with pytest.raises(BackendError, match="existing"):
        treecopy.copy_tree(tmp_path / "src", tmp_path / "dst")


def _deep_tree(root: Path, levels: int = 24) -> None:
    """A tree deeper than PATH_MAX (24 x 200 characters), made as a cell could make it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"x")
        os.close(leaf)
    finally:
        os.close(fd)


def test_signature_and_removal_of_a_tree_deeper_than_path_max(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "escape").symlink_to("/etc")  # never followed
    _deep_tree(root)
    found = treecopy.signature(root)
    assert treecopy.measure(root).files == 2  # the leaf and the link, not /etc's files
    (root / "escape").unlink()
    (root / "escape").symlink_to("/usr")
    assert treecopy.signature(root) != found  # a changed link target is a change
    treecopy.remove_tree(root, tmp_path / ".trash")
    assert not root.exists() and not (tmp_path / ".trash").exists()


def test_link_chunks_cover_every_file_once_and_end_with_a_directory() -> None:
    """Chunks are cut where a directory ends when one ends in the chunk's second half, so two
    threads rarely link into one directory (link(2) locks it)."""
    reused = [(f"d{d:03d}/f{f:04d}", f"/earlier/d{d:03d}/f{f:04d}")
              for d in range(40) for f in range(150)]
    chunks = treecopy._link_chunks(reused)
    assert [pair for chunk in chunks for pair in chunk] == reused
    for chunk, following in zip(chunks, chunks[1:], strict=False):
        assert treecopy.LINK_BATCH // 2 <= len(chunk) <= treecopy.LINK_BATCH
        assert chunk[-1][0].split("/")[0] != following[0][0].split("/")[0]
    one_directory = [(f"d/f{f:05d}", f"/e/d/f{f:05d}") for f in range(3 * treecopy.LINK_BATCH)]
    assert [len(c) for c in treecopy._link_chunks(one_directory)] == [treecopy.LINK_BATCH] * 3


def test_parallel_jobs_raise_the_first_failure_and_start_nothing_after_it() -> None:
    ran: list[int] = []
    advanced: list[int] = []

    def job(n: int) -> None:
        ran.append(n)
        if n == 2:
            raise OSError(28, "No space left on device")
        time.sleep(0.01)  # the others take a while: the failure is seen before they all ran

    jobs = [(lambda n=n: job(n), 10 * n) for n in range(50)]
    with pytest.raises(OSError, match="No space left"):
        treecopy._run_jobs(jobs, 1 + 3, advanced.append)
    assert 2 in ran and len(ran) < 50  # the ones already started end; no new one begins
    assert 20 not in advanced  # a failed job's bytes are not reported done
    done: list[int] = []
    treecopy._run_jobs([(lambda n=n: done.append(n), n) for n in range(20)], 4, advanced.append)
    assert sorted(done) == list(range(20))
