"""A registry that accepts connections and never answers, against the real Docker engine: the
pull ends after images.pullIdleTimeoutSeconds with a temporary ImagePullFailed instead of
holding the operation (and a daemon worker) for good."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devcell.backends.base import ImageState
from devcell.backends.container.pull import REGISTRY_CHECK_TIMEOUT
from devcell.errors import ImagePullFailed, retry_delay
from tests.backends.container.test_controller import backend_of
from tests.backends.container.test_pull import pulled_cell, ref_of_new
from tests.controllers.support import apply, converge_all, record


class _Stalling(http.server.BaseHTTPRequestHandler):
    """Answers the engine's version check (GET /v2/) as a registry does, then never answers
    anything else: a registry that stopped answering mid-pull."""

    stop: threading.Event

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") == "/v2":
            self.send_response(200)
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        self.stop.wait(600)

    do_HEAD = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """host:port on 127.0.0.1 of a registry that stops answering after its version check."""
    stop = threading.Event()
    handler = type("Handler", (_Stalling,), {"stop": stop})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    stop.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def short_idle(state: Path) -> None:
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state / "config.yaml"
    path.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
                    "images:\n  pullIdleTimeoutSeconds: 3\n")
    path.chmod(0o600)


def _within_a_minute(call: Callable[[], object]) -> tuple[object, list[BaseException]]:
    """What `call()` returned and raised, run in a thread the test waits 60 s for: a call
    still hanging then (the client's own 120 s, or none) fails the test instead of holding it."""
    returned: list[object] = []
    caught: list[BaseException] = []

    def run() -> None:
        try:
            returned.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the call to a silent registry is still hanging after 60 s"
    return (returned or [None])[0], caught


def _pull_in_thread(backend: object, image: str) -> list[BaseException]:
    return _within_a_minute(
        lambda: backend.pull_image(ref_of_new("api"), image))[1]  # type: ignore[attr-defined]


def test_a_pull_from_a_registry_that_never_answers_ends_after_the_idle_timeout(
        short_idle: None, silent_registry: str, ctx: object) -> None:
    image = f"{silent_registry}/devcell-test/silent:1"
    caught = _pull_in_thread(backend_of(ctx), image)  # type: ignore[arg-type]
    assert len(caught) == 1 and isinstance(caught[0], ImagePullFailed)
    assert caught[0].cause == "unreachable" and retry_delay(caught[0]) == 0.0
    assert "registry not answering" in str(caught[0])
    assert "pullIdleTimeoutSeconds" in str(caught[0])


def test_a_silent_registry_leaves_the_cell_not_ready_with_the_reason_not_running(
        short_idle: None, silent_registry: str, ctx: object, db: object) -> None:
    image = f"{silent_registry}/devcell-test/silent:1"
    apply(db, pulled_cell("api", image))  # type: ignore[arg-type]
    assert not converge_all(ctx).ok  # type: ignore[arg-type]
    cell = record(db, "Cell", "api")  # type: ignore[arg-type]
    ready = cell.condition("Ready")
    assert ready["reason"] == "ImagePullFailed" and "registry not answering" in ready["message"]


@pytest.mark.parametrize("idle", [3, None], ids=["pullIdleTimeoutSeconds-3", "default-120"])
def test_the_always_policys_registry_check_of_a_silent_registry_ends_within_its_bound(
        idle: int | None, silent_registry: str, ctx: object, state: Path) -> None:
    """`imagePullPolicy: Always` asks the registry at every converge of a settled cell: a
    silent registry costs pullIdleTimeoutSeconds, at most REGISTRY_CHECK_TIMEOUT (20 s), never
    the client's 120 s; the cell keeps its image and the reason is said."""
    if idle is not None:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        (state / "config.yaml").write_text(
            "apiVersion: devcell.dev/v1alpha1\nkind: Config\n"
            f"images:\n  pullIdleTimeoutSeconds: {idle}\n")
        (state / "config.yaml").chmod(0o600)
    image = f"{silent_registry}/devcell-test/silent:1"
    backend = backend_of(ctx)  # type: ignore[arg-type]
    found, caught = _within_a_minute(lambda: backend.image_state(image, check_registry=True))
    assert caught == [] and isinstance(found, ImageState)
    assert found.current is None and not found.present
    limit = idle if idle is not None else REGISTRY_CHECK_TIMEOUT
    assert f"registry not answering: no answer in {limit:g} s" in (found.check_error or "")
    assert silent_registry in (found.check_error or "")
