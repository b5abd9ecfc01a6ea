"""A plain file copied in process keeps what `cp -a` keeps, and anything else is left to
`cp`: checked against GNU cp itself, on the same files."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from devcell.backends.host import filecopy

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown, mknod)")


def _kept(path: Path) -> tuple[object, ...]:
    st = os.lstat(path)
    xattrs = {n: os.getxattr(path, n, follow_symlinks=False)
              for n in sorted(os.listxattr(path, follow_symlinks=False))}
    return (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
            st.st_size, st.st_mtime_ns, st.st_atime_ns, path.read_bytes(), xattrs)


def _cp(src: Path, dst: Path) -> None:
    subprocess.run(["cp", "-a", "--", str(src), str(dst)], check=True)


@root_only
def test_bytes_owner_set_id_mode_xattrs_and_times_as_cp_keeps_them(tmp_path: Path) -> None:
    data = os.urandom(300_000)

    def make(path: Path) -> Path:  # two alike sources: reading a file moves its atime
        path.write_bytes(data)
        os.chown(path, 1234, 4321)
        os.chmod(path, 0o6751)  # set-uid and set-gid survive the chown that would clear them
        os.setxattr(path, "user.note", b"kept")
        os.utime(path, ns=(1_500_000_000_123_456_789, 1_600_000_000_987_654_321))
        return path

    assert filecopy.copy_regular(str(make(tmp_path / "src")), str(tmp_path / "mine"))
    _cp(make(tmp_path / "twin"), tmp_path / "theirs")
    mine, theirs = _kept(tmp_path / "mine"), _kept(tmp_path / "theirs")
    assert mine == theirs
    assert mine[1:7] == (0o6751, 1234, 4321, 300_000, 1_600_000_000_987_654_321,
                         1_500_000_000_123_456_789)


def test_a_sparse_file_stays_sparse(tmp_path: Path) -> None:
    src = tmp_path / "sparse"
    with open(src, "wb") as out:
        out.seek(64 * 2**20)
        out.write(b"end")
        out.seek(1 << 20)
        out.write(b"middle")
    out_path = tmp_path / "copy"
    assert filecopy.copy_regular(str(src), str(out_path))
    assert out_path.read_bytes() == src.read_bytes()
    assert os.stat(out_path).st_blocks <= os.stat(src).st_blocks + 64  # not 64 MiB written


def test_a_trailing_hole_keeps_the_length(tmp_path: Path) -> None:
    src = tmp_path / "tail"
    with open(src, "wb") as out:
        out.write(b"data")
        out.truncate(10 * 2**20)
    assert filecopy.copy_regular(str(src), str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == src.read_bytes()


@root_only
def test_anything_but_a_plain_file_with_one_name_is_refused_unopened(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("t")
    os.symlink("target", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")  # opening it to read would block
    os.mknod(tmp_path / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero
    (tmp_path / "one").write_text("x")
    os.link(tmp_path / "one", tmp_path / "two")
    for name in ("link", "fifo", "zero", "one"):
        assert not filecopy.copy_regular(str(tmp_path / name), str(tmp_path / f"{name}.c"))
        assert not os.path.lexists(tmp_path / f"{name}.c")


def test_an_existing_destination_is_never_written_through(tmp_path: Path) -> None:
    (tmp_path / "src").write_text("new")
    (tmp_path / "elsewhere").write_text("precious")
    os.symlink(tmp_path / "elsewhere", tmp_path / "dst")
    with pytest.raises(FileExistsError):
        filecopy.copy_regular(str(tmp_path / "src"), str(tmp_path / "dst"))
    assert (tmp_path / "elsewhere").read_text() == "precious"
