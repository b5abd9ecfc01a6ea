"""`snapshot push` / `snapshot pull` through a real registry (Debian's docker-registry on
127.0.0.1): a snapshot goes to another state directory and forks there (the fake backend; a
container cell's files on the real engine, byte for byte); a blob damaged in the registry's
storage is refused naming its digest; a hostile artifact is refused with `snapshot import`'s
own words and changes nothing; the engine's credentials are used."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard

from devcell.api import apply as apply_api
from devcell.api import cells, snapshot_registry, transfer
from devcell.backends.container.layout import Layout
from devcell.errors import ArchiveRefused, NotFound, RegistryUnreachable, UsageError
from devcell.store import objects, volumes
from devcell.store.db import open_database
from tests.backends.archive_support import ROOT, craft, make_tree, member, tree_state
from tests.backends.engine import IMAGE, remove_containers
from tests.registry import Registry, start

FAKE = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell",
        "metadata": {"name": "api", "labels": {"team": "core"}},
        "spec": {"backend": "fake", "image": "devcell/busybox:latest"}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """One registry for the module (starting one costs ~0.3 s); each test its own repository."""
    running = start(tmp_path_factory.mktemp("registry"))
    yield running
    running.stop()


def _fork(name: str, snapshot: str, backend: str = "fake") -> dict[str, Any]:
    spec: dict[str, Any] = {"backend": backend, "image": "devcell/busybox:latest"
                            if backend == "fake" else IMAGE,
                            "workspace": {"from": {"snapshot": snapshot}}}
    if backend == "container":
        spec.update(network={"mode": "none"},
                    services=[{"name": "idle", "command": ["sleep", "600"]}])
    return {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": name},
            "spec": spec}


@pytest.fixture
def source(tmp_path: Path, write: Any) -> Path:
    state = tmp_path / "source"
    apply_api.apply(state, [write("cell.yaml", FAKE)])
    assert cells.snapshot(state, "api", name="before").ok
    return state


def test_push_then_pull_elsewhere_then_fork(served: Registry, source: Path, tmp_path: Path,
                                            write: Any) -> None:
    ref = served.ref("team/fake-snaps", "v1")
    pushed = snapshot_registry.push(source, "before", ref)
    assert pushed.ref == ref and pushed.digest.startswith("sha256:")
    target = tmp_path / "target"
    pulled = snapshot_registry.pull(target, ref)
    assert pulled.digest == pushed.digest and pulled.imported.backend == "fake"
    db = open_database(target)
    snap = objects.require(db.conn, "Snapshot", "before")
    assert snap.phase == "Ready"
    origin = snap.status["origin"]
    assert origin["pulledFrom"] == f"{ref}@{pushed.digest}" and origin["cell"] == "api"
    ops = db.conn.execute("SELECT action, status FROM operations WHERE object_id = ?",
                          (snap.id,)).fetchall()
    assert [tuple(r) for r in ops] == [("pull", "Succeeded")]
    db.close()
    db = open_database(source)
    row = db.conn.execute("SELECT s.outputs FROM operations o JOIN operation_steps s ON "
                          "s.op_id = o.id WHERE o.action = 'push'").fetchone()
    db.close()
    assert json.loads(row[0])["digest"] == pushed.digest
    report = apply_api.apply(target, [write("fork.yaml", _fork("moved", "before"))])
    assert report.ok, report
    # by digest too, under another name
    again = snapshot_registry.pull(target, f"{served.address}/team/fake-snaps@{pushed.digest}",
                                   name="again")
    assert again.imported.name == "again"


def test_the_artifact_is_an_oci_artifact_of_devcells_types(served: Registry,
                                                           source: Path) -> None:
    ref = served.ref("team/shape", "v1")
    snapshot_registry.push(source, "before", ref, compression="none")
    from urllib.request import Request, urlopen

    url = f"http://{served.address}/v2/team/shape/manifests/v1"
    with urlopen(Request(url, headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}),
                 timeout=10) as got:
        manifest = json.loads(got.read())
    assert manifest["artifactType"] == snapshot_registry.ARTIFACT_TYPE
    assert manifest["config"]["mediaType"] == snapshot_registry.CONFIG_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [snapshot_registry.LAYER_TAR]
    config = json.loads(served.blob_file(manifest["config"]["digest"]).read_bytes())
    assert config["snapshot"]["name"] == "before" and config["format"] == "devcell-snapshot"


def test_a_damaged_blob_is_refused_naming_its_digest(served: Registry, source: Path,
                                                     tmp_path: Path) -> None:
    ref = served.ref("team/damaged", "v1")
    pushed = snapshot_registry.push(source, "before", ref)
    data = served.blob_file(pushed.layer)
    body = bytearray(data.read_bytes())
    body[len(body) // 2] ^= 0xFF
    data.write_bytes(bytes(body))
    target = tmp_path / "target"
    with pytest.raises(ArchiveRefused, match=f"blob {pushed.layer} with other content"):
        snapshot_registry.pull(target, ref)
    db = open_database(target)
    assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0
    db.close()


def _hostile(served: Registry, repository: str, archive: bytes, *, compression: str) -> str:
    layer = {"gzip": gzip.compress, "zstd": zstandard.ZstdCompressor().compress,
             "none": bytes}[compression](archive)
    config = json.dumps({"format": "devcell-snapshot", "formatVersion": 1}).encode()
    served.push_artifact(repository, "v1", config=config,
                         config_type=snapshot_registry.CONFIG_TYPE,
                         artifact_type=snapshot_registry.ARTIFACT_TYPE,
                         layers=[(snapshot_registry.COMPRESSIONS[compression], layer)])
    return served.ref(repository, "v1")


def _huge() -> tuple[tarfile.TarInfo, bytes]:
    """A member whose PAX record claims a petabyte (its tar header says 0; one byte follows)."""
    info, data = member("workspace/big", data=b"x")
    info.pax_headers = {**info.pax_headers, "size": str(2**50)}
    return info, data


HOSTILE = {
    "a link out": [ROOT, member("workspace/l", tarfile.SYMTYPE, link="/etc"),
                   member("workspace/l/escaped", data=b"x")],
    "a ../ name": [ROOT, member("workspace/../escaped", data=b"x")],
    "a huge declared size": [ROOT, _huge()],
    "a device": [ROOT, member("workspace/dev", tarfile.CHRTYPE)],
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_a_hostile_artifact_is_refused_with_imports_words(served: Registry, tmp_path: Path,
                                                          what: str) -> None:
    archive = craft(HOSTILE[what])
    with pytest.raises(ArchiveRefused) as imported:
        transfer.import_(tmp_path / "imported", io.BytesIO(archive))
    ref = _hostile(served, f"hostile/h{sorted(HOSTILE).index(what)}",
                   archive, compression=("gzip", "zstd", "none", "zstd")[
                       sorted(HOSTILE).index(what)])
    target = tmp_path / "target"
    with pytest.raises(ArchiveRefused) as pulled:
        snapshot_registry.pull(target, ref)
    free_space = re.compile(r"[0-9]{7,}")  # the disk's free space moves between the two
    assert free_space.sub("N", str(pulled.value)) == free_space.sub("N", str(imported.value))
    assert "nothing imported" in str(pulled.value)
    db = open_database(target)
    assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0
    assert db.conn.execute("SELECT count(*) FROM operations").fetchone()[0] == 0
    db.close()
    checkpoints = target / "backends" / "container" / "checkpoints"
    assert not checkpoints.exists() or not any(
        p for p in checkpoints.iterdir() if not p.name.startswith("."))


def test_what_is_not_a_snapshot_is_refused_before_its_layer_is_read(
        served: Registry, tmp_path: Path) -> None:
    served.push_feature("devcontainers/features/hello", "1", {"install.sh": "true\n"})
    with pytest.raises(ArchiveRefused, match="is not a DevCell snapshot"):
        snapshot_registry.pull(tmp_path / "t", served.ref("devcontainers/features/hello", "1"))
    with pytest.raises(ArchiveRefused, match="has no manifest v9 of team/none"):
        snapshot_registry.pull(tmp_path / "t", served.ref("team/none", "v9"))


def test_bad_references_and_snapshots_are_refused(served: Registry, source: Path,
                                                  tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a registry reference"):
        snapshot_registry.push(source, "before", "just-a-name")
    with pytest.raises(UsageError, match="names a tag, not a digest"):
        snapshot_registry.push(source, "before",
                               f"{served.address}/team/x@sha256:{'0' * 64}")
    with pytest.raises(NotFound):
        snapshot_registry.push(source, "nope", served.ref("team/x"))
    with pytest.raises(RegistryUnreachable, match="cannot reach the registry"):
        from tests.registry import closed_port_ref

        snapshot_registry.push(source, "before", closed_port_ref())


def test_the_engines_credentials_are_used(tmp_path: Path, source: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    guarded = start(tmp_path / "guarded", auth=True)
    try:
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-login"))
        with pytest.raises(RegistryUnreachable, match="docker login"):
            snapshot_registry.push(source, "before", guarded.ref("team/private"))
        guarded.login(tmp_path / "docker")
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
        pushed = snapshot_registry.push(source, "before", guarded.ref("team/private"))
        pulled = snapshot_registry.pull(tmp_path / "target", guarded.ref("team/private"))
        assert pulled.digest == pushed.digest
    finally:
        guarded.stop()


# -- the real engine: a container cell's files, byte for byte ------------------------------


def _workspace(state: Path, cell: str) -> Path:
    db = open_database(state)
    try:
        record = objects.require(db.conn, "Cell", cell)
        volume = volumes.for_cell(db.conn, record.id)
        assert volume is not None
        return Layout(state).workspace(volume.id)
    finally:
        db.close()


def test_a_container_cells_files_go_through_the_registry_and_fork(
        served: Registry, tmp_path: Path, write: Any) -> None:
    source, target = tmp_path / "csource", tmp_path / "ctarget"
    try:
        cell = _fork("api", "unused", backend="container")
        del cell["spec"]["workspace"]
        assert apply_api.apply(source, [write("c.yaml", cell)]).ok
        make_tree(_workspace(source, "api"))
        assert cells.snapshot(source, "api", name="before").ok
        db = open_database(source)
        snap_id = objects.require(db.conn, "Snapshot", "before").id
        db.close()
        expected = tree_state(Layout(source).checkpoint(snap_id) / "workspace",
                              strip_setuid=True)
        ref = served.ref("team/container-snaps", "v1")
        snapshot_registry.push(source, "before", ref)
        pulled = snapshot_registry.pull(target, ref, name="moved-from")
        assert tree_state(Layout(target).checkpoint(pulled.imported.id) / "workspace") \
            == expected
        report = apply_api.apply(target, [write("f.yaml", _fork("moved", "moved-from",
                                                                 backend="container"))])
        assert report.ok, report
        fork = _workspace(target, "moved")
        assert tree_state(fork) == {**expected, ".": tree_state(fork)["."]}
    finally:
        for state in (source, target):
            remove_containers(state)


class _Stalling(http.server.ThreadingHTTPServer):
    """A registry serving one artifact whose layer stops halfway (until `whole` is set)."""

    daemon_threads = True
    blobs: dict[str, bytes]
    manifest: bytes
    layer: str
    halfway: threading.Event
    whole: bool


class _StallingHandler(http.server.BaseHTTPRequestHandler):
    server: _Stalling

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if "/manifests/" in self.path:
            body = self.server.manifest
        else:
            body = self.server.blobs.get(self.path.rsplit("/", 1)[-1], b"")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path.endswith(self.server.layer) and not self.server.whole:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.server.halfway.set()
            time.sleep(60)  # the puller is killed meanwhile
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_pull_killed_halfway_records_nothing_and_leaves_no_tree(tmp_path: Path,
                                                                   state_dir: Path) -> None:
    """kill -9 while the layer streams in: no snapshot, no checkpoint tree; a rerun pulls."""
    archive = craft([ROOT, member("workspace/big", data=os.urandom(8 << 20))])
    config = json.dumps({"format": "devcell-snapshot", "formatVersion": 1}).encode()
    digest = {b: "sha256:" + hashlib.sha256(b).hexdigest() for b in (archive, config)}
    running = _Stalling(("127.0.0.1", 0), _StallingHandler)
    running.blobs = {digest[archive]: archive, digest[config]: config}
    running.layer, running.halfway, running.whole = digest[archive], threading.Event(), False
    running.manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": snapshot_registry.ARTIFACT_TYPE,
        "config": {"mediaType": snapshot_registry.CONFIG_TYPE, "digest": digest[config],
                   "size": len(config)},
        "layers": [{"mediaType": snapshot_registry.LAYER_TAR, "digest": digest[archive],
                    "size": len(archive)}]}).encode()
    threading.Thread(target=running.serve_forever, daemon=True).start()
    ref = f"127.0.0.1:{running.server_port}/team/stall:v1"
    env = dict(os.environ, DEVCELL_HOME=str(state_dir))
    try:
        puller = subprocess.Popen([sys.executable, "-m", "devcell", "snapshot", "pull", ref],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert running.halfway.wait(60)
        time.sleep(1.0)  # the first half is being written out
        puller.kill()
        puller.wait()
        db = open_database(state_dir)
        assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 0
        db.close()
        # what was written is only in the killed process's temporary, never in place
        half = _checkpoint_files(state_dir)
        assert half and all(any(part.startswith(".tmp-") for part in p.parts) for p in half)
        running.whole = True
        again = subprocess.run([sys.executable, "-m", "devcell", "snapshot", "pull", ref],
                               env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        # the rerun removed the dead puller's half tree: only the pulled snapshot's is left
        kept = _checkpoint_files(state_dir)
        assert len({p.parts[:3] for p in kept}) == 1 and not any(".tmp-" in str(p)
                                                                 for p in kept), kept
    finally:
        running.shutdown()
        running.server_close()


def _checkpoint_files(state_dir: Path) -> list[Path]:
    return sorted(p.relative_to(state_dir) for p in state_dir.rglob("*")
                  if "checkpoints" in p.parts and p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("verb", ["push", "pull"])
def test_a_reference_holding_a_password_is_refused_without_echoing_it(tmp_path: Path,
                                                                     verb: str) -> None:
    text = "someone:s3cret@127.0.0.1:5000/team/x:v1"
    with pytest.raises(UsageError) as refused:
        if verb == "push":
            snapshot_registry.push(tmp_path / "s", "snap", text)
        else:
            snapshot_registry.pull(tmp_path / "s", text)
    assert "s3cret" not in str(refused.value) and "docker login" in str(refused.value)
