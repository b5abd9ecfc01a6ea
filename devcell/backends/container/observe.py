"""Observe every container of a state directory in one call, without the docker SDK.

Commands that act on a cell's runtime observe the engine first (a container stopped, paused
or removed behind DevCell's back, or lost with an engine restart, must not be answered
"unchanged"). One `GET /containers/json` filtered by DevCell's ownership label answers for all
of a state directory's cells; it is made here over the engine's socket with the standard
library, because importing the docker SDK (requests, urllib3...) costs more than the call, and
the no-op re-apply must stay cheap. The same holds for a checkpoint's freeze and thaw
(`POST /containers/{id}/pause|unpause`, `pause`/`unpause` here): the snapshot path needs no
more of the engine, so it never imports the SDK. Everything else that changes a container
goes through `container/backend.py` and the SDK.
"""

from __future__ import annotations

import _socket
import json
import os
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from devcell.backends import service_state, supervisor
from devcell.backends.base import Observed
from devcell.backends.container import engine_http
from devcell.backends.container.engine import HOW_TO_START, engine_address
from devcell.backends.container.layout import Layout
from devcell.backends.container.spec import (
    CELL_ID,
    MANAGED,
    RUNTIME_HASH,
    SIDECAR,
    SIDECAR_OF,
    STATE,
    VOLUME,
    base_of,
)
from devcell.backends.host.ids import is_safe_id, state_hash
from devcell.errors import (
    BackendConflict,
    BackendError,
    BackendNotFound,
    BackendRefused,
    BackendUnavailable,
)

QUIESCED = "quiesced"
"""Marker in the cell's run directory: hooks ran for a checkpoint and resume has not yet."""
TIMEOUT_S = 30.0
RUNNING_STATES = ("running", "paused", "restarting")


def _connect(address: str, timeout: float = TIMEOUT_S) -> _socket.socket | None:
    """A socket connected to the engine, or None for an address only the SDK speaks (ssh://,
    TLS). Connecting may raise OSError: the caller says the engine cannot be reached."""
    if not _speaks(address):
        return None
    if address.startswith("unix://"):
        return engine_http.unix(address[len("unix://"):], timeout)
    parsed = urllib.parse.urlsplit(address)
    return engine_http.tcp(parsed.hostname or "localhost", parsed.port or 2375, timeout)


def _speaks(address: str) -> bool:
    return address.startswith("unix://") or (
        address.startswith("tcp://") and not os.environ.get("DOCKER_TLS_VERIFY"))


ANSWERED_FRESH_S = 1.0
"""An engine that answered this process less than this long ago counts as reachable without
asking again: a snapshot's observe-first listing just asked, and its backend need not."""
_answered: dict[str, float] = {}
"""Engine address -> when it last answered this process (time.monotonic())."""


def _ask(address: str, method: str, path: str, *, timeout: float = TIMEOUT_S,
         limit: int = 64 << 20) -> engine_http.Response | None:
    """One request to the engine; None for an address only the SDK speaks. OSError or
    engine_http.BadResponse when the engine cannot be reached or answers nonsense."""
    sock = _connect(address, timeout)
    if sock is None:
        return None
    response = engine_http.request(sock, method, path, limit=limit)
    _answered[address] = time.monotonic()
    return response


def list_containers(state_dir: Path, *, size: bool = False) -> list[dict[str, Any]]:
    """The engine's list of this state directory's containers (running or not); `size`:
    with each one's writable layer (SizeRw; the engine computes it, slower)."""
    listed = list_labelled(state_dir, size=size)
    if listed is None:
        return _list_with_sdk(state_dir, size=size)
    return listed


def list_labelled(state_dir: Path, *, size: bool = False,
                  labels: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The engine's list of this state directory's containers that also carry `labels`
    (the engine filters), or None for an engine address only the SDK speaks."""
    wanted = {MANAGED: "true", STATE: state_hash(state_dir), **(labels or {})}
    filters = json.dumps({"label": [f"{k}={v}" for k, v in wanted.items()]})
    query = "all=1" + ("&size=1" if size else "") + "&filters=" + urllib.parse.quote(filters)
    listed = _get(f"/containers/json?{query}", "listing DevCell's containers")
    if listed is None:
        return None
    if not isinstance(listed, list):
        raise BackendError("listing DevCell's containers: the engine answered with "
                           "something that is not a JSON list")
    return listed


def list_volumes(labels: list[str]) -> dict[str, Any] | None:
    """The engine's volumes carrying every label of `labels` (`key=value` or `key`), as
    `GET /volumes` answers ({"Volumes": [...]}); None for an address only the SDK speaks."""
    filters = json.dumps({"label": labels})
    found = _get("/volumes?filters=" + urllib.parse.quote(filters), "listing DevCell's volumes")
    if found is None:
        return None
    if not isinstance(found, dict):
        raise BackendError("listing DevCell's volumes: the engine answered with something "
                           "that is not a JSON object")
    return found


_BY_STATUS: dict[int, type[BackendError]] = {
    400: BackendRefused,  # the engine rejects the arguments: the same call fails again
    404: BackendNotFound,
    409: BackendConflict,  # already paused, not running, being removed
}


def post(path: str, action: str) -> bool:
    """POST `path` (no body) to the engine: see `_send`."""
    return _send("POST", path, action)


def remove(container_id: str, action: str) -> bool:
    """Remove a container, killing what it runs (`DELETE ?force=1`, its volumes kept: the
    SDK's remove_container(force=True)), over the socket; False: ask the SDK."""
    return _send("DELETE", f"/containers/{_checked_id(container_id)}?force=1", action)


def stop(container_id: str, timeout: int, action: str) -> bool:
    """Stop a container (SIGTERM, SIGKILL after `timeout` seconds; the SDK's stop), over the
    socket; False: ask the SDK. A container already stopped answers 304: done."""
    return _send("POST", f"/containers/{_checked_id(container_id)}/stop?t={int(timeout)}",
                 action, wait=TIMEOUT_S + timeout)


def _send(method: str, path: str, action: str, *, wait: float = TIMEOUT_S) -> bool:
    """`method path` (no body) to the engine: True when done, False for an engine address only
    the SDK speaks (the caller asks through the SDK). An error status is classified as
    sdk.translate classifies the SDK's (404 BackendNotFound, 409 BackendConflict, 400
    BackendRefused), so callers catch the same classes whichever way the call went."""
    answer = _exchange(method, path, limit=1 << 16, wait=wait)
    if answer is None:
        return False
    status, body = answer
    if status in (200, 204, 304):  # 304: nothing to do (a stop of a stopped container)
        return True
    raise _BY_STATUS.get(status, BackendError)(f"{action}: {_message(body) or status}")


def _exchange(method: str, path: str, *, limit: int | None = None, wait: float = TIMEOUT_S
              ) -> tuple[int, bytes] | None:
    """Send `method path` (no body) to the engine: its status and body (at most `limit`
    bytes), None for an engine address only the SDK speaks, BackendUnavailable when the
    engine cannot be reached."""
    address = engine_address()
    try:
        response = _ask(address, method, path, timeout=wait)
    except (OSError, engine_http.BadResponse) as exc:
        raise BackendUnavailable(
            f"the container backend cannot reach the Docker engine at {address} "
            f"({_reason(exc)}); {HOW_TO_START}") from None
    if response is None:
        return None
    return response.status, response.body if limit is None else response.body[:limit]


def _message(body: bytes) -> str:
    """The engine's own words for a failed request (its JSON `message`), else its bytes."""
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("message"), str):
        return str(found["message"])[:500]
    return body[:200].decode(errors="replace").strip()


def pause(container_id: str, action: str) -> bool:
    """Freeze a container (the cgroup freezer), over the socket; False: ask the SDK."""
    return post(f"/containers/{_checked_id(container_id)}/pause", action)


def unpause(container_id: str, action: str) -> bool:
    """Thaw a container frozen by `pause`, over the socket; False: ask the SDK."""
    return post(f"/containers/{_checked_id(container_id)}/unpause", action)


def _checked_id(container_id: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{12,64}", container_id):
        raise BackendError(f"not a container id: {container_id!r}")
    return container_id


def inspect(state_dir: Path, container_id: str) -> dict[str, Any]:
    """The engine's inspection of one container (BackendNotFound when it is gone)."""
    _checked_id(container_id)
    found = _get(f"/containers/{container_id}/json", "inspecting a container")
    if found is None:  # an engine address only the SDK speaks
        from devcell.backends.container import sdk

        client = sdk.connect()
        try:
            with sdk.engine_calls("inspecting a container"):
                details: dict[str, Any] = client.api.inspect_container(container_id)
            return details
        finally:
            client.close()
    assert isinstance(found, dict)
    return found


def reachable() -> bool:
    """Whether the engine answers (BackendUnavailable, saying why, if it does not); False for
    an engine address only the SDK speaks (the caller connects through the SDK to know).
    Not asked again when it answered less than ANSWERED_FRESH_S ago."""
    answered = _answered.get(engine_address())
    if answered is not None and time.monotonic() - answered < ANSWERED_FRESH_S:
        return True
    return _get("/version", "asking the engine its version") is not None


def image_present(name: str) -> bool | None:
    """Whether the engine has an image by this name (over the socket; None: an engine
    address only the SDK speaks)."""
    answer = _exchange("GET", f"/images/{urllib.parse.quote(name, safe='/:')}/json",
                       limit=1 << 20)
    if answer is None:
        return None
    return answer[0] == 200


def image_config(name: str) -> dict[str, Any] | None:
    """The `Config` of an image the engine has (Entrypoint, Cmd, WorkingDir, User...); None
    when it has none by that name, cannot be reached, or answers oddly (bounded to 1 MiB)."""
    try:
        answer = _exchange("GET", f"/images/{urllib.parse.quote(name, safe='/:@')}/json",
                           limit=1 << 20, wait=10.0)
    except BackendUnavailable:
        return None
    if answer is None or answer[0] != 200:
        return None
    try:
        config = json.loads(answer[1]).get("Config")
    except (ValueError, AttributeError):
        return None
    return config if isinstance(config, dict) else None


def image_size(image_id: str) -> int | None:
    """The engine's size of an image (all its layers), by id; None when it cannot say."""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", image_id):
        return None
    try:
        found = _get(f"/images/{image_id}/json", f"looking up image {image_id[:19]}")
    except BackendError:
        return None
    size = found.get("Size") if isinstance(found, dict) else None
    return int(size) if isinstance(size, int) else None


def list_images(labels: dict[str, str]) -> list[dict[str, Any]] | None:
    """The engine's images carrying every one of `labels` (over the socket; None: an engine
    address only the SDK speaks)."""
    wanted = json.dumps({"label": [f"{k}={v}" for k, v in labels.items()]})
    found = _get(f"/images/json?filters={urllib.parse.quote(wanted)}", "listing images")
    if found is None:
        return None
    return [i for i in found if isinstance(i, dict)] if isinstance(found, list) else []


def _get(path: str, action: str) -> Any:
    """GET `path` from the engine and decode its JSON; None for an engine address only the
    SDK speaks (the caller asks through the SDK)."""
    answer = _exchange("GET", path)
    if answer is None:
        return None
    status, body = answer
    if status == 404:
        raise BackendNotFound(f"{action}: the engine has no such container")
    if status != 200:
        raise BackendError(f"{action}: the engine answered "
                           f"{status} {body[:200].decode(errors='replace')}")
    return json.loads(body)


def engine_version(timeout: float = 3.0) -> dict[str, Any]:
    """The engine's `GET /version` (Version, ApiVersion, Os...), or BackendUnavailable saying
    why it cannot be reached: what `devcell version` reports for the container backend."""
    address = engine_address()
    if not _speaks(address):
        raise BackendUnavailable(f"the engine at {address} is not one this check can ask "
                                 "(ssh:// or TLS: only the docker SDK speaks it)")
    try:
        response = _ask(address, "GET", "/version", timeout=timeout, limit=1 << 20)
    except (OSError, engine_http.BadResponse) as exc:
        raise BackendUnavailable(
            f"cannot reach the Docker engine at {address} ({_reason(exc)}); {HOW_TO_START}"
        ) from None
    assert response is not None
    body = response.body
    if response.status != 200:
        raise BackendUnavailable(f"the engine at {address} answered {response.status} to "
                                 f"GET /version")
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise BackendUnavailable(f"the engine at {address} answered GET /version with "
                                 "something that is not a JSON object")
    return found


def _list_with_sdk(state_dir: Path, *, size: bool = False) -> list[dict[str, Any]]:
    """The engine's list of this state directory's containers through the SDK (an engine
    address only the SDK speaks), filtered by DevCell's labels as the socket's list is."""
    from devcell.backends.container import sdk

    owner = state_hash(state_dir)
    client = sdk.connect()
    try:
        with sdk.engine_calls("listing DevCell's containers"):
            listed: list[dict[str, Any]] = client.api.containers(
                all=True, size=size, filters={"label": [f"{MANAGED}=true", f"{STATE}={owner}"]})
    finally:
        client.close()
    return [c for c in listed if _owned_by(c, owner)]


def _owned_by(info: dict[str, Any], owner: str) -> bool:
    labels = info.get("Labels") or {}
    return labels.get(MANAGED) == "true" and labels.get(STATE) == owner


_REASONS: tuple[tuple[type[BaseException], str], ...] = (
    (FileNotFoundError, "no such socket"),
    (ConnectionRefusedError, "connection refused"),
    (PermissionError, "permission denied on the socket"),
    (_socket.gaierror, "unknown host"),  # socket.gaierror: the same class
    (TimeoutError, "timed out"),
)


def _reason(exc: BaseException) -> str:
    for cls, short in _REASONS:
        if isinstance(exc, cls):
            return short
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def observed(info: dict[str, Any], layout: Layout, cell_id: str) -> Observed:
    """One listed container as DevCell sees it (the same answer as ContainerBackend.observe),
    with its services' state files (in its log directory, on the host) while it runs."""
    state = info.get("State", "")
    quiesced = (layout.run_dir(cell_id) / QUIESCED).exists()
    detail: dict[str, Any] = {
        "state": state, "container": (info.get("Names") or ["?"])[0].lstrip("/"),
        "id": str(info.get("Id", ""))[:12], "image_id": base_of(info)}
    volume = (info.get("Labels") or {}).get(VOLUME)
    if state == "running" and volume and is_safe_id(volume):
        detail["services"] = service_state.read(layout.logs(volume) / supervisor.STATE_DIR)
    return Observed(
        exists=True, running=state in RUNNING_STATES, frozen=state == "paused" or quiesced,
        runtime_hash=(info.get("Labels") or {}).get(RUNTIME_HASH), detail=detail)


def observe_all(state_dir: Path) -> dict[str, Observed]:
    """Every container of `state_dir`, by cell id, from one list call to the engine; a
    cell's sidecars (container/sidecars.py) in its detail["sidecars"] (absent: none)."""
    layout = Layout(state_dir)
    out: dict[str, Observed] = {}
    sidecars: dict[str, list[dict[str, Any]]] = {}
    for info in list_containers(state_dir):
        labels = info.get("Labels") or {}
        cell_id = labels.get(CELL_ID)
        if cell_id and is_safe_id(cell_id):  # a label DevCell did not write is not ours
            out[cell_id] = observed(info, layout, cell_id)
        elif labels.get(SIDECAR_OF) and is_safe_id(str(labels[SIDECAR_OF])):
            sidecars.setdefault(str(labels[SIDECAR_OF]), []).append(info)
    for cell_id, listed in sidecars.items():
        if cell_id in out:
            out[cell_id].detail["sidecars"] = sidecar_states(listed)
    return out


def sidecar_states(listed: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What observing shows of a cell's sidecars as the engine lists them: name, state and
    the engine's status line (`Up 3 minutes`, `Exited (1) 2 seconds ago`), by name."""
    out = []
    for info in listed:
        name = (info.get("Labels") or {}).get(SIDECAR)
        if isinstance(name, str) and is_safe_id(name):
            out.append({"name": name, "state": str(info.get("State") or "")[:32],
                        "status": str(info.get("Status") or "")[:200]})
    return sorted(out, key=lambda s: s["name"])
