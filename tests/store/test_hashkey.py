"""The state directory's hash key: made once, owner-only, the same for every process."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from devcell.errors import StateError
from devcell.store import hashkey
from devcell.store.db import open_database


def _load(path: str) -> bytes:
    return hashkey.load(Path(path))


def test_made_once_owner_only_and_kept(tmp_path: Path) -> None:
    key = hashkey.load(tmp_path)
    path = tmp_path / hashkey.FILENAME
    assert len(key) == hashkey.SIZE and path.stat().st_mode & 0o777 == 0o600
    assert hashkey.load(tmp_path) == key
    assert sorted(p.name for p in tmp_path.iterdir()) == [hashkey.FILENAME]  # no temporaries


def test_racing_first_commands_agree_on_one_key(tmp_path: Path) -> None:
    with multiprocessing.get_context("forkserver").Pool(6) as pool:
        keys = pool.map(_load, [str(tmp_path)] * 12)
    assert len(set(keys)) == 1


def test_a_damaged_or_linked_key_is_refused_not_replaced(tmp_path: Path) -> None:
    path = tmp_path / hashkey.FILENAME
    path.write_bytes(b"short")
    with pytest.raises(StateError, match="not a DevCell hash key"):
        hashkey.load(tmp_path)
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(StateError, match="cannot read the hash key"):
        hashkey.load(tmp_path)


def test_the_database_reads_its_key_from_its_state_dir(tmp_path: Path) -> None:
    db = open_database(tmp_path / "state")
    try:
        assert db.hash_key == hashkey.load(tmp_path / "state")
    finally:
        db.close()


def test_existing_reads_a_key_never_makes_one(tmp_path: Path) -> None:
    """For caches that may go without (the compiled validators): a missing, damaged or
    linked key is no key, and nothing is made."""
    assert hashkey.existing(tmp_path / "none") is None
    assert not (tmp_path / "none").exists()
    path = tmp_path / hashkey.FILENAME
    path.write_bytes(b"short")
    assert hashkey.existing(tmp_path) is None
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    assert hashkey.existing(tmp_path) is None
    path.unlink()
    assert hashkey.existing(tmp_path) is None and not path.exists()
    key = hashkey.load(tmp_path)
    assert hashkey.existing(tmp_path) == key
