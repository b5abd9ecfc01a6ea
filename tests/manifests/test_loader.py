"""Finding and reading manifest files: the walk's order and rules, reading within the limit."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from devcell.manifests import loader

NAMES = st.sampled_from(["a.yaml", "b.yml", "c.json", "z.yaml", "A.yaml", "_x.yaml", ".h.yaml",
                         "notes.txt"])
DIRS = st.sampled_from(["", "a", "b", "a/b", "a/a", "z", ".git", "node_modules"])


@settings(max_examples=80, deadline=None)
@given(st.sets(st.tuples(DIRS, NAMES), max_size=20))
def test_walk_order_sorts_files_as_the_walk_lists_them(entries: set[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for directory, name in entries:
            (Path(tmp) / directory).mkdir(parents=True, exist_ok=True)
            (Path(tmp) / directory / name).write_text("x")
        walked = loader.walk(tmp)
        relative = [os.path.relpath(p, tmp) for p in walked]
        assert sorted(relative, key=loader.walk_order) == relative
        assert all(not any(loader.hidden(part) for part in r.split(os.sep)) for r in relative)
        assert all(loader.manifest_name(os.path.basename(r)) for r in relative)


def test_small_and_limit_sized_files_are_read_whole(tmp_path: Path) -> None:
    small, exact = tmp_path / "small.yaml", tmp_path / "exact.yaml"
    small.write_bytes(b"kind: Cell\n")
    exact.write_bytes(b"x" * 64)
    files = loader.read_sources([str(small), str(exact)], limit=64)
    assert [f.data for f in files] == [b"kind: Cell\n", b"x" * 64]
