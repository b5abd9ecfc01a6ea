"""One registry's distribution API over stdlib HTTP: manifests and blobs fetched (digest
checked while read, bounded) and pushed (blob uploads in chunks, manifest PUT).

Credentials are the engine's: the `auths` of the Docker client's configuration
($DOCKER_CONFIG/config.json, else ~/.docker/config.json), sent as the registry asks (Basic,
or a Bearer token from its token service, as ghcr.io does). A credential helper (credsStore,
credHelpers) is not asked.

A registry is reached over https, except a loopback one (plain http, as the engine does for
127.0.0.0/8). A redirect (blobs are often served from a CDN) never carries the credentials
to another host, nor goes to plain http off loopback; a token service is asked over https,
or plain http on loopback only; an upload's Location is followed on the same terms.

The errors are the caller's: a feature's fetch and a snapshot's pull blame different
things, so a Client is made with the subject its messages start with and the two error
classes it raises (`unreachable`: the registry may come back; `refused`: it will not).
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from devcell import names
from devcell.errors import DevCellError
from devcell.manifests import feature_refs as refs

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_TYPES = (OCI_MANIFEST, "application/vnd.docker.distribution.manifest.v2+json")
MAX_MANIFEST = 1 << 20
TIMEOUT = 60.0
"""Seconds one read or one request may wait."""
CHUNK = 1 << 20
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
TOKEN = re.compile(r"[\x21-\x7e]{1,65536}\Z")


@dataclass(frozen=True)
class Endpoint:
    """Where a registry is reached: its host (after the mirror), the scheme."""

    host: str
    scheme: str


def endpoint(registry: str, mirrors: dict[str, str] | None = None) -> Endpoint:
    host = (mirrors or {}).get(registry, registry)
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


def read_bounded(got: IO[bytes], limit: int, into: IO[bytes], digest: Any = None, *,
                 seconds: float, too_slow: Callable[[], DevCellError]) -> int:
    """Copy what `got` sends to `into` (fed to `digest` too), stopping past `limit` bytes
    (the caller judges more than `limit`); how many bytes were copied. `too_slow()` is raised
    past `seconds` in all (each read is bounded alone by TIMEOUT, so a server sending a byte
    a minute would otherwise hold the caller for ever)."""
    deadline = time.monotonic() + seconds
    seen = 0
    while seen <= limit:
        want = min(CHUNK, limit + 1 - seen)
        # read1: what has come (read() waits for all `want` bytes, each wait bounded alone)
        chunk = got.read1(want) if hasattr(got, "read1") else got.read(want)
        if not chunk:
            break
        seen += len(chunk)
        if digest is not None:
            digest.update(chunk)
        into.write(chunk)
        if time.monotonic() > deadline:
            raise too_slow()
    return seen


def _allowed(old: str, new: str) -> bool:
    """Whether a redirect or an upload Location from `old` to `new` may be followed: https,
    or plain http from plain http on a loopback host."""
    was, moved = urllib.parse.urlsplit(old), urllib.parse.urlsplit(new)
    return moved.scheme == "https" or (moved.scheme == "http" and bool(moved.hostname)
                                       and refs.loopback(moved.hostname or "")
                                       and was.scheme == "http")


class _Redirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        if not _allowed(req.full_url, newurl):
            raise urllib.error.HTTPError(newurl, code, "a redirect to plain http off "
                                         "loopback (or from https) refused", headers, None)
        if urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


OPENER = urllib.request.build_opener(_Redirect)


class Client:
    """One repository of one registry, authenticating as it asks."""

    def __init__(self, where: Endpoint, repository: str, subject: str, *,
                 unreachable: type[DevCellError], refused: type[DevCellError],
                 push: bool = False, seconds: float = 600.0) -> None:
        self.where = where
        self.repository = repository
        self.subject = subject
        self.unreachable = unreachable
        self.refused = refused
        self.scope = f"repository:{repository}:{'pull,push' if push else 'pull'}"
        self.seconds = seconds
        """The longest a manifest or small blob download may take in all."""
        self.authorization: str | None = None

    def url(self, kind: str, reference: str) -> str:
        return f"{self.where.scheme}://{self.where.host}/v2/{self.repository}/{kind}/{reference}"

    def too_slow(self) -> DevCellError:
        return self.unreachable(f"{self.subject}: the download took longer than "
                                f"{self.seconds:g}s; stopped")

    def request(self, url: str, *, method: str = "GET", data: bytes | None = None,
                headers: dict[str, str] | None = None, what: str = "") -> Any:
        """The registry's answer to one request (an open response), asking for credentials
        once if it wants them; 404 is `refused` ("has no `what`"), other errors `unreachable`."""
        for attempt in range(2):
            sent = {"User-Agent": "devcell", **(headers or {})}
            if self.authorization:
                sent["Authorization"] = self.authorization
            try:
                return OPENER.open(urllib.request.Request(url, data=data, headers=sent,
                                                          method=method), timeout=TIMEOUT)
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc, self._secrets())
                exc.close()
                if exc.code == 401 and not self._ours(exc.geturl() or url):
                    # a host redirected to (a blob store) naming its own token service would
                    # be sent the registry's credentials: they go to the registry alone
                    raise self.unreachable(f"{self.subject}: a host the registry "
                                           f"{self.where.host} redirected to asks for "
                                           "credentials; DevCell sends them to the registry "
                                           "only") from None
                if exc.code == 401 and attempt == 0:
                    self.authorization = self._authorize(exc.headers.get("WWW-Authenticate", ""))
                    continue
                if exc.code == 401:
                    break
                if exc.code == 404 and what:
                    raise self.refused(f"{self.subject}: the registry {self.where.host} has "
                                       f"no {what} of {self.repository}") from None
                raise self.unreachable(f"{self.subject}: the registry {self.where.host} "
                                       f"answered {exc.code} "
                                       f"({_redacted(str(exc.reason), self._secrets())})"
                                       f"{detail}") from None
            except (urllib.error.URLError, OSError) as exc:
                why = getattr(exc, "reason", None) or exc
                raise self.unreachable(f"{self.subject}: cannot reach the registry "
                                       f"{self.where.host} ({why})") from None
            except (ValueError, http.client.InvalidURL) as exc:  # a URL or header HTTP cannot carry
                raise self.unreachable(f"{self.subject}: the registry {self.where.host} gave "
                                       f"a location or token DevCell cannot send on "
                                       f"({names.printable(str(exc)[:200])})") from None
        raise self.unreachable(f"{self.subject}: the registry {self.where.host} refused the "
                               "credentials of the Docker client's configuration (docker "
                               "login to it)")

    def _secrets(self) -> list[str]:
        """What of the credentials a registry could echo in an error (never printed): the
        token, or the Basic credential, its decoded user:password and password."""
        if not self.authorization:
            return []
        secret = self.authorization.partition(" ")[2]
        found = [secret]
        if self.authorization.startswith("Basic "):
            import base64
            import binascii

            try:
                plain = base64.b64decode(secret).decode()
            except (binascii.Error, UnicodeDecodeError):
                return found
            found += [plain, plain.partition(":")[2]]
        return [s for s in found if len(s) >= 4]

    def _ours(self, url: str) -> bool:
        """Whether `url` is the registry's own (where its credentials may go)."""
        return urllib.parse.urlsplit(url).netloc == self.where.host

    def open(self, kind: str, reference: str, accept: str = "*/*") -> IO[bytes]:
        response: IO[bytes] = self.request(self.url(kind, reference), headers={"Accept": accept},
                                           what=f"{kind[:-1]} {reference}")
        return response

    def _authorize(self, challenge: str) -> str:
        basic = docker_auth(self.where.host)
        scheme, _, params = challenge.partition(" ")
        if scheme.lower() == "basic":
            if basic is None:
                raise self.unreachable(f"{self.subject}: the registry {self.where.host} asks "
                                       "for credentials and the Docker client's "
                                       "configuration has none for it (docker login)")
            return f"Basic {basic}"
        if scheme.lower() != "bearer":
            raise self.unreachable(f"{self.subject}: the registry {self.where.host} asks for "
                                   "an authentication DevCell does not speak "
                                   f"({scheme or 'none named'})")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        realm = fields.get("realm", "")
        realm_host = urllib.parse.urlsplit(realm).hostname or ""
        # plain http only for a registry itself on plain http (loopback): an https
        # registry's credentials never go in clear, even to a local port
        if not realm.startswith("https://") and not (
                realm.startswith("http://") and refs.loopback(realm_host)
                and self.where.scheme == "http"):
            raise self.unreachable(f"{self.subject}: the registry's token service {realm!r} "
                                   "is not https")
        query = {"service": fields.get("service", ""),
                 "scope": fields.get("scope") or self.scope}
        headers = {"User-Agent": "devcell"}
        if basic is not None:
            headers["Authorization"] = f"Basic {basic}"
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        try:
            with OPENER.open(urllib.request.Request(url, headers=headers),
                             timeout=TIMEOUT) as got:
                buffer = io.BytesIO()
                read_bounded(got, MAX_MANIFEST, buffer, seconds=self.seconds,
                             too_slow=self.too_slow)
                answer = json.loads(buffer.getvalue()[:MAX_MANIFEST])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise self.unreachable(f"{self.subject}: the registry's token service did not "
                                   f"give a token ({exc})") from None
        token = answer.get("token") or answer.get("access_token") if isinstance(
            answer, dict) else None
        if not isinstance(token, str) or not token:
            raise self.unreachable(f"{self.subject}: the registry's token service gave no "
                                   "token")
        if not TOKEN.match(token):  # it goes into a header: no spaces, line breaks, controls
            raise self.unreachable(f"{self.subject}: the registry's token service gave a "
                                   "token with characters a header cannot carry")
        return f"Bearer {token}"

    # -- pulling ------------------------------------------------------------------------------

    def manifest(self, reference: str) -> tuple[str, dict[str, Any]]:
        """(the manifest's digest, the manifest), checked against `reference` when it is a
        digest."""
        with self.open("manifests", reference, accept=", ".join(MANIFEST_TYPES)) as got:
            buffer = io.BytesIO()
            read_bounded(got, MAX_MANIFEST, buffer, seconds=self.seconds,
                         too_slow=self.too_slow)
            body = buffer.getvalue()
        if len(body) > MAX_MANIFEST:
            raise self.refused(f"{self.subject}: its manifest is larger than "
                               f"{MAX_MANIFEST >> 10} KiB")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if DIGEST.match(reference) and digest != reference:
            raise self.refused(f"{self.subject}: the registry served a manifest whose digest "
                               f"is {digest}, not {reference}")
        try:
            data = json.loads(body)
        except ValueError:
            raise self.refused(f"{self.subject}: its manifest is not JSON") from None
        if not isinstance(data, dict):
            raise self.refused(f"{self.subject}: its manifest is not an object")
        return digest, data

    def blob(self, digest: str, size: int, into: IO[bytes]) -> None:
        """The blob `digest` written to `into`, checked against its digest and size."""
        h = hashlib.sha256()
        with self.open("blobs", digest) as got:
            seen = read_bounded(got, size, into, h, seconds=self.seconds,
                                too_slow=self.too_slow)
            if seen > size:
                raise self.refused(f"{self.subject}: the registry served more than the "
                                   f"{size} bytes its manifest names for blob {digest}")
            if seen < size:
                raise self.refused(f"{self.subject}: the registry's blob {digest} ends after "
                                   f"{seen} of the {size} bytes its manifest names")
        if "sha256:" + h.hexdigest() != digest:
            raise self.refused(f"{self.subject}: the registry served a blob whose content "
                               f"does not match its digest {digest}")

    # -- pushing ------------------------------------------------------------------------------

    def has_blob(self, digest: str) -> bool:
        try:
            self.request(self.url("blobs", digest), method="HEAD", what="blob").close()
        except self.refused:
            return False
        return True

    def upload(self) -> Upload:
        """A new blob upload (the distribution API's POST), written to in chunks."""
        start = self.url("blobs", "uploads/")
        with self.request(start, method="POST", data=b"",
                          headers={"Content-Length": "0"}) as got:
            location = got.headers.get("Location", "")
        return Upload(self, self._follow(start, location))

    def _follow(self, base: str, location: str) -> str:
        """An upload's next URL (its Location, maybe relative), refused if it leaves for
        plain http off loopback or for another host (which would receive the credentials)."""
        url = urllib.parse.urljoin(base, location)
        if not location or not _allowed(base, url) or \
                urllib.parse.urlsplit(url).netloc != urllib.parse.urlsplit(base).netloc:
            raise self.unreachable(f"{self.subject}: the registry {self.where.host} gave an "
                                   f"upload location DevCell does not follow ({location[:200]!r})")
        return url

    def put_manifest(self, reference: str, body: bytes, media_type: str) -> str:
        """Store `body` as the manifest `reference` (a tag); its digest."""
        with self.request(self.url("manifests", reference), method="PUT", data=body,
                          headers={"Content-Type": media_type}):
            pass
        return "sha256:" + hashlib.sha256(body).hexdigest()


class Upload:
    """One blob upload: bytes written are sent in PATCH requests of up to `chunk` bytes
    (so memory holds one chunk, whatever the blob's size), hashed on the way; `commit()`
    ends it with the PUT naming the digest."""

    def __init__(self, client: Client, location: str, chunk: int = 16 << 20) -> None:
        self.client, self.location, self.chunk = client, location, chunk
        self.buffer = bytearray()
        self.sha = hashlib.sha256()
        self.sent = 0
        self.progress: Callable[[int], None] = lambda n: None

    def write(self, data: bytes) -> int:
        self.buffer += data
        self.sha.update(data)
        if len(self.buffer) >= self.chunk:
            self._send()
        return len(data)

    def flush(self) -> None:
        return None

    def _send(self) -> None:
        if not self.buffer:
            return
        body = bytes(self.buffer)
        self.buffer.clear()
        end = self.sent + len(body) - 1
        with self.client.request(self.location, method="PATCH", data=body, headers={
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{self.sent}-{end}"}) as got:
            location = got.headers.get("Location", "")
        self.location = self.client._follow(self.location, location)
        self.sent += len(body)
        self.progress(len(body))

    def commit(self) -> tuple[str, int]:
        """(digest, size) of the blob, now stored by the registry."""
        self._send()
        digest = "sha256:" + self.sha.hexdigest()
        glue = "&" if "?" in self.location else "?"
        url = f"{self.location}{glue}{urllib.parse.urlencode({'digest': digest})}"
        with self.client.request(url, method="PUT", data=b"",
                                 headers={"Content-Length": "0",
                                          "Content-Type": "application/octet-stream"}):
            pass
        return digest, self.sent


def _error_detail(exc: urllib.error.HTTPError, secrets: list[str]) -> str:
    """The first error the registry's JSON body names (`: CODE: message`), bounded and
    printable, without the `secrets` it may echo; empty when there is none."""
    try:
        body = json.loads(exc.read(4096) or b"{}")
        first = body["errors"][0]
        text = f"{first.get('code', '')}: {first.get('message', '')}"
    except Exception:  # noqa: BLE001 (an error body is a courtesy; any shape is possible)
        return ""
    text = _redacted(text, secrets)
    from devcell.names import printable

    return f": {printable(text[:200])}"


def _redacted(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "<redacted>")
    return text
