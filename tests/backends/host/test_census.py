"""Counting several trees together, each inode once, checked against GNU du (which counts a
hard-linked inode once over all the trees it is given), and what removing trees frees."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from devcell.backends.host.census import Census


def _du(*paths: Path, apparent: bool = False) -> int:
    """`du -scB1 [--apparent-size] PATHS`: the total line."""
    flags = ["-scB1", "--apparent-size"] if apparent else ["-scB1"]
    done = subprocess.run(["du", *flags, *map(str, paths)], capture_output=True, text=True,
                          check=True)
    return int(done.stdout.splitlines()[-1].split()[0])


def _three_checkpoints(tmp_path: Path) -> list[Path]:
    """c1 with 20 files; c2 links 18 of them and has 2 changed; c3 links 19 from c2."""
    c1, c2, c3 = (tmp_path / name for name in ("c1", "c2", "c3"))
    for root in (c1, c2, c3):
        (root / "sub").mkdir(parents=True)
    for i in range(20):
        (c1 / "sub" / f"f{i}").write_bytes(os.urandom(4096 * (i + 1) + i))
    for i in range(20):
        if i < 18:
            os.link(c1 / "sub" / f"f{i}", c2 / "sub" / f"f{i}")
        else:
            (c2 / "sub" / f"f{i}").write_bytes(os.urandom(10000 + i))
    for i in range(20):
        if i != 5:
            os.link(c2 / "sub" / f"f{i}", c3 / "sub" / f"f{i}")
        else:
            (c3 / "sub" / "f5").write_bytes(os.urandom(777))
    os.symlink("sub/f1", c3 / "link")
    return [c1, c2, c3]


def test_each_tree_and_the_total_match_du(tmp_path: Path) -> None:
    trees = _three_checkpoints(tmp_path)
    census = Census()
    for tree in trees:
        census.add(tree.name, tree)
    for tree in trees:
        assert census.usage(tree.name).disk == _du(tree)
        assert census.usage(tree.name).logical == _du(tree, apparent=True)
    assert census.total().disk == _du(*trees)
    assert census.total().logical == _du(*trees, apparent=True)
    assert census.total().disk < sum(census.usage(t.name).disk for t in trees) / 2
    assert census.total().files == 20 + 2 + 1 + 1  # c1's, c2's two, c3's f5 and its link


def test_freed_counts_an_inode_only_when_every_link_goes(tmp_path: Path) -> None:
    c1, c2, c3 = _three_checkpoints(tmp_path)
    census = Census()
    for tree in (c1, c2, c3):
        census.add(tree.name, tree)
    blocks = lambda p: p.lstat().st_blocks * 512  # noqa: E731
    dirs = lambda root: blocks(root) + blocks(root / "sub")  # noqa: E731
    # c1's f18, f19 and its f5 (replaced in c3 but still linked from c2) are its own or not:
    assert census.freed(["c1"]) == dirs(c1) + blocks(c1 / "sub" / "f18") + blocks(c1 / "sub" / "f19")
    assert census.freed(["c3"]) == dirs(c3) + blocks(c3 / "sub" / "f5") + blocks(c3 / "link")
    # c1 and c2 together: f5 (linked only from c1 and c2) goes too.
    together = census.freed(["c1", "c2"])
    assert together == dirs(c1) + dirs(c2) + sum(
        blocks(c1 / "sub" / f"f{i}") for i in (5, 18, 19))
    before = _du(c1, c2, c3)
    assert census.freed(["c1", "c2", "c3"]) == before


def test_a_link_outside_the_trees_keeps_the_inode(tmp_path: Path) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "a").write_bytes(os.urandom(50000))
    os.link(tree / "a", tmp_path / "outside")
    census = Census()
    census.add("t", tree)
    assert census.freed(["t"]) == tree.lstat().st_blocks * 512
    assert census.usage("t").disk == _du(tree)


def test_links_are_never_followed_and_a_missing_tree_counts_nothing(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(1 << 20))
    tree = tmp_path / "t"
    tree.mkdir()
    os.symlink(outside, tree / "escape")
    census = Census()
    census.add("t", tree)
    census.add("gone", tmp_path / "missing")
    census.add("linked", tmp_path / "t" / "escape")  # the root itself a link: not walked
    assert census.usage("t").disk == _du(tree) < 1 << 20
    assert census.usage("gone").disk == census.usage("linked").disk == 0
