"""treecopy's scan is bounded in memory: past MAX_RECORD entries it counts and copies whole.

A cell with 64 MiB of memory filled its workspace with a million empty files, and each
`snapshot create` held about 1 KB per file on the host (1.15 GB). Past the bound the scan keeps
no identities (the checkpoint is a whole `cp -a`, shares nothing, records nothing to compare),
so memory stays that of the bound whatever the count. No engine: plain trees.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from devcell.backends.host import treecopy


def _fill(root: Path, count: int) -> None:
    for i in range(count):
        directory = root / f"d{i % 20}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i:06d}").write_bytes(b"")


def _scan_peak(root: Path) -> tuple[treecopy.Scan, int]:
    tracemalloc.start()
    try:
        found = treecopy.scan(root)
        return found, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_past_the_bound_a_scan_counts_only_and_the_copy_is_whole_and_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src"
    _fill(source, 120)
    os.symlink("d0/f000000", source / "link")
    monkeypatch.setattr(treecopy, "MAX_RECORD", 50)
    found = treecopy.scan(source)
    assert found.deep and found.files == 121 and not found.entries and not found.record
    made = treecopy.checkpoint_tree(source, tmp_path / "copy")
    assert made.stats.files == 121 and made.reused_files == 0
    assert treecopy.signature(tmp_path / "copy") == treecopy.signature(source)


def test_memory_of_a_scan_stays_that_of_the_bound(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src"
    _fill(source, 20_000)
    _, unbounded = _scan_peak(source)
    monkeypatch.setattr(treecopy, "MAX_RECORD", 1_000)
    found, bounded = _scan_peak(source)
    assert found.deep and found.files == 20_000
    assert bounded * 5 < unbounded, (bounded, unbounded)  # ~20x fewer identities held
