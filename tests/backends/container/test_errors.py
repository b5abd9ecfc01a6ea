"""The docker boundary (no engine): what the SDK raises becomes DevCell's error class by HTTP
status and exception class, never by reading a message; and which classes are worth a retry."""

from __future__ import annotations

from dataclasses import dataclass

import docker
import docker.errors
import pytest
import requests.exceptions

from devcell import errors
from devcell.backends.container import sdk
from devcell.errors import (
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRefused,
    BackendUnavailable,
    CapabilityMissing,
    ImageNotFound,
    MountRefused,
    UnknownBackend,
)


@dataclass(frozen=True)
class Response:
    """What docker.errors.APIError reads of a response: its status, URL and reason phrase."""

    status_code: int
    reason: str = "Whatever"
    url: str = "http+docker://localhost/v1.44/containers/create"


def api_error(status: int, explanation: str, *, cls: type = docker.errors.APIError
              ) -> docker.errors.APIError:
    return cls("engine said no", response=Response(status), explanation=explanation)


@pytest.mark.parametrize("status,expected", [
    (409, BackendConflict), (404, BackendNotFound), (400, BackendRefused), (500, BackendError),
    (503, BackendError),
])
def test_status_code_decides_the_class(status: int, expected: type[BackendError]) -> None:
    # The explanations deliberately name other causes: only the status may decide.
    error = sdk.translate(api_error(status, "Conflict: no such container"), "creating x")
    assert type(error) is expected
    assert str(error) == "creating x: Conflict: no such container"


def test_a_name_conflict_is_a_conflict_whatever_the_wording() -> None:
    assert isinstance(sdk.translate(api_error(409, "name taken"), "creating x"),
                      BackendConflict)
    assert not isinstance(sdk.translate(
        api_error(500, 'Conflict. The container name "/x" is already in use'), "creating x"),
        BackendConflict)


def test_docker_py_classes_without_a_status_keep_their_meaning() -> None:
    not_found = docker.errors.NotFound("gone")  # no response: no status code
    assert type(sdk.translate(not_found, "removing x")) is BackendNotFound
    assert type(sdk.translate(docker.errors.APIError("odd"), "removing x")) is BackendError


def test_a_missing_image_keeps_its_reason_and_fix() -> None:
    error = sdk.translate(
        api_error(404, "No such image: devcell/nope:1", cls=docker.errors.ImageNotFound),
        "creating x")
    assert isinstance(error, ImageNotFound) and isinstance(error, BackendNotFound)
    assert error.reason == "ImageNotFound" and error.permanent
    assert "No such image: devcell/nope:1" in str(error) and "devcell image build-base" in str(error)


def test_arguments_the_sdk_refuses_are_refused_not_unreachable() -> None:
    error = sdk.translate(docker.errors.InvalidArgument("bad port"), "creating x")
    assert type(error) is BackendRefused and error.permanent


def test_an_engine_that_cannot_be_reached_or_does_not_answer() -> None:
    for exc in (requests.exceptions.ConnectionError("refused"),
                docker.errors.DockerException("Error while fetching server API version")):
        error = sdk.translate(exc, "listing")
        assert isinstance(error, BackendUnavailable) and not error.permanent
        assert error.reason == "BackendUnavailable"
    slow = sdk.translate(requests.exceptions.ReadTimeout("read timed out"), "listing")
    assert type(slow) is BackendError and "did not answer in time" in str(slow)


def test_the_boundary_context_raises_the_translation() -> None:
    with pytest.raises(BackendConflict, match="^starting x: already paused$"):
        with sdk.engine_calls("starting x"):
            raise api_error(409, "already paused")


@pytest.mark.parametrize("host,cause", [
    ("unix:///nonexistent/docker.sock", "no such socket"),
    ("tcp://127.0.0.1:1", "connection refused"),
])
def test_an_unreachable_engine_is_named_by_the_socket_error_class(
        monkeypatch: pytest.MonkeyPatch, host: str, cause: str) -> None:
    """A real failed connection (nothing listens there), no engine needed."""
    monkeypatch.setenv("DOCKER_HOST", host)
    client = docker.from_env(timeout=5, version="1.41")  # a fixed version: no call yet
    try:
        with pytest.raises(BackendUnavailable) as raised:
            with sdk.engine_calls("listing"):
                client.api.containers()
    finally:
        client.close()
    assert f"at {host} ({cause})" in str(raised.value)


@pytest.mark.parametrize("cls,temporary", [
    (BackendError, True), (BackendUnavailable, True), (BackendNotFound, True),
    (BackendConflict, True), (ImageNotFound, False), (BackendRefused, False),
    (MountRefused, False), (CapabilityMissing, False), (UnknownBackend, False),
])
def test_which_backend_errors_are_worth_a_retry(cls: type[BackendError], temporary: bool) -> None:
    assert cls.permanent is not temporary
    assert cls("x").permanent is not temporary
    assert (errors.retry_delay(cls("x")) is not None) is temporary


def test_reasons_are_kept() -> None:
    assert MountRefused("x").reason == "MountRefused"
    assert UnknownBackend("x").reason == "BackendUnavailable"
    assert BackendConflict("x").reason is None and BackendRefused("x").reason is None
