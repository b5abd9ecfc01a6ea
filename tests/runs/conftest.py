from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.runs import SnapshotStore
from tests.runs.helpers import ADAPTERS, PERSISTENT, make_store


@pytest.fixture(params=ADAPTERS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SnapshotStore]:
    """Each adapter in turn: the conformance suite runs against all three."""
    s = make_store(request.param, tmp_path)
    yield s
    s.close()


@pytest.fixture(params=PERSISTENT)
def persistent_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SnapshotStore]:
    """The file and SQLite adapters, which validate what they load."""
    s = make_store(request.param, tmp_path)
    yield s
    s.close()
