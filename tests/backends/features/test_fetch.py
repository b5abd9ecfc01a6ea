"""Remote features fetched for real: an OCI artifact pushed to a local registry (Debian's
docker-registry on 127.0.0.1) by the distribution API, served for ghcr.io through
images.registryMirrors, with and without credentials; a tarball URL from a loopback HTTP
server. Each is cached by digest and its tag pinned, so a second resolve asks nothing."""

from __future__ import annotations

import http.server
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcell.backends.features import fetch, registry
from devcell.errors import ImageBuildFailed
from tests.registry import Registry, start

FILES = {"devcontainer-feature.json": json.dumps({"id": "hello", "version": "1.0.0"}),
         "install.sh": "#!/bin/sh\necho hello\n"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    running = start(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


def test_an_oci_feature_is_fetched_through_the_mirror_and_pinned(
        served: Registry, tmp_path: Path) -> None:
    served.push_feature("devcontainers/features/hello", "1", FILES)
    store = fetch.Store(tmp_path, {"ghcr.io": served.address})
    found = store.resolve("ghcr.io/devcontainers/features/hello:1", "hello")
    assert found.feature.id == "hello"
    assert (Path(found.folder) / "install.sh").read_text() == FILES["install.sh"]
    assert found.digest.startswith("sha256:")
    unpacked = tmp_path / "features" / "unpacked"
    assert (unpacked.stat().st_mode & 0o777) == 0o700
    # The tag is pinned: a new push under it changes nothing until the reference does.
    served.push_feature("devcontainers/features/hello", "1",
                        {**FILES, "install.sh": "#!/bin/sh\necho changed\n"})
    again = store.resolve("ghcr.io/devcontainers/features/hello:1", "hello")
    assert again.digest == found.digest


def test_a_digest_reference_is_checked(served: Registry, tmp_path: Path) -> None:
    digest = served.push_feature("devcontainers/features/pinned", "1", FILES)
    store = fetch.Store(tmp_path, {"ghcr.io": served.address})
    found = store.resolve(f"ghcr.io/devcontainers/features/pinned@{digest}", "pinned")
    assert found.feature.id == "hello"
    wrong = "sha256:" + "0" * 64
    with pytest.raises(ImageBuildFailed, match="has no manifest|digest"):
        store.resolve(f"ghcr.io/devcontainers/features/pinned@{wrong}", "pinned")


def test_a_missing_feature_and_an_unreachable_registry_say_so(served: Registry,
                                                              tmp_path: Path) -> None:
    store = fetch.Store(tmp_path, {"ghcr.io": served.address, "example.com": "127.0.0.1:9"})
    with pytest.raises(ImageBuildFailed, match="has no manifest 1 of devcontainers/nope"):
        store.resolve("ghcr.io/devcontainers/nope:1", "nope")
    with pytest.raises(registry.FeatureFetchFailed, match="cannot reach the registry"):
        store.resolve("example.com/features/x:1", "x")


def test_credentials_come_from_the_docker_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = start(tmp_path / "auth", auth=True)
    try:
        locked.push_feature("features/secret", "1", FILES)
        (tmp_path / "state").mkdir()
        store = fetch.Store(tmp_path / "state", {})
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
        with pytest.raises(registry.FeatureFetchFailed, match="docker login"):
            store.resolve(f"{locked.address}/features/secret:1", "secret")
        locked.login(tmp_path / "docker")
        assert store.resolve(f"{locked.address}/features/secret:1", "secret").feature.id \
            == "hello"
    finally:
        locked.stop()


def test_a_tarball_url_is_fetched_once(tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    body = out.getvalue()
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hello.tgz"
        store = fetch.Store(tmp_path)
        first = store.resolve(url, "hello")
        second = store.resolve(url, "hello")
        assert first.digest == second.digest and first.feature.id == "hello"
        assert asked == ["/hello.tgz"]
        # Unused for a month: gc drops it and its pin; the next resolve fetches again.
        assert store.prune() == []
        kept = tmp_path / "features" / "unpacked" / first.digest.replace(":", "-")
        os.utime(kept, (0, 0))
        assert store.prune() == [f"feature {kept.name}"]
        assert not kept.exists() and list((tmp_path / "features" / "pins").iterdir()) == []
        assert store.resolve(url, "hello").digest == first.digest
        assert asked == ["/hello.tgz", "/hello.tgz"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_to_plain_http_off_loopback_is_refused(tmp_path: Path) -> None:
    """http is trusted only on loopback: a loopback server (or a mirror) redirecting to plain
    http elsewhere would hand install.sh, run as root in the build, to the network.
    0.0.0.0 is not a loopback address, yet reaching it stays on this host."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            asked.append(self.path)
            self.send_response(302)
            self.send_header("Location", f"http://0.0.0.0:{self.server.server_port}/moved.tgz")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(registry.FeatureFetchFailed, match="plain http"):
            fetch.Store(tmp_path).resolve(
                f"http://127.0.0.1:{server.server_port}/hello.tgz", "hello")
        assert asked == ["/hello.tgz"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_sending_slowly_is_stopped_in_time(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read has its own time limit; a byte now and then must not hold a build for ever."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    monkeypatch.setattr(registry, "FETCH_SECONDS", 0.5)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        began = time.monotonic()
        with pytest.raises(registry.FeatureFetchFailed, match="took longer than 0.5s"):
            fetch.Store(tmp_path).resolve(
                f"http://127.0.0.1:{server.server_port}/slow.tgz", "slow")
        assert time.monotonic() - began < 4
    finally:
        server.shutdown()
        server.server_close()
