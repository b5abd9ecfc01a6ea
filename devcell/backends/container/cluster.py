"""The swarm manager's engine, asked what DevCell needs of a cluster: its nodes, the tasks of
DevCell's services on them, and a node's availability (docs/cluster.md).

Plain requests on the manager's unix socket (engine_http), as `observe` asks the local
engine: listing nodes needs no SDK. Every answer is the engine's JSON, decoded and checked for
its shape here; what it means is the caller's (devcell/api/nodes.py).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from devcell.backends.container import engine_http
from devcell.backends.container.labels import MANAGED, STATE
from devcell.backends.host.ids import state_hash
from devcell.errors import BackendConflict, BackendError, BackendNotFound, BackendUnavailable

TIMEOUT_S = 30.0
AVAILABILITIES = ("active", "pause", "drain")


class Manager:
    """The manager's engine at `socket` (a unix socket path)."""

    def __init__(self, socket: str, where: str) -> None:
        self.socket = socket
        self.where = where
        """What to name in an error: the setting that gave the address."""

    def _ask(self, method: str, path: str, action: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        try:
            sock = engine_http.unix(self.socket, TIMEOUT_S)
            answer = engine_http.request(sock, method, path, body=data, limit=64 << 20)
        except (OSError, engine_http.BadResponse) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise BackendUnavailable(
                f"{action}: the swarm manager's engine at unix://{self.socket} does not answer "
                f"({reason}); start it, or correct {self.where}") from None
        if answer.status >= 300:
            message = _message(answer.body)
            cls = {404: BackendNotFound, 409: BackendConflict}.get(answer.status, BackendError)
            if answer.status == 503 and "not a swarm manager" in message:
                raise BackendUnavailable(
                    f"{action}: the engine at unix://{self.socket} is not a swarm manager "
                    f"({message}); name a manager's engine in {self.where}")
            raise cls(f"{action}: the engine answered {answer.status}: {message}")
        if not answer.body:
            return None
        try:
            return json.loads(answer.body)
        except ValueError:
            raise BackendError(f"{action}: the engine's answer is not JSON") from None

    def nodes(self) -> list[dict[str, Any]]:
        """`GET /nodes`: every node the swarm knows, as the engine describes it."""
        found = self._ask("GET", "/nodes", "listing the swarm's nodes")
        return _list_of_objects(found, "listing the swarm's nodes")

    def node(self, node_id: str) -> dict[str, Any]:
        found = self._ask("GET", f"/nodes/{urllib.parse.quote(node_id, safe='')}",
                          "reading a node")
        if not isinstance(found, dict):
            raise BackendError("reading a node: the engine's answer is not a JSON object")
        return found

    def services_of_state(self, state_dir: Any) -> dict[str, dict[str, str]]:
        """Service id -> labels of the services DevCell made for `state_dir` (found by their
        labels, as the single host finds its containers)."""
        filters = json.dumps({"label": [f"{MANAGED}=true", f"{STATE}={state_hash(state_dir)}"]})
        services = _list_of_objects(
            self._ask("GET", "/services?filters=" + urllib.parse.quote(filters),
                      "listing DevCell's services"), "listing DevCell's services")
        return {str(s.get("ID")): dict((s.get("Spec") or {}).get("Labels") or {})
                for s in services}

    def tasks(self) -> list[dict[str, Any]]:
        """Every task the swarm means to run (any service's: their reservations are what
        the scheduler counts on each node)."""
        query = json.dumps({"desired-state": ["running"]})
        return _list_of_objects(
            self._ask("GET", "/tasks?filters=" + urllib.parse.quote(query),
                      "listing the swarm's tasks"), "listing the swarm's tasks")

    def set_availability(self, node_id: str, availability: str) -> dict[str, Any]:
        """The node's availability set (the rest of its spec as it was); the node after.
        The engine refuses an update made from a stale version (409): read, then update,
        once more."""
        if availability not in AVAILABILITIES:
            raise ValueError(availability)
        for attempt in range(2):
            node = self.node(node_id)
            spec = dict(node.get("Spec") or {})
            if spec.get("Availability") == availability:
                return node
            spec["Availability"] = availability
            version = int(((node.get("Version") or {}).get("Index")) or 0)
            try:
                self._ask("POST", f"/nodes/{urllib.parse.quote(node_id, safe='')}/update"
                                  f"?version={version}", "updating a node", body=spec)
            except BackendError as exc:
                if attempt or "update out of sequence" not in str(exc):
                    raise
                continue
            return self.node(node_id)
        raise AssertionError("unreachable")  # pragma: no cover


def _message(body: bytes) -> str:
    try:
        found = json.loads(body)
    except ValueError:
        return body[:200].decode(errors="replace")
    if isinstance(found, dict) and isinstance(found.get("message"), str):
        return found["message"][:500]
    return body[:200].decode(errors="replace")


def _list_of_objects(found: Any, action: str) -> list[dict[str, Any]]:
    if found is None:
        return []
    if not isinstance(found, list) or not all(isinstance(i, dict) for i in found):
        raise BackendError(f"{action}: the engine's answer is not a JSON list of objects")
    return found
