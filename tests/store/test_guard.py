"""A lost database is never taken for a fresh install: a state directory that still holds what
an earlier database recorded, beside a missing, empty or zeroed state.db, is refused with the
path and the fix, and nothing is created or changed in it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from devcell.errors import StateUnusable
from devcell.store.db import DB_FILENAME, open_database


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _volume(state: Path) -> None:
    workspace = state / "volumes" / "vol_1" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "notes.txt").write_text("a week of work")


def _checkpoint(state: Path) -> None:
    (state / "images" / "checkpoints" / "snap_1").mkdir(parents=True)


def _run_dir(state: Path) -> None:
    (state / "containers" / "cell_1").mkdir(parents=True)


def _fake_records(state: Path) -> None:
    (state / "backends").mkdir(parents=True)
    (state / "backends" / "fake.db").write_bytes(b"x" * 4096)


LEFTOVERS: dict[str, Callable[[Path], None]] = {
    "volume": _volume, "checkpoint": _checkpoint, "container run dir": _run_dir,
    "fake backend records": _fake_records,
}


@pytest.mark.parametrize("leftover", sorted(LEFTOVERS))
@pytest.mark.parametrize("database", ["missing", "empty", "zeroed page"])
def test_a_lost_database_beside_leftovers_is_refused(tmp_path: Path, leftover: str,
                                                     database: str) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    LEFTOVERS[leftover](state)
    if database == "empty":
        (state / DB_FILENAME).write_bytes(b"")
    elif database == "zeroed page":  # an sqlite file with no schema at all
        import sqlite3

        conn = sqlite3.connect(state / DB_FILENAME)
        conn.execute("CREATE TABLE t (x)")
        conn.execute("DROP TABLE t")
        conn.close()
        assert (state / DB_FILENAME).stat().st_size > 0
    before = _tree(state)

    with pytest.raises(StateUnusable) as caught:
        open_database(state)

    message = str(caught.value)
    assert str(state / DB_FILENAME) in message and "Restore state.db from a backup" in message
    assert "move those entries out" in message
    assert _tree(state) == before  # nothing created, nothing removed


def test_a_fresh_directory_and_an_empty_one_still_start_afresh(tmp_path: Path) -> None:
    open_database(tmp_path / "new").close()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / DB_FILENAME).write_bytes(b"")
    (empty / "volumes").mkdir()  # the directories alone are no evidence of anything
    open_database(empty).close()
