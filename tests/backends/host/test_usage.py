"""What removing a tree frees, with hard links shared between trees (checkpoints of one cell
share unchanged files): each inode counted once, only when all its links lie inside."""

from __future__ import annotations

import os
from pathlib import Path

from devcell.backends.host import usage


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a").write_bytes(os.urandom(64 * 1024))
    (root / "sub" / "b").write_bytes(os.urandom(128 * 1024))


def _blocks(path: Path) -> int:
    return path.lstat().st_blocks * 512


def test_a_tree_of_its_own_frees_every_block(tmp_path: Path) -> None:
    root = tmp_path / "one"
    _tree(root)
    expected = sum(_blocks(p) for p in [root, *root.rglob("*")])
    assert usage.exclusive_bytes(root) == expected >= 192 * 1024


def test_files_linked_from_another_tree_are_not_counted(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _tree(first)
    (second / "sub").mkdir(parents=True)
    os.link(first / "a", second / "a")  # unchanged: shared by a hard link
    (second / "sub" / "b").write_bytes(os.urandom(128 * 1024))  # changed: its own copy
    dirs = _blocks(second) + _blocks(second / "sub")
    assert usage.exclusive_bytes(second) == dirs + _blocks(second / "sub" / "b")
    assert usage.exclusive_bytes(first) == _blocks(first) + _blocks(first / "sub") + \
        _blocks(first / "sub" / "b")


def test_links_inside_the_tree_count_the_inode_once(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _tree(root)
    os.link(root / "a", root / "sub" / "a2")
    expected = sum(_blocks(p) for p in [root, root / "sub", root / "a", root / "sub" / "b"])
    assert usage.exclusive_bytes(root) == expected


def test_a_symbolic_link_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _tree(outside)
    root = tmp_path / "t"
    root.mkdir()
    (root / "link").symlink_to(outside)
    assert usage.exclusive_bytes(root) == _blocks(root) + _blocks(root / "link")


def test_nothing_there_frees_nothing(tmp_path: Path) -> None:
    assert usage.exclusive_bytes(tmp_path / "missing") == 0
