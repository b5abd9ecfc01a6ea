"""Fixtures for controller tests: a private state directory, a reconcile context, quiet logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.controllers.context import Context
from devcell.store.db import Database, open_database


@pytest.fixture(autouse=True)
def _quiet_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("DEVCELL_FAKE_FAIL", raising=False)
    yield


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "state")
    yield database
    database.close()


@pytest.fixture
def ctx(db: Database) -> Iterator[Context]:
    context = Context(db, trigger="test")
    yield context
    context.close()
