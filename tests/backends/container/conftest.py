"""Fixtures for the container backend's tests, run against the real Docker engine (no mocks).

Each test gets a private state directory; every container DevCell made for it is removed
afterwards, found by its labels, so nothing else on the engine is ever touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container.backend import ContainerBackend
from devcell.controllers.context import Context
from devcell.store.db import Database, open_database
from tests.backends.engine import remove_containers, require_engine


@pytest.fixture
def engine() -> None:
    require_engine()


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    remove_containers(path)


@pytest.fixture
def backend(engine: None, state: Path) -> Iterator[ContainerBackend]:
    instance = ContainerBackend(state_dir=state)
    yield instance
    instance.close()


@pytest.fixture
def docker_client(engine: None) -> Iterator[Any]:
    import docker

    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def db(engine: None, state: Path) -> Iterator[Database]:
    """The test's state database, for tests that drive the controllers in-process."""
    database = open_database(state)
    yield database
    database.close()


@pytest.fixture
def ctx(db: Database) -> Iterator[Context]:
    context = Context(db, trigger="test")
    yield context
    context.close()
