"""The engine's pull request with an idle timeout: docker-py's `APIClient.pull` sends it with
`timeout=None`, so an engine waiting on a registry that accepted the connection and never
answers would hold the pull (and the daemon's worker) for good. Likewise the registry check
of `imagePullPolicy: Always` (`GET /distribution/<image>/json`, one manifest request): sent
by docker-py with the client's 120 s, it would hold every converge of such a cell that long.

The same request is sent here through the client's own HTTP session with a read timeout: the
socket gives up when the engine sends nothing (no progress event, no header) for
`idle_timeout` seconds. Closing the response drops the connection, which cancels the pull
in the engine. Part of the container backend: only it imports docker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import docker.auth
import docker.errors
import docker.utils.json_stream
import requests.exceptions
import urllib3.exceptions

from devcell.errors import ImagePullFailed
from devcell.names import printable

CONNECT_TIMEOUT = 60.0
"""Seconds to reach the engine itself (its socket), apart from the registry's silence."""
REGISTRY_CHECK_TIMEOUT = 20.0
"""At most this many seconds for the registry check's one manifest request (a registry that
answers at all answers in a few); a shorter images.pullIdleTimeoutSeconds bounds it too."""


def idle_failure(image: str, registry: str, idle_timeout: float) -> ImagePullFailed:
    """The error of a pull whose registry went silent: temporary, with the fix."""
    return ImagePullFailed(
        f"pulling image {printable(image)} failed (unreachable): registry not answering: "
        f"no progress for {idle_timeout:g} s; check that the registry {printable(registry)} "
        "is up and answering (the daemon retries with backoff; images.pullIdleTimeoutSeconds "
        "in DevCell's configuration sets how long a pull may be silent)",
        cause="unreachable")


def events(api: Any, repository: str, tag: str | None, *, image: str, registry: str,
           idle_timeout: float) -> Iterator[dict[str, Any]]:
    """The engine's decoded progress events for pulling `repository:tag`, as
    `api.pull(..., stream=True, decode=True)` yields them, or ImagePullFailed once the engine
    stays silent for `idle_timeout` seconds. docker-py's own errors pass through."""
    headers: dict[str, str] = {}
    auth_header = docker.auth.get_config_header(api, docker.auth.resolve_repository_name(
        repository)[0])
    if auth_header:
        headers["X-Registry-Auth"] = auth_header
    params = {"fromImage": repository, "tag": tag or "latest"}
    url = f"{api.base_url}/v{api.api_version}/images/create"
    try:
        response = api.post(url, params=params, headers=headers, stream=True,
                            timeout=(CONNECT_TIMEOUT, idle_timeout))
    except (requests.exceptions.ReadTimeout, urllib3.exceptions.ReadTimeoutError):
        raise idle_failure(image, registry, idle_timeout) from None
    with response:
        try:
            response.raise_for_status()
        except requests.exceptions.HTTPError as exc:
            raise docker.errors.create_api_error_from_http_exception(exc) from None
        chunks = response.iter_content(chunk_size=65536)
        try:
            yield from docker.utils.json_stream.json_stream(chunks)
        except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout,
                urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            if timed_out(exc):
                raise idle_failure(image, registry, idle_timeout) from None
            raise


def check_timeout(idle_timeout: float) -> float:
    """Seconds the registry check may wait for its answer: the pull's idle timeout, at most
    REGISTRY_CHECK_TIMEOUT."""
    return min(idle_timeout, REGISTRY_CHECK_TIMEOUT)


def distribution(api: Any, image: str, *, registry: str, idle_timeout: float) -> dict[str, Any]:
    """The digest and platforms the registry serves for `image` now, as docker-py's
    `api.inspect_distribution(image)` returns them (same request, same credentials), or
    ImagePullFailed (unreachable) once the engine stays silent for check_timeout(idle_timeout)
    seconds. docker-py's own errors pass through."""
    limit = check_timeout(idle_timeout)
    headers: dict[str, str] = {}
    auth_header = docker.auth.get_config_header(api, docker.auth.resolve_repository_name(
        image)[0])
    if auth_header:
        headers["X-Registry-Auth"] = auth_header
    url = f"{api.base_url}/v{api.api_version}/distribution/{quote(image, safe='/:')}/json"
    try:
        response = api.get(url, headers=headers, timeout=(CONNECT_TIMEOUT, limit))
    except (requests.exceptions.ConnectionError, requests.exceptions.ReadTimeout,
            urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
        if timed_out(exc):
            raise ImagePullFailed(
                f"asking the registry {printable(registry)} for the digest of image "
                f"{printable(image)} failed (unreachable): registry not answering: no answer "
                f"in {limit:g} s; check that it is up and answering (the cell keeps its image "
                f"meanwhile; the check waits images.pullIdleTimeoutSeconds, at most "
                f"{REGISTRY_CHECK_TIMEOUT:g} s)", cause="unreachable") from None
        raise
    with response:
        try:
            response.raise_for_status()
        except requests.exceptions.HTTPError as exc:
            raise docker.errors.create_api_error_from_http_exception(exc) from None
        return dict(response.json())


def timed_out(exc: BaseException) -> bool:
    """Whether a read from the engine ended by a socket timeout, however requests, urllib3
    and docker-py wrapped it (causes, contexts, or an exception carried as the first arg)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (TimeoutError, urllib3.exceptions.ReadTimeoutError,
                             requests.exceptions.ReadTimeout)):
            return True
        seen = seen.__cause__ or seen.__context__ or (
            seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None)
    return False
