"""Reading a guest-written ext4 image as hostile input (vm/extract.py): real images made with
mkfs.ext4 and bent with `debugfs -w` the way a guest could bend its own disk."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from devcell.backends.vm import extract as vm_extract
from devcell.errors import BackendRefused

pytestmark = pytest.mark.skipif(shutil.which("debugfs") is None or shutil.which("mkfs.ext4")
                                is None, reason="e2fsprogs is not installed")


def image_of(tmp_path: Path, tree: Path, *, size: str = "16M",
             bend: tuple[str, ...] = ()) -> Path:
    image = tmp_path / "disk.ext4"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", str(tree), str(image), size], check=True)
    for request in bend:
        subprocess.run(["debugfs", "-w", "-R", request, str(image)], check=True,
                       capture_output=True)
    return image


def test_files_links_and_modes_come_out_and_special_files_stay_in(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("alpha\n")
    (tree / "sub" / "b.bin").write_bytes(os.urandom(300_000))
    os.link(tree / "a.txt", tree / "sub" / "hard.txt")
    os.symlink("/etc/passwd", tree / "abs-link")
    os.symlink("x" * 200, tree / "slow-link")
    os.mkfifo(tree / "fifo")
    tool = tree / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)
    image = image_of(tmp_path, tree)
    out = tmp_path / "out"
    out.mkdir()
    files, skipped = vm_extract.extract(image, out, budget=1 << 30)
    assert (out / "a.txt").read_text() == "alpha\n"
    assert (out / "sub" / "b.bin").read_bytes() == (tree / "sub" / "b.bin").read_bytes()
    assert os.stat(out / "a.txt").st_ino == os.stat(out / "sub" / "hard.txt").st_ino
    assert os.readlink(out / "abs-link") == "/etc/passwd"  # kept as a link, never followed
    assert os.readlink(out / "slow-link") == "x" * 200
    assert not (out / "fifo").exists() and skipped >= 1
    assert os.stat(out / "tool").st_mode & 0o7777 == 0o755  # set-id bits dropped
    assert files == 3  # inodes: a hard link is one file


def test_a_link_then_a_file_of_the_same_name_never_writes_through_the_link(
        tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host file\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    os.symlink(str(victim), tree / "aaa")
    (tree / "payload").write_text("guest data\n")
    # A second entry named `aaa` for the payload's inode, after the link: rdump would open
    # `aaa` (following the link it made) and overwrite the host file.
    image = image_of(tmp_path, tree, bend=("ln payload aaa",))
    out = tmp_path / "out"
    out.mkdir()
    vm_extract.extract(image, out, budget=1 << 30)
    assert victim.read_text() == "host file\n"
    assert os.path.islink(out / "aaa")


def test_a_directory_that_contains_itself_is_walked_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("x")
    image = image_of(tmp_path, tree, bend=("ln d d/loop", "ln <2> d/root"))
    out = tmp_path / "out"
    out.mkdir()
    _, skipped = vm_extract.extract(image, out, budget=1 << 30)
    assert (out / "d" / "f").read_text() == "x"
    assert not (out / "d" / "loop").exists() and not (out / "d" / "root").exists()
    assert skipped == 2


def test_a_huge_sparse_file_is_refused_by_name_before_it_is_written(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    with open(tree / "huge.img", "wb") as f:
        f.truncate(64 << 30)  # 64 GiB of holes on a 16 MiB disk
    image = image_of(tmp_path, tree)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BackendRefused, match="huge.img"):
        vm_extract.extract(image, out, budget=16 << 20)
    assert sum(os.stat(p).st_blocks for p in out.rglob("*")) * 512 < 1 << 20


def test_a_name_with_a_newline_comes_out_byte_for_byte_not_misread(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "ok").write_text("1")
    (tree / "two\nlines").write_text("3")
    image = image_of(tmp_path, tree)
    out = tmp_path / "out"
    out.mkdir()
    vm_extract.extract(image, out, budget=1 << 30)
    assert sorted(os.listdir(out)) == ["lost+found", "ok", "two\nlines"]  # mkfs made it
    assert (out / "two\nlines").read_text() == "3"


def _patched(tmp_path: Path, names: dict[bytes, bytes]) -> Path:
    """An image whose directory holds the names given, each written over a placeholder of
    the same length in the image's bytes (no checksums: what a guest's own kernel writes is
    not what it can write by hand)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for placeholder in names:
        (tree / os.fsdecode(placeholder)).write_text("x")
    (tree / "secret").write_text("S")
    image = tmp_path / "disk.ext4"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^metadata_csum", "-d", str(tree),
                    str(image), "16M"], check=True)
    data = image.read_bytes()
    for placeholder, name in names.items():
        assert data.count(placeholder) == 1 and len(name) == len(placeholder)
        data = data.replace(placeholder, name)
    image.write_bytes(data)
    return image


@pytest.mark.parametrize("name", [
    b"a/0/\n/13/100644/0/0/evil/1/\n/12/100644/0/0/b",  # would pass for entries in a listing
    b"nul\0xx", b"../../../../etc/x"])
def test_a_name_holding_a_slash_or_nul_refuses_the_disk_never_reads_as_other_entries(
        tmp_path: Path, name: bytes) -> None:
    placeholder = b"P" * len(name)
    image = _patched(tmp_path, {placeholder: name})
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BackendRefused, match="a name with `/` or NUL"):
        vm_extract.extract(image, out, budget=1 << 30)
    assert not (out / "evil").exists()


def test_an_owner_past_two_to_the_31_comes_out_as_itself(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "f").write_text("1")
    image = image_of(tmp_path, tree, bend=("sif f uid 0x80000000", "sif f gid 0xfffffffe"))
    out = tmp_path / "out"
    out.mkdir()
    vm_extract.extract(image, out, budget=1 << 30)
    st = os.lstat(out / "f")
    assert (st.st_uid, st.st_gid) == (0x80000000, 0xFFFFFFFE)


def test_a_directory_claiming_a_terabyte_is_refused_before_it_is_dumped(tmp_path: Path) -> None:
    """`dump` writes what an inode claims, holes in full: a directory whose size says 1 TiB
    would fill the host's disk before its entries were read."""
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "f").write_text("x")
    image = image_of(tmp_path, tree, bend=("sif d size 0x10000000000",))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(BackendRefused, match="claims 1099511627776 bytes"):
        vm_extract.extract(image, out, budget=1 << 30)
    assert sum(p.stat().st_blocks for p in tmp_path.rglob("*") if p.is_file()) * 512 < 64 << 20
