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

    def services(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        """The services carrying every one of `labels` (DevCell finds its cells by them)."""
        filters = json.dumps({"label": [f"{k}={v}" for k, v in labels.items()]})
        return _list_of_objects(
            self._ask("GET", "/services?filters=" + urllib.parse.quote(filters),
                      "listing DevCell's services"), "listing DevCell's services")

    def tasks_of(self, service_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """The tasks of these services (every service's when None), whatever their state."""
        query = "" if service_ids is None else "?filters=" + urllib.parse.quote(
            json.dumps({"service": service_ids}))
        return _list_of_objects(self._ask("GET", "/tasks" + query, "listing a service's tasks"),
                                "listing a service's tasks")

    def create_service(self, spec: dict[str, Any], action: str) -> str:
        """`POST /services/create`; the new service's id (BackendConflict: the name is taken)."""
        made = self._ask("POST", "/services/create", action, body=spec)
        if not isinstance(made, dict) or not isinstance(made.get("ID"), str):
            raise BackendError(f"{action}: the engine's answer names no service id")
        return str(made["ID"])

    def update_service(self, service: dict[str, Any], spec: dict[str, Any], action: str) -> None:
        """The service's spec replaced by `spec`, from the version `service` was read at."""
        version = int(((service.get("Version") or {}).get("Index")) or 0)
        self._ask("POST", f"/services/{_quoted(service)}/update?version={version}", action,
                  body=spec)

    def remove_service(self, service_id: str, action: str) -> None:
        try:
            self._ask("DELETE", f"/services/{urllib.parse.quote(service_id, safe='')}", action)
        except BackendNotFound:
            pass

    def logs(self, service_id: str, action: str) -> str:
        """A service's output (stdout and stderr of its tasks, as `docker service logs`
        gives it; the last 200 lines), decoded."""
        body = self._raw("GET", f"/services/{urllib.parse.quote(service_id, safe='')}/logs"
                                "?stdout=1&stderr=1&tail=200", action)
        return _demultiplexed(body).decode(errors="replace")

    def _raw(self, method: str, path: str, action: str) -> bytes:
        try:
            sock = engine_http.unix(self.socket, TIMEOUT_S)
            answer = engine_http.request(sock, method, path, limit=4 << 20)
        except (OSError, engine_http.BadResponse) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise BackendUnavailable(
                f"{action}: the swarm manager's engine at unix://{self.socket} does not answer "
                f"({reason}); start it, or correct {self.where}") from None
        if answer.status >= 300:
            raise BackendError(f"{action}: the engine answered {answer.status}: "
                               f"{_message(answer.body)}")
        return bytes(answer.body or b"")

    def create_config(self, name: str, data: bytes, labels: dict[str, str]) -> str:
        """A swarm config (what the swarm hands each node that runs a task using it: no file
        is written on a node by DevCell); an existing one of the name is used, once it is
        DevCell's (its labels) and holds the same bytes (the name carries their digest)."""
        import base64

        action = f"creating swarm config {name}"
        try:
            made = self._ask("POST", "/configs/create", action, body={
                "Name": name, "Labels": labels, "Data": base64.b64encode(data).decode()})
        except BackendConflict:
            found = self._ask("GET", f"/configs/{urllib.parse.quote(name, safe='')}", action)
            if not isinstance(found, dict) or any(
                    ((found.get("Spec") or {}).get("Labels") or {}).get(k) != v
                    for k, v in labels.items()):
                raise BackendConflict(f"{action}: a config of that name exists and is not "
                                      "DevCell's") from None
            return str(found.get("ID"))
        if not isinstance(made, dict) or not isinstance(made.get("ID"), str):
            raise BackendError(f"{action}: the engine's answer names no config id")
        return str(made["ID"])

    def configs(self, labels: dict[str, str]) -> list[dict[str, Any]]:
        filters = json.dumps({"label": [f"{k}={v}" for k, v in labels.items()]})
        return _list_of_objects(
            self._ask("GET", "/configs?filters=" + urllib.parse.quote(filters),
                      "listing DevCell's swarm configs"), "listing DevCell's swarm configs")

    def remove_config(self, config_id: str) -> None:
        """Removed, unless gone already or still used by a service (then the next delete)."""
        try:
            self._ask("DELETE", f"/configs/{urllib.parse.quote(config_id, safe='')}",
                      f"removing swarm config {config_id}")
        except (BackendNotFound, BackendConflict):
            pass
        except BackendError as exc:
            if "in use" not in str(exc):
                raise

    def network_id(self, name: str) -> str:
        found = self._ask("GET", f"/networks/{urllib.parse.quote(name, safe='')}",
                          f"looking up network {name}")
        if not isinstance(found, dict) or not isinstance(found.get("Id"), str):
            raise BackendError(f"looking up network {name}: the engine's answer names no id")
        return str(found["Id"])

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


def _quoted(service: dict[str, Any]) -> str:
    return urllib.parse.quote(str(service.get("ID") or ""), safe="")


def _demultiplexed(body: bytes) -> bytes:
    """The payload of the engine's multiplexed log stream (an 8-byte header before each
    frame: stream, 3 zero bytes, big-endian length); a stream without headers as it is."""
    out, at = [], 0
    while at + 8 <= len(body):
        if body[at] not in (0, 1, 2) or body[at + 1:at + 4] != b"\0\0\0":
            return body
        size = int.from_bytes(body[at + 4:at + 8], "big")
        out.append(body[at + 8:at + 8 + size])
        at += 8 + size
    return b"".join(out) if at == len(body) else body


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
