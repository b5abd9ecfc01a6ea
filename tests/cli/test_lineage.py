"""`devcell get snapshots --tree`: lineage from the store, as a user sees it."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import yaml

from devcell.cli import lineage
from tests.conftest import Cli
from tests.controllers.support import cell_doc, snapshot_doc


def _apply(cli: Cli, tmp_path: Path, name: str, *docs: dict[str, Any]) -> None:
    path = tmp_path / name
    path.write_text("---\n".join(yaml.safe_dump(d) for d in docs))
    done = cli("apply", "-f", str(path))
    assert done.returncode == 0, done.stderr


def test_the_tree_shows_where_each_snapshot_came_from_and_what_was_forked_from_it(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _apply(cli, tmp_path, "a.yaml", cell_doc("api"), snapshot_doc("s1", "api"),
           snapshot_doc("s2", "api"), cell_doc("exp", fork_of="s1"), cell_doc("solo"))
    _apply(cli, tmp_path, "b.yaml", snapshot_doc("e1", "exp"), cell_doc("exp2", fork_of="e1"))
    assert cli("delete", "cell", "api").returncode == 0  # its snapshots stay
    tree = cli("get", "snapshots", "--tree")
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout == (
        "cell/api  Deleted\n"
        "├── snapshot/s1 (metadata)  Ready\n"
        "│   └── cell/exp  Running\n"
        "│       └── snapshot/e1 (metadata)  Ready\n"
        "│           └── cell/exp2  Running\n"
        "└── snapshot/s2 (metadata)  Ready\n"
        "cell/solo  Running\n")
    one = cli("get", "snapshots", "e1", "--tree")
    assert one.stdout == tree.stdout.replace("cell/solo  Running\n", "")
    missing = cli("get", "snapshots", "nope", "--tree")
    assert missing.returncode == 1 and 'snapshot "nope" not found' in missing.stderr


def test_a_snapshot_a_fork_still_depends_on_says_so(
        cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    _apply(cli, tmp_path, "a.yaml", cell_doc("api"), snapshot_doc("s1", "api"),
           cell_doc("exp", fork_of="s1"))
    conn = sqlite3.connect(state_dir / "backends" / "fake.db")
    conn.execute("UPDATE volumes SET writes = writes + 1 WHERE cell_name = 'exp'")
    conn.commit()
    conn.close()
    both = tmp_path / "both.yaml"
    both.write_text(yaml.safe_dump(snapshot_doc("s1", "api")) + "---\n"
                    + yaml.safe_dump(cell_doc("exp", fork_of="s1")))
    assert cli("delete", "-f", str(both)).returncode == 1  # the fork waits for approval
    tree = cli("get", "snapshots", "--tree").stdout
    assert "snapshot/s1 (metadata)  Deleting: waits until its forks are gone (exp)\n" in tree
    assert "│   └── cell/exp  Deleting\n" in tree or "    └── cell/exp  Deleting\n" in tree


def test_tree_refuses_other_outputs(cli: Cli, state_dir: Path) -> None:
    for extra in (["-o", "json"], ["-l", "a=b"]):
        done = cli("get", "snapshots", "--tree", *extra)
        assert done.returncode == 2 and "--tree" in done.stderr
    assert cli("get", "cells", "--tree").returncode == 2


def test_names_are_escaped() -> None:
    cells = [{"id": "cell_1", "name": "evil\x1b[2J", "phase": "Running\n", "forked_from": None,
              "deleting_at": None, "deleted_at": None}]
    snaps = [{"id": "snap_1", "name": "s\u202e1", "cell_id": "cell_1", "phase": "Ready",
              "deleting_at": None, "deleted_at": None, "consistency": "x\x07"}]
    text = lineage.render(cells, snaps)
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert text.count("\n") == 2


def test_a_deep_chain_is_drawn_in_lines_of_bounded_width() -> None:
    """A chain of forks deeper than MAX_DEPTH is drawn at that depth, each deeper line saying
    its own: the indentation of every level was quadratic (a server's made-up lineage of
    100k links, ~23 MB, drew ~80 GB)."""
    cells, snaps, parent = [], [], None
    depth = lineage.MAX_DEPTH * 3
    for i in range(depth):
        cells.append({"id": f"c{i}", "name": f"c{i}", "phase": "Running",
                      "forked_from": parent, "deleting_at": None, "deleted_at": None})
        snaps.append({"id": f"s{i}", "name": f"s{i}", "cell_id": f"c{i}", "phase": "Ready",
                      "deleting_at": None, "deleted_at": None})
        parent = f"s{i}"
    lines = lineage.render(cells, snaps).splitlines()
    assert len(lines) == 2 * depth
    assert max(len(line) for line in lines) < 4 * lineage.MAX_DEPTH + 40
    assert lines[-1].endswith(f"[depth {2 * depth - 1}] snapshot/s{depth - 1}  Ready")
    assert lines[lineage.MAX_DEPTH].endswith(f"cell/c{lineage.MAX_DEPTH // 2}  Running")
