"""Fixtures for store tests: a database in a private, per-test state directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.store.db import Database, open_database


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def db(state: Path) -> Iterator[Database]:
    database = open_database(state)
    yield database
    database.close()
