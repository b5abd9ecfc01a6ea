"""Fetching a feature's artifact through a registry's distribution API (stdlib HTTP only).

A feature published as OCI is an artifact: a manifest whose one layer
(`application/vnd.devcontainers.layer.v1+tar`) is the feature's tarball. The manifest is
asked for by tag or digest, the layer by its digest; both are checked against the digest
they are named by while they are read, and bounded. Credentials are the engine's: the
`auths` of the Docker client's configuration ($DOCKER_CONFIG/config.json, else
~/.docker/config.json), sent as the registry asks (Basic, or a Bearer token from its token
service, as ghcr.io does). A credential helper (credsStore, credHelpers) is not asked.

A registry is reached over https, except a loopback one (plain http, as the engine does for
127.0.0.0/8). `images.registryMirrors` of DevCell's configuration may serve one registry's
features from another (tests serve ghcr.io's from a local registry). A redirect (blobs are
often served from a CDN) never carries the credentials to another host, nor goes to plain
http off loopback; a token service is asked over https, or plain http on loopback only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import IO, Any

from devcell.errors import BackendError, ImageBuildFailed
from devcell.manifests import feature_refs as refs

LAYER_TYPE = "application/vnd.devcontainers.layer.v1+tar"
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
MAX_MANIFEST = 1 << 20
MAX_LAYER = 64 * 1024 * 1024
TIMEOUT = 60.0
FETCH_SECONDS = 600.0
"""The longest one download (a manifest, a layer, a tarball) may take in all: TIMEOUT bounds
each read only, so a server sending a byte a minute would hold the cell's build for ever."""
_CHUNK = 1 << 20
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")


class FeatureFetchFailed(BackendError):
    """A feature could not be fetched (registry or URL unreachable, refused credentials):
    retried with backoff, the registry may come back."""

    reason = "FeatureFetchFailed"


@dataclass(frozen=True)
class Endpoint:
    """Where a registry is reached: its host (after the mirror), the scheme."""

    host: str
    scheme: str


def endpoint(registry: str, mirrors: dict[str, str]) -> Endpoint:
    host = mirrors.get(registry, registry)
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return Endpoint(host, "http" if refs.loopback(name) else "https")


def docker_auth(host: str) -> str | None:
    """The Basic credential (base64 user:password) the Docker client's configuration keeps
    for `host`, or None. Read bounded, as a regular file."""
    folder = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    try:
        fd = os.open(os.path.join(folder, "config.json"),
                     os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        import stat

        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        raw = f.read(MAX_MANIFEST)
    try:
        auths = json.loads(raw).get("auths") or {}
    except (ValueError, AttributeError):
        return None
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/"):
        entry = auths.get(key)
        if isinstance(entry, dict) and isinstance(entry.get("auth"), str) and entry["auth"]:
            return str(entry["auth"])
    return None


def _read(got: IO[bytes], limit: int, shown: str, into: IO[bytes], digest: Any = None) -> int:
    """Copy what `got` sends to `into` (fed to `digest` too), stopping past `limit` bytes
    (the caller judges more than `limit`); how many bytes were copied. Refused past
    FETCH_SECONDS in all."""
    deadline = time.monotonic() + FETCH_SECONDS
    seen = 0
    while seen <= limit:
        want = min(_CHUNK, limit + 1 - seen)
        # read1: what has come (read() waits for all `want` bytes, each wait bounded alone)
        chunk = got.read1(want) if hasattr(got, "read1") else got.read(want)
        if not chunk:
            break
        seen += len(chunk)
        if digest is not None:
            digest.update(chunk)
        into.write(chunk)
        if time.monotonic() > deadline:
            raise FeatureFetchFailed(f"feature {shown}: the download took longer than "
                                     f"{FETCH_SECONDS:g}s; stopped")
    return seen


class _Redirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        old, moved = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if moved.scheme != "https" and not (moved.scheme == "http" and moved.hostname
                                             and refs.loopback(moved.hostname)
                                             and old.scheme == "http"):
            raise urllib.error.HTTPError(newurl, code, "a redirect to plain http off "
                                         "loopback (or from https) refused", headers, None)
        if moved.netloc != old.netloc:
            new.remove_header("Authorization")
        return new


_OPENER = urllib.request.build_opener(_Redirect)


class Client:
    """One registry's distribution API, authenticating as it asks."""

    def __init__(self, where: Endpoint, repository: str, shown: str) -> None:
        self.where = where
        self.repository = repository
        self.shown = shown
        self.authorization: str | None = None

    def _url(self, kind: str, reference: str) -> str:
        return f"{self.where.scheme}://{self.where.host}/v2/{self.repository}/{kind}/{reference}"

    def open(self, kind: str, reference: str, accept: str = "*/*") -> IO[bytes]:
        url = self._url(kind, reference)
        for attempt in range(2):
            headers = {"Accept": accept, "User-Agent": "devcell"}
            if self.authorization:
                headers["Authorization"] = self.authorization
            try:
                response: IO[bytes] = _OPENER.open(urllib.request.Request(url, headers=headers),
                                                   timeout=TIMEOUT)
                return response
            except urllib.error.HTTPError as exc:
                exc.close()
                if exc.code == 401 and attempt == 0:
                    self.authorization = self._authorize(exc.headers.get("WWW-Authenticate", ""))
                    continue
                if exc.code == 401:
                    break
                if exc.code == 404:
                    raise ImageBuildFailed(f"feature {self.shown}: the registry "
                                           f"{self.where.host} has no {kind[:-1]} "
                                           f"{reference} of {self.repository}") from None
                raise FeatureFetchFailed(f"feature {self.shown}: the registry "
                                         f"{self.where.host} answered {exc.code} "
                                         f"({exc.reason})") from None
            except (urllib.error.URLError, OSError) as exc:
                why = getattr(exc, "reason", None) or exc
                raise FeatureFetchFailed(f"feature {self.shown}: cannot reach the registry "
                                         f"{self.where.host} ({why})") from None
        raise FeatureFetchFailed(f"feature {self.shown}: the registry {self.where.host} "
                                 "refused the credentials of the Docker client's "
                                 "configuration (docker login to it)")

    def _authorize(self, challenge: str) -> str:
        basic = docker_auth(self.where.host)
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if basic is None:
                raise FeatureFetchFailed(f"feature {self.shown}: the registry "
                                         f"{self.where.host} asks for credentials and the "
                                         "Docker client's configuration has none for it "
                                         "(docker login)")
            return f"Basic {basic}"
        if scheme.lower() != "bearer":
            raise FeatureFetchFailed(f"feature {self.shown}: the registry {self.where.host} "
                                     f"asks for an authentication DevCell does not speak "
                                     f"({scheme or 'none named'})")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.get("realm", "")
        realm_host = urllib.parse.urlsplit(realm).hostname or ""
        if not realm.startswith("https://") and not (
                realm.startswith("http://") and refs.loopback(realm_host)):
            raise FeatureFetchFailed(f"feature {self.shown}: the registry's token service "
                                     f"{realm!r} is not https")
        query = {"service": fields.get("service", ""),
                 "scope": fields.get("scope") or f"repository:{self.repository}:pull"}
        headers = {"User-Agent": "devcell"}
        if basic is not None:
            headers["Authorization"] = f"Basic {basic}"
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        try:
            with _OPENER.open(urllib.request.Request(url, headers=headers),
                              timeout=TIMEOUT) as got:
                buffer = io.BytesIO()
                _read(got, MAX_MANIFEST, self.shown, buffer)
                answer = json.loads(buffer.getvalue()[:MAX_MANIFEST])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise FeatureFetchFailed(f"feature {self.shown}: the registry's token service "
                                     f"did not give a token ({exc})") from None
        token = answer.get("token") or answer.get("access_token") if isinstance(
            answer, dict) else None
        if not isinstance(token, str) or not token:
            raise FeatureFetchFailed(f"feature {self.shown}: the registry's token service "
                                     "gave no token")
        return f"Bearer {token}"

    def manifest(self, reference: str) -> tuple[str, dict[str, Any]]:
        """(the manifest's digest, the manifest), checked against `reference` when it is a
        digest."""
        with self.open("manifests", reference, accept=", ".join(MANIFEST_TYPES)) as got:
            buffer = io.BytesIO()
            _read(got, MAX_MANIFEST, self.shown, buffer)
            body = buffer.getvalue()
        if len(body) > MAX_MANIFEST:
            raise ImageBuildFailed(f"feature {self.shown}: its manifest is larger than "
                                   f"{MAX_MANIFEST >> 10} KiB")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if _DIGEST.match(reference) and digest != reference:
            raise ImageBuildFailed(f"feature {self.shown}: the registry served a manifest "
                                   f"whose digest is {digest}, not {reference}")
        try:
            data = json.loads(body)
        except ValueError:
            raise ImageBuildFailed(f"feature {self.shown}: its manifest is not JSON") from None
        if not isinstance(data, dict):
            raise ImageBuildFailed(f"feature {self.shown}: its manifest is not an object")
        return digest, data

    def blob(self, digest: str, size: int, into: IO[bytes]) -> None:
        """The blob `digest` written to `into`, checked against its digest and size."""
        h = hashlib.sha256()
        with self.open("blobs", digest) as got:
            if _read(got, size, self.shown, into, h) > size:
                raise ImageBuildFailed(f"feature {self.shown}: the registry served more "
                                       f"than the {size} bytes its manifest names")
        if "sha256:" + h.hexdigest() != digest:
            raise ImageBuildFailed(f"feature {self.shown}: the registry served a layer whose "
                                   f"digest is not {digest}")


def feature_layer(manifest: dict[str, Any], shown: str) -> tuple[str, int]:
    """(digest, size) of the feature's tarball in its manifest."""
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ImageBuildFailed(f"feature {shown}: its manifest names no layer (is it an "
                               "image rather than a feature?)")
    chosen = [layer for layer in layers if isinstance(layer, dict)
              and layer.get("mediaType") == LAYER_TYPE]
    if len(chosen) != 1:
        raise ImageBuildFailed(f"feature {shown}: its manifest must name one layer of type "
                               f"{LAYER_TYPE}; found {len(chosen)}")
    digest, size = chosen[0].get("digest"), chosen[0].get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest) or not isinstance(size, int) \
            or isinstance(size, bool) or not 0 <= size <= MAX_LAYER:
        raise ImageBuildFailed(f"feature {shown}: its layer must name a sha256 digest and a "
                               f"size up to {MAX_LAYER >> 20} MiB")
    return digest, size


def download(url: str, into: IO[bytes], shown: str) -> str:
    """A tarball URL's content written to `into` (bounded); its sha256 digest."""
    h = hashlib.sha256()
    try:
        with _OPENER.open(urllib.request.Request(url, headers={"User-Agent": "devcell"}),
                          timeout=TIMEOUT) as got:
            if _read(got, MAX_LAYER, shown, into, h) > MAX_LAYER:
                raise ImageBuildFailed(f"feature {shown}: the tarball is larger than "
                                       f"{MAX_LAYER >> 20} MiB")
    except urllib.error.HTTPError as exc:
        exc.close()
        raise FeatureFetchFailed(f"feature {shown}: {exc.code} ({exc.reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FeatureFetchFailed(f"feature {shown}: cannot download it "
                                 f"({getattr(exc, 'reason', None) or exc})") from None
    return "sha256:" + h.hexdigest()
