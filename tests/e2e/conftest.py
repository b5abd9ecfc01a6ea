"""End-to-end fixtures: containers a test's CLI runs made are removed after the test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.engine import remove_containers


@pytest.fixture(autouse=True)
def _remove_test_containers(state_dir: Path) -> Iterator[None]:
    yield
    if (state_dir / "containers").is_dir():  # only tests that used the container backend
        remove_containers(state_dir)
