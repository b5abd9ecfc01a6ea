"""A Python client of DevCell's HTTP API (docs/api.md): `from devcell import Client`.

    from devcell import Client

    with Client("unix:/home/ana/.devcell/api.sock") as dc:   # or "https://host:8443"
        dc.apply(open("cell.yaml").read())
        for change in dc.watch("cells", timeout=60):
            print(change["type"], change["object"]["metadata"].get("name"))

Standard library only (http.client, ssl): importing DevCell for its client pulls in nothing
else, and `devcell` itself imports this module only when `Client` is first asked for. Every
error the server answers is raised as DevCell's own error class for its status (NotFound,
Conflict, ManifestError with its located problems, Unauthenticated, Forbidden, ...), its
message the problem document's detail; the document itself is on `.problem`.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.parse
from collections.abc import Iterator
from typing import Any

from devcell import errors

RESOURCES = ("cells", "snapshots", "operations", "events")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("devcell", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Client:
    """One DevCell API server: `unix:PATH` (the state directory's owner, no token) or
    `https://HOST:PORT` with a bearer token and, for DevCell's own certificate, `ca` (its
    `api-tls/cert.pem`)."""

    def __init__(self, url: str, *, token: str | None = None, ca: str | None = None,
                 timeout: float = 30.0) -> None:
        self.url, self.token, self.timeout = url, token, timeout
        if url.startswith("unix:"):
            self._unix: str | None = url[len("unix:"):]
            self._host, self._port, self._tls = "", 0, None
        else:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme != "https" or not parts.hostname:
                raise errors.UsageError(f"{url!r}: unix:PATH or https://HOST:PORT")
            self._unix = None
            self._host, self._port = parts.hostname, parts.port or 443
            self._tls = ssl.create_default_context(cafile=ca)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is kept open between calls; here for `with`."""

    # -- the verbs ------------------------------------------------------------------------------

    def list(self, resource: str, *, selector: str | None = None) -> list[dict[str, Any]]:
        """The records of `resource` (cells, snapshots, operations, events), as `devcell get
        RESOURCE -o json` prints them; `selector` as -l."""
        return list(self._json("GET", _path(resource), {"labelSelector": selector})["items"])

    def get(self, resource: str, name: str) -> dict[str, Any]:
        """One record, by name or id (NotFound when there is none)."""
        return self._json("GET", f"{_path(resource)}/{urllib.parse.quote(name, safe='')}")

    def apply(self, manifests: str | dict[str, Any], *, dry_run: bool = False
              ) -> dict[str, Any]:
        """Record a YAML stream (or one manifest as a dict); what was recorded, as apply
        says it (ManifestError with every located problem when any is found)."""
        if isinstance(manifests, str):
            body, media = manifests.encode(), "application/yaml"
        else:
            body, media = json.dumps(manifests).encode(), "application/json"
        return self._json("POST", "/api/v1/apply", {"dryRun": "true" if dry_run else None},
                          body=body, media=media)

    def delete(self, resource: str, name: str) -> dict[str, Any]:
        """Ask for an object's deletion (the daemon tears it down)."""
        return self._json("DELETE", f"{_path(resource)}/{urllib.parse.quote(name, safe='')}")

    def watch(self, resource: str, *, resource_version: str | None = None,
              timeout: int | None = None) -> Iterator[dict[str, Any]]:
        """Each change of `resource` as it happens ({type, resourceVersion, object}); from a
        version (a list's metadata.resourceVersion, or the last change's) to miss nothing."""
        query = {"watch": "true", "resourceVersion": resource_version,
                 "timeoutSeconds": str(timeout) if timeout is not None else None}
        conn, response = self._send("GET", _path(resource), query, read_timeout=None)
        try:
            if response.status != 200:
                _raise(response.status, response.read(1024 * 1024))
            for line in response:
                if line.strip():
                    change: dict[str, Any] = json.loads(line)
                    if change.get("type") != "BOOKMARK":
                        yield change
        finally:
            conn.close()

    # -- the exchange ---------------------------------------------------------------------------

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        wait = timeout if timeout is not None else 24 * 3600.0
        if self._unix is not None:
            return _UnixConnection(self._unix, wait)
        return http.client.HTTPSConnection(self._host, self._port, timeout=wait,
                                           context=self._tls)

    def _send(self, method: str, path: str, query: dict[str, str | None], *,
              body: bytes | None = None, media: str | None = None,
              read_timeout: float | None = -1.0
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        given = {k: v for k, v in query.items() if v is not None}
        target = path + ("?" + urllib.parse.urlencode(given) if given else "")
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if media is not None:
            headers["Content-Type"] = media
        conn = self._connection(self.timeout if read_timeout == -1.0 else read_timeout)
        try:
            conn.request(method, target, body=body, headers=headers)
            return conn, conn.getresponse()
        except OSError as exc:
            conn.close()
            raise errors.TemporaryError(f"DevCell API at {self.url}: {exc}") from None

    def _json(self, method: str, path: str, query: dict[str, str | None] | None = None, *,
              body: bytes | None = None, media: str | None = None) -> Any:
        conn, response = self._send(method, path, query or {}, body=body, media=media)
        try:
            data = response.read()
        finally:
            conn.close()
        if response.status >= 400:
            _raise(response.status, data)
        return json.loads(data)


def _path(resource: str) -> str:
    if resource not in RESOURCES:
        raise errors.UsageError(f"{resource!r}: one of {', '.join(RESOURCES)}")
    return f"/api/v1/{resource}"


_BY_STATUS: dict[int, type[errors.DevCellError]] = {
    400: errors.UsageError, 404: errors.NotFound, 409: errors.Conflict,
    503: errors.TemporaryError,
}


def _raise(status: int, data: bytes) -> None:
    """The server's problem document as DevCell's own error for its status."""
    try:
        problem = json.loads(data)
        detail = str(problem.get("detail", ""))
    except (ValueError, AttributeError):
        problem, detail = {}, data[:500].decode("utf-8", "replace")
    exc: errors.DevCellError
    if status == 422:
        exc = errors.ManifestError([errors.Problem(
            p.get("file", ""), p.get("message", ""), p.get("line"), p.get("column"),
            p.get("kind"), p.get("name"), p.get("field"))
            for p in problem.get("problems", []) if isinstance(p, dict)]
            or [errors.Problem("request", detail)])
    elif status == 401:
        exc = errors.Unauthenticated()
    elif status == 403:
        rule = detail.partition("refused by rule ")[2].partition(" ")[0]
        exc = errors.Forbidden(detail, rule=rule)
    else:
        exc = _BY_STATUS.get(status, errors.DevCellError)(detail or f"HTTP {status}")
    exc.problem = problem  # type: ignore[attr-defined]
    raise exc
