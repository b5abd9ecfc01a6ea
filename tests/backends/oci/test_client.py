"""The distribution-API client against a small loopback server that records what it is sent:
the Docker client's credentials go out when the registry asks for them; a blob is uploaded in
PATCH chunks with their ranges, then PUT with its digest; an upload Location on another host
(which would receive the credentials) is refused; a blob longer than its manifest says, or
other than its digest, is refused."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.oci import client as oci
from devcell.errors import ArchiveRefused, RegistryUnreachable

CREDENTIAL = base64.b64encode(b"someone:s3cret").decode()


class Recorder(http.server.ThreadingHTTPServer):
    requests: list[dict[str, Any]]
    location: str
    blob: bytes


class Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def _record(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.requests.append({"method": self.command, "path": self.path,
                                     "authorization": self.headers.get("Authorization"),
                                     "range": self.headers.get("Content-Range"),
                                     "body": body})
        return body

    def _answer(self, code: int, headers: dict[str, str] | None = None,
                body: bytes = b"") -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Basic {CREDENTIAL}":
            return True
        self._answer(401, {"WWW-Authenticate": 'Basic realm="test"'})
        return False

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        self._record()
        if self._authorized():
            self._answer(202, {"Location": self.server.location})

    def do_PATCH(self) -> None:  # noqa: N802
        self._record()
        if self._authorized():
            self._answer(202, {"Location": "/v2/team/x/blobs/uploads/u1?state=next"})

    def do_PUT(self) -> None:  # noqa: N802
        self._record()
        if self._authorized():
            self._answer(201)

    def do_GET(self) -> None:  # noqa: N802
        self._record()
        if self._authorized():
            self._answer(200, {}, self.server.blob)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    config = tmp_path / "docker"
    config.mkdir()
    running = Recorder(("127.0.0.1", 0), Handler)
    running.requests, running.blob = [], b""
    running.location = "/v2/team/x/blobs/uploads/u1?state=first"
    address = f"127.0.0.1:{running.server_port}"
    (config / "config.json").write_text(json.dumps({"auths": {address: {"auth": CREDENTIAL}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield running
    running.shutdown()
    running.server_close()


def _client(server: Recorder, *, push: bool = True) -> oci.Client:
    return oci.Client(oci.endpoint(f"127.0.0.1:{server.server_port}"), "team/x", "snapshot t",
                      unreachable=RegistryUnreachable, refused=ArchiveRefused, push=push)


def test_a_blob_goes_up_in_ranged_chunks_then_a_put_with_its_digest(server: Recorder) -> None:
    upload = _client(server).upload()
    upload.chunk = 10
    data = b"0123456789abcdefghijklmnopqrstuvwxyz"
    for i in range(0, len(data), 7):
        upload.write(data[i:i + 7])
    digest, size = upload.commit()
    assert (digest, size) == ("sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    sent = [(r["method"], r["range"], r["authorization"]) for r in server.requests]
    assert sent[0] == ("POST", None, None)  # asked without credentials first
    assert sent[1] == ("POST", None, f"Basic {CREDENTIAL}")  # the engine's, once asked
    patches = [r for r in server.requests if r["method"] == "PATCH"]
    assert [r["range"] for r in patches] == ["0-13", "14-27", "28-35"]
    assert b"".join(r["body"] for r in patches) == data
    assert patches[0]["path"].endswith("state=first")
    assert patches[1]["path"].endswith("state=next")
    put = server.requests[-1]
    assert put["method"] == "PUT" and f"digest={digest.replace(':', '%3A')}" in put["path"]
    assert all(r["authorization"] == f"Basic {CREDENTIAL}" for r in server.requests[1:])


def test_an_upload_location_on_another_host_is_never_followed(server: Recorder) -> None:
    server.location = f"http://127.0.0.2:{server.server_port}/elsewhere"
    with pytest.raises(RegistryUnreachable, match="upload location DevCell does not follow"):
        _client(server).upload()
    assert not any(r["path"] == "/elsewhere" for r in server.requests)


def test_a_blob_longer_than_named_or_other_than_its_digest_is_refused(server: Recorder) -> None:
    server.blob = b"x" * 100
    right = "sha256:" + hashlib.sha256(server.blob).hexdigest()
    with pytest.raises(ArchiveRefused, match="more than the 50 bytes"):
        _client(server, push=False).blob(right, 50, io.BytesIO())
    with pytest.raises(ArchiveRefused, match="does not match its digest sha256:0000"):
        _client(server, push=False).blob("sha256:" + "0" * 64, 100, io.BytesIO())
    out = io.BytesIO()
    _client(server, push=False).blob(right, 100, out)
    assert out.getvalue() == server.blob


def test_without_a_login_the_error_says_docker_login(server: Recorder,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    with pytest.raises(RegistryUnreachable, match="has none for it \\(docker login\\)"):
        _client(server).upload()


class Foreign(http.server.ThreadingHTTPServer):
    """Another host (another port of loopback, so another netloc): a blob store the registry
    redirects to, or a token service; records the credentials it is sent."""

    seen: list[str | None]
    answer: tuple[int, dict[str, str]]


class ForeignHandler(http.server.BaseHTTPRequestHandler):
    server: Foreign

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self.server.seen.append(self.headers.get("Authorization"))
        code, headers = self.server.answer
        self.send_response(code)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def foreign() -> Iterator[Foreign]:
    running = Foreign(("127.0.0.1", 0), ForeignHandler)
    running.seen, running.answer = [], (200, {})
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield running
    running.shutdown()
    running.server_close()


class Redirecting(Handler):
    def do_GET(self) -> None:  # noqa: N802 (anonymous reads allowed, as public repositories)
        self._record()
        self._answer(307, {"Location": self.server.location})


def test_a_host_redirected_to_cannot_harvest_the_credentials_with_its_own_challenge(
        server: Recorder, foreign: Foreign) -> None:
    """The blob store a registry redirects to answers 401 naming a token service of its
    own: the registry's credentials must not go there (nor to the blob store)."""
    harvester = Foreign(("127.0.0.1", 0), ForeignHandler)
    harvester.seen, harvester.answer = [], (200, {})
    threading.Thread(target=harvester.serve_forever, daemon=True).start()
    try:
        server.RequestHandlerClass = Redirecting
        server.location = f"http://127.0.0.1:{foreign.server_port}/blob"
        foreign.answer = (401, {"WWW-Authenticate": f'Bearer realm="http://127.0.0.1:'
                                f'{harvester.server_port}/token",service="x"'})
        with pytest.raises(RegistryUnreachable):
            _client(server, push=False).blob("sha256:" + "0" * 64, 2, io.BytesIO())
    finally:
        harvester.shutdown()
        harvester.server_close()
    assert CREDENTIAL not in str(harvester.seen) and CREDENTIAL not in str(foreign.seen)


def test_a_plain_http_token_service_is_refused_for_an_https_registry(
        foreign: Foreign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry reached over https naming a token service on plain http (loopback: any
    local process may listen there) would send its credentials in clear to that port."""
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps(
        {"auths": {"registry.example": {"auth": CREDENTIAL}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    client = oci.Client(oci.Endpoint("registry.example", "https"), "team/x", "snapshot t",
                        unreachable=RegistryUnreachable, refused=ArchiveRefused)
    foreign.answer = (200, {})
    with pytest.raises(RegistryUnreachable, match="is not https"):
        client._authorize(f'Bearer realm="http://127.0.0.1:{foreign.server_port}/token"')
    assert foreign.seen == []


def test_a_blob_shorter_than_named_is_refused(server: Recorder) -> None:
    server.blob = b"x" * 10
    right = "sha256:" + hashlib.sha256(server.blob).hexdigest()
    with pytest.raises(ArchiveRefused, match="10 of the 50 bytes"):
        _client(server, push=False).blob(right, 50, io.BytesIO())


@pytest.mark.parametrize("where", ["file:///etc/passwd", "http://169.254.169.254/latest",
                                   "ftp://127.0.0.1/x", "gopher://127.0.0.1/x"])
def test_a_redirect_to_another_scheme_or_off_loopback_is_never_fetched(
        server: Recorder, where: str) -> None:
    server.RequestHandlerClass = Redirecting
    server.location = where
    with pytest.raises(RegistryUnreachable, match="answered 30"):
        _client(server, push=False).blob("sha256:" + "0" * 64, 2, io.BytesIO())


class Echoing(Handler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self._record()
        if self._authorized():
            told = self.headers.get("Authorization", "")
            plain = base64.b64decode(told.split()[-1]).decode()
            body = json.dumps({"errors": [{"code": "DENIED",
                                           "message": f"{told} {plain}"}]}).encode()
            self.send_response(403, f"no {plain}")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)


def test_credentials_a_registry_echoes_in_its_error_are_not_printed(server: Recorder) -> None:
    server.RequestHandlerClass = Echoing
    with pytest.raises(RegistryUnreachable) as refused:
        _client(server, push=False).blob("sha256:" + "0" * 64, 2, io.BytesIO())
    assert "403" in str(refused.value) and "DENIED" in str(refused.value)
    assert CREDENTIAL not in str(refused.value) and "s3cret" not in str(refused.value)


def test_a_token_with_a_line_break_is_refused_not_a_traceback(
        server: Recorder, foreign: Foreign) -> None:
    """A token service's token goes into a header: one with CR/LF is refused in words."""
    class Bearer(Handler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self._record()
            self._answer(401, {"WWW-Authenticate": f'Bearer realm="http://127.0.0.1:'
                               f'{foreign.server_port}/token"'})

    class Token(ForeignHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"token": "abc\r\nX-Injected: 1"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server.RequestHandlerClass = Bearer
    foreign.RequestHandlerClass = Token
    with pytest.raises(RegistryUnreachable, match="token"):
        _client(server, push=False).blob("sha256:" + "0" * 64, 2, io.BytesIO())


def test_an_upload_location_with_control_characters_is_refused_not_a_traceback(
        server: Recorder) -> None:
    server.location = "/v2/team/x/blobs/uploads/u1?state=a\x7fb c"
    with pytest.raises(RegistryUnreachable):
        upload = _client(server).upload()
        upload.write(b"x")
        upload.commit()
