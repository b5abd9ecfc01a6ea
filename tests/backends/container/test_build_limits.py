"""A build's time limits against the real engine: a step that prints nothing is stopped after
images.buildIdleTimeoutSeconds, a chatty one after spec.build.timeoutSeconds; either way the
step's container is removed and the failure says which limit was reached."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import build as container_build
from devcell.errors import ImageBuildFailed
from tests.backends.engine import IMAGE


@pytest.fixture
def api(engine: None) -> Iterator[Any]:
    import docker

    client = docker.from_env(timeout=120)
    yield client.api
    client.close()


def _context(tmp_path: Path, run: str) -> Path:
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN {run}\n")
    return context


def _build(api: Any, context: Path, *, idle: float, **spec: Any) -> tuple[float, BaseException]:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            container_build.build(api, cell_name="limits", owner="test",
                                  build_spec={"context": str(context), **spec},
                                  tag=f"devcell-build/test/limits:{secrets.token_hex(6)}",
                                  idle_timeout=idle)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(90)
    assert not thread.is_alive(), "the build is still running after 90 s"
    assert len(caught) == 1
    return time.monotonic() - started, caught[0]


def _containers_running(api: Any, marker: str) -> list[str]:
    return [c["Id"] for c in api.containers(all=True)
            if marker in " ".join(c.get("Command") or "")]


def _gone(api: Any, marker: str) -> bool:
    deadline = time.monotonic() + 20
    while _containers_running(api, marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not _containers_running(api, marker)


def test_a_build_that_prints_nothing_is_stopped_after_the_idle_timeout(
        api: Any, tmp_path: Path) -> None:
    marker = f"devcell-silent-{secrets.token_hex(4)}"
    context = _context(tmp_path, f"sleep 100000 || echo {marker}")
    seconds, error = _build(api, context, idle=4)
    assert isinstance(error, ImageBuildFailed), error
    assert "printed nothing for 4 s" in str(error) and "buildIdleTimeoutSeconds" in str(error)
    assert seconds < 60
    assert _gone(api, marker), "the step's container was left behind"


def test_a_build_that_keeps_printing_is_stopped_at_its_timeout(
        api: Any, tmp_path: Path) -> None:
    marker = f"devcell-chatty-{secrets.token_hex(4)}"
    context = _context(tmp_path, f"while true; do echo {marker}; sleep 1; done")
    seconds, error = _build(api, context, idle=600, timeoutSeconds=6)
    assert isinstance(error, ImageBuildFailed), error
    assert "longer than spec.build.timeoutSeconds (6 s)" in str(error)
    assert seconds < 60
    assert _gone(api, marker), "the step's container was left behind"
