"""The Docker SDK's boundary: a client for the engine, and its errors translated into DevCell's.

The one place Docker's errors are classified (`translate`): by HTTP status as docker-py's own
classes are (404 BackendNotFound, 409 BackendConflict, 400 BackendRefused), ImageNotFound,
BackendUnavailable for an engine that cannot be reached. Callers catch those classes and never
read a message. docker and requests are imported only when a client is made or an exception
arrives, so a module that imports this one pays for neither until it calls the engine.
"""

from __future__ import annotations

import _socket  # not `socket`, whose enums cost ~2 ms at import: only its error class here
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from devcell.backends.container.engine import HOW_TO_START, engine_address
from devcell.errors import (
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRefused,
    BackendUnavailable,
    ImageNotFound,
)

if TYPE_CHECKING:
    import docker



_ROOT_CAUSES: tuple[tuple[type[BaseException], str], ...] = (
    (FileNotFoundError, "no such socket"),
    (ConnectionRefusedError, "connection refused"),
    (PermissionError, "permission denied on the socket"),
    (_socket.gaierror, "unknown host"),  # socket.gaierror: the same class
    (TimeoutError, "timed out"),
)


def _wrapped(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception inside it: chained (`raise ... from`, or raised while
    handling), or held as an argument or a `reason` (urllib3 and requests keep the socket's
    error there)."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = (current.__cause__, current.__context__, getattr(current, "reason", None),
                 *current.args)
        pending.extend(e for e in inner if isinstance(e, BaseException))


def _reason(exc: BaseException) -> str:
    """The root cause in a few words, found by the operating system error's class under the
    SDK's several layers of wrapping, or else the first line of the message."""
    for inner in _wrapped(exc):
        for cls, short in _ROOT_CAUSES:
            if isinstance(inner, cls):
                return short
    text = str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def unreachable(exc: BaseException) -> BackendUnavailable:
    text = _reason(exc)
    return BackendUnavailable(f"the container backend cannot reach the Docker engine at "
                              f"{engine_address()} ({text}); {HOW_TO_START}")


_BY_STATUS: dict[int, type[BackendError]] = {
    400: BackendRefused,  # the engine rejects the arguments: the same call fails again
    404: BackendNotFound,
    409: BackendConflict,  # a name taken, a container already paused or being removed
}
def sdk_errors() -> tuple[type[BaseException], ...]:
    """The SDK's exception classes (docker's and requests'), for `except` clauses: evaluated
    only when an exception arrives, so the SDK is imported only then."""
    import docker.errors
    import requests.exceptions

    return docker.errors.DockerException, requests.exceptions.RequestException


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (one of `sdk_errors()`) says the engine could not be reached at all."""
    import requests.exceptions

    return isinstance(exc, requests.exceptions.ConnectionError)


def _is_sdk_error(exc: BaseException) -> bool:
    """Whether the SDK raised `exc`: never, while the SDK was not even imported."""
    return "docker.errors" in sys.modules and isinstance(exc, sdk_errors())


PORT_TAKEN = ("port is already allocated", "address already in use")
"""How the engine says a published host port is taken (by a cell or any other program)."""


def translate(exc: BaseException, action: str) -> BackendError:
    """DevCell's error for what the SDK raised during `action`: the one place Docker's errors
    are classified.

    An engine's answer is classified by its HTTP status, as docker-py's own classes are; an
    image the engine does not have by docker-py's ImageNotFound (it reads the engine's
    message so that we do not have to). Anything else from the SDK means the engine could
    not be reached, or did not answer in time.
    """
    import docker.errors
    import requests.exceptions

    refused_by_sdk = (docker.errors.InvalidArgument, docker.errors.InvalidRepository,
                      docker.errors.NullResource)  # before any request: no engine takes them
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageNotFound(f"{action}: ImageNotFound: {exc.explanation or exc}; pull it "
                             "(spec.imagePullPolicy IfNotPresent or Always), build the base "
                             "image with `devcell image build-base`, or load yours with "
                             "`docker load`")
    if isinstance(exc, docker.errors.APIError):
        explanation = str(exc.explanation or exc)
        if any(words in explanation for words in PORT_TAKEN):
            # The engine's 500 for a host port something else holds: retrying cannot help
            # while it does, so the cell fails with the reason instead of retrying for ever.
            return BackendRefused(f"{action}: {explanation}; the host port is held by another "
                                  "program or cell: publish this cell on another hostPort")
        fallback = BackendNotFound if isinstance(exc, docker.errors.NotFound) else BackendError
        return _BY_STATUS.get(exc.status_code, fallback)(f"{action}: {explanation}")
    if isinstance(exc, refused_by_sdk):
        return BackendRefused(f"{action}: {exc}")
    if isinstance(exc, requests.exceptions.ConnectionError | docker.errors.DockerException):
        return unreachable(exc)
    return BackendError(f"{action}: the Docker engine did not answer in time ({exc})")


@contextmanager
def engine_calls(action: str) -> Iterator[None]:
    """Translate whatever the SDK raises during `action` into DevCell's error tree."""
    try:
        yield
    except Exception as exc:
        if not _is_sdk_error(exc):
            raise
        raise translate(exc, action) from None


_api_versions: dict[str, str] = {}
"""Engine address -> API version negotiated by this process's first client there."""


def connect() -> docker.DockerClient:
    """A client for the engine at DOCKER_HOST (default: the local socket), or BackendUnavailable.

    The first client negotiates the API version (one /version call, which also proves the
    engine is up); later ones (parallel convergence opens one per worker) reuse it, and an
    engine gone meanwhile surfaces on their first call instead.
    """
    import docker

    address = engine_address()
    try:
        client = docker.from_env(timeout=120, version=_api_versions.get(address, "auto"))
    except sdk_errors() as exc:
        raise unreachable(exc) from None
    _api_versions.setdefault(address, client.api.api_version)
    return client
