"""A real image registry for tests: Debian's docker-registry (the CNCF distribution registry)
on 127.0.0.1 at a free port, its storage in the test's temporary directory, optionally behind
htpasswd (bcrypt) authentication.

The engine pushes to and pulls from 127.0.0.0/8 registries over plain HTTP by default. Images
are put there by tagging DevCell's base image (or a variant of it) under the registry's
address, pushing, and removing that local tag, so only the registry has them. Teardown removes
exactly what the test made: tags under this registry's address (and DevCell's own test
containers made from them), never anything else on the engine.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.backends.engine import IMAGE, in_ci, require_engine
from tests.processes import child_setup, end

BINARY = "docker-registry"
USER, PASSWORD = "devcell-test", "s3cret-pass"


def require_registry() -> str:
    """The registry's binary, or a failure (CI) / skip (a developer machine) naming the fix."""
    found = shutil.which(BINARY) or shutil.which(BINARY, path="/usr/bin:/usr/sbin")
    if found:
        return found
    why = "Debian's docker-registry is not installed (scripts/test installs it as root)"
    if in_ci():
        pytest.fail(f"CI needs {why}", pytrace=False)
    pytest.skip(why)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    address: str
    process: subprocess.Popen[bytes]
    auth: bool
    log: Path

    def ref(self, name: str, tag: str = "1") -> str:
        return f"{self.address}/{name}:{tag}"

    def push(self, ref: str, *, version: str | None = None) -> str:
        """Put an image at `ref` in the registry only; returns the digest it is served by.

        Without `version` it is the base image; with one, a variant whose config differs (an
        ENV naming the version), so its digest differs too. The engine's own tag `ref` is
        never touched (as when someone pushes from another machine): the image is pushed
        under a staging tag of the same repository, whose manifest the registry is then asked
        to serve under `ref`'s tag too (the distribution API's manifest PUT).
        """
        import docker

        client = docker.from_env(timeout=120)
        repository, _, tag = ref.rpartition(":")
        staging = f"devcell-staging-{secrets.token_hex(6)}"
        try:
            if version is None:
                client.api.tag(IMAGE, repository, staging)
            else:
                from devcell.backends.container import base_image

                client.api.import_image_from_data(
                    base_image.rootfs_tar(), repository=repository, tag=staging,
                    changes=['CMD ["/bin/sh"]', "WORKDIR /workspace",
                             f"ENV DEVCELL_TEST_IMAGE_VERSION={version}"])
            auth = {"username": USER, "password": PASSWORD} if self.auth else None
            digest = None
            for event in client.api.push(repository, tag=staging, stream=True, decode=True,
                                         auth_config=auth):
                if "error" in event:
                    raise AssertionError(f"push of {ref} failed: {event['error']}")
                aux = event.get("aux") or {}
                digest = aux.get("Digest", digest)
            client.api.remove_image(f"{repository}:{staging}")  # only the registry has it
        finally:
            client.close()
        assert digest, f"the registry gave no digest for {ref}"
        self._retag(repository.removeprefix(self.address + "/"), staging, tag)
        return str(digest)

    def _retag(self, name: str, source: str, target: str) -> None:
        media = "application/vnd.docker.distribution.manifest.v2+json"
        headers = {"Accept": media}
        if self.auth:
            token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        base = f"http://{self.address}/v2/{name}/manifests/"
        with urllib.request.urlopen(urllib.request.Request(base + source, headers=headers),
                                    timeout=30) as got:
            body, kind = got.read(), got.headers.get("Content-Type", media)
        put = urllib.request.Request(base + target, data=body, method="PUT",
                                     headers={**headers, "Content-Type": kind})
        urllib.request.urlopen(put, timeout=30).close()

    def _headers(self) -> dict[str, str]:
        if not self.auth:
            return {}
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def _blob(self, name: str, data: bytes) -> str:
        """Upload `data` as a blob of repository `name` (the distribution API's monolithic
        upload: POST, then PUT with its digest); its digest."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = urllib.request.Request(f"http://{self.address}/v2/{name}/blobs/uploads/",
                                       data=b"", method="POST", headers=self._headers())
        with urllib.request.urlopen(start, timeout=30) as got:
            location = got.headers["Location"]
        if location.startswith("/"):
            location = f"http://{self.address}{location}"
        glue = "&" if "?" in location else "?"
        put = urllib.request.Request(f"{location}{glue}digest={digest}", data=data,
                                     method="PUT", headers={
                                         **self._headers(),
                                         "Content-Type": "application/octet-stream"})
        urllib.request.urlopen(put, timeout=30).close()
        return digest

    def push_feature(self, name: str, tag: str, files: dict[str, str]) -> str:
        """Push a Dev Container Feature (`files`: devcontainer-feature.json, install.sh, ...)
        as the specification's OCI artifact: a manifest with one layer of type
        application/vnd.devcontainers.layer.v1+tar holding the files; its digest. `name` is
        the repository (devcontainers/features/node), served at this registry's address."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            for path, text in sorted(files.items()):
                data = text.encode()
                info = tarfile.TarInfo(f"./{path}")
                info.size = len(data)
                info.mode = 0o755 if path.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
        layer = out.getvalue()
        config = b"{}"
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.devcontainers", "size": len(config),
                       "digest": self._blob(name, config)},
            "layers": [{"mediaType": "application/vnd.devcontainers.layer.v1+tar",
                        "size": len(layer), "digest": self._blob(name, layer),
                        "annotations": {"org.opencontainers.image.title": "feature.tgz"}}],
        }
        body = json.dumps(manifest).encode()
        put = urllib.request.Request(
            f"http://{self.address}/v2/{name}/manifests/{tag}", data=body, method="PUT",
            headers={**self._headers(),
                     "Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        urllib.request.urlopen(put, timeout=30).close()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def push_artifact(self, name: str, tag: str, *, config: bytes, config_type: str,
                      layers: list[tuple[str, bytes]], artifact_type: str | None = None) -> str:
        """Push an OCI artifact of exactly these blobs (as a hostile publisher could), by the
        distribution API; its manifest's digest."""
        manifest: dict[str, Any] = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": config_type, "size": len(config),
                       "digest": self._blob(name, config)},
            "layers": [{"mediaType": media, "size": len(data), "digest": self._blob(name, data)}
                       for media, data in layers]}
        if artifact_type:
            manifest["artifactType"] = artifact_type
        body = json.dumps(manifest).encode()
        put = urllib.request.Request(
            f"http://{self.address}/v2/{name}/manifests/{tag}", data=body, method="PUT",
            headers={**self._headers(),
                     "Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        urllib.request.urlopen(put, timeout=30).close()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def blob_file(self, digest: str) -> Path:
        """Where the registry's storage keeps blob `digest` (a test damages it there)."""
        hexa = digest.removeprefix("sha256:")
        return (self.log.parent / "storage" / "docker" / "registry" / "v2" / "blobs" /
                "sha256" / hexa[:2] / hexa / "data")

    def login(self, docker_config: Path) -> None:
        """`docker login` into this registry with a private DOCKER_CONFIG (never ~/.docker)."""
        docker_config.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["docker", "--config", str(docker_config), "login", "-u", USER, "--password-stdin",
             self.address], input=PASSWORD.encode(), capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()

    def local_images(self) -> list[dict[str, Any]]:
        """The engine's images tagged under this registry's address."""
        import docker

        client = docker.from_env(timeout=60)
        try:
            return [i for i in client.api.images(all=True) if self._ours(i)]
        finally:
            client.close()

    def _ours(self, info: dict[str, Any]) -> bool:
        names = [*(info.get("RepoTags") or []), *(info.get("RepoDigests") or [])]
        return any(n.startswith(self.address + "/") for n in names)

    def remove_local(self) -> None:
        """Remove every tag under this registry's address, and DevCell's test containers
        made from those images first (nothing else on the engine is touched)."""
        import docker

        client = docker.from_env(timeout=60)
        try:
            for info in self.local_images():
                for c in client.api.containers(all=True, filters={
                        "ancestor": info["Id"], "label": ["dev.devcell.managed=true"]}):
                    client.api.remove_container(c["Id"], force=True)
                tags = [t for t in info.get("RepoTags") or [] if t != "<none>:<none>"]
                if not tags:  # untagged (a newer pull took its tag): only ours named it
                    client.api.remove_image(info["Id"], force=True)
                for tag in tags:
                    if tag.startswith(self.address + "/"):
                        client.api.remove_image(tag, force=True)
        finally:
            client.close()

    def stop(self) -> None:
        self.remove_local()
        end(self.process)


def _config(storage: Path, port: int, htpasswd: Path | None) -> str:
    lines = ["version: 0.1", "log:", "  level: error", "storage:", "  filesystem:",
             f"    rootdirectory: {storage}", "  delete:", "    enabled: true", "http:",
             f"  addr: 127.0.0.1:{port}"]
    if htpasswd is not None:
        lines += ["auth:", "  htpasswd:", "    realm: devcell-test", f"    path: {htpasswd}"]
    return "\n".join(lines) + "\n"


def _htpasswd(directory: Path) -> Path:
    tool = shutil.which("htpasswd")
    if tool is None:
        why = "htpasswd is not installed (apache2-utils; scripts/test installs it as root)"
        if in_ci():
            pytest.fail(f"CI needs {why}", pytrace=False)
        pytest.skip(why)
    made = subprocess.run([tool, "-Bbn", USER, PASSWORD], capture_output=True, check=True)
    path = directory / "htpasswd"
    path.write_bytes(made.stdout)
    return path


def start(directory: Path, *, auth: bool = False) -> Registry:
    """A registry serving from `directory` on a free 127.0.0.1 port, answering when returned."""
    require_engine()
    binary = require_registry()
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = directory / "config.yml"
    config.write_text(_config(directory / "storage", port, _htpasswd(directory) if auth else None))
    log = directory / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=out,
                                   stderr=subprocess.STDOUT, preexec_fn=child_setup)
    registry = Registry(f"127.0.0.1:{port}", process, auth, log)
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"http://{registry.address}/v2/", timeout=2).close()
            return registry
        except urllib.error.HTTPError as exc:  # 401 from an auth registry: it is up
            if exc.code == 401:
                return registry
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            end(process)
            raise AssertionError(f"docker-registry did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """An open registry (no authentication) for this test."""
    running = start(tmp_path / "registry")
    yield running
    running.stop()


@pytest.fixture
def auth_registry(tmp_path: Path) -> Iterator[Registry]:
    """A registry that asks for a user and password (htpasswd, bcrypt) for this test."""
    running = start(tmp_path / "auth-registry", auth=True)
    yield running
    running.stop()


def closed_port_ref(name: str = "devcell-test/nothing") -> str:
    """An image reference at a 127.0.0.1 port where nothing listens (an unreachable registry)."""
    return f"127.0.0.1:{free_port()}/{name}:1"
