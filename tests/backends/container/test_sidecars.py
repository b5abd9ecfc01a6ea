"""A cell with a sidecar and a named volume, on the real engine through the CLI (issue 29).

One cell is shared by the module (its apply, a build included, costs ~5 s): an app service
and a "database" sidecar built FROM the base image, whose own command serves a counter on
127.0.0.1:8080 and appends a row to its data volume every 0.1 s, beside a named cache
volume. The tests run in order on it: both run in
one network namespace, a snapshot taken while both write holds the sidecar's data (its
preCheckpoint hook ran, its postCheckpoint not yet) and a fork's sidecar starts with it (and
a fork of its export, imported), a
sidecar killed behind DevCell's back makes the cell not Ready until `cell restart`, sleep
and start keep the data, delete removes every container and volume labelled for the cells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import REPO

SIDECAR = ("printf 'db up\\033[31m\\n'; dd if=/dev/zero of=/dev/shm/held bs=1M count=16 2>/dev/null; "
           "mkdir -p /data/www; httpd -p 127.0.0.1:8080 -h /data/www; n=0; "
           "while true; do n=$((n+1)); echo $n > /data/www/c; mv /data/www/c /data/www/count; "
           "echo $n >> /data/rows; "
           "sleep 0.1; done")
MANIFEST = textwrap.dedent(f"""\
    apiVersion: devcell.dev/v1alpha1
    kind: Cell
    metadata: {{name: app}}
    spec:
      backend: container
      image: {IMAGE}
      network: {{mode: none}}
      services:
        - {{name: writer, command: [sh, -c, "while true; do date >> /workspace/app.log; sleep 0.1; done"]}}
      volumes:
        - {{name: cache, mountPath: /root/.cache}}
      sidecars:
        - name: db
          build: {{context: db}}
          volume: {{mountPath: /data}}
          resources: {{cpus: 0.5, memory: 64Mi}}
          hooks:
            preCheckpoint: [[sh, -c, "echo pre >> /data/hooks"]]
            postCheckpoint: [[sh, -c, "echo post >> /data/hooks"]]
    """)


class Shared:
    def __init__(self, state: Path) -> None:
        self.state = state

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, DEVCELL_HOME=str(self.state))
        env.pop("DEVCELL_FAKE_FAIL", None)
        return subprocess.run([sys.executable, "-m", "devcell", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=timeout)

    def ok(self, *args: str) -> str:
        done = self(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def cell(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.ok("get", "cell", name, "-o", "json"))
        return found

    def data(self, name: str) -> Path:
        """The sidecar db's data directory of cell `name` on the host."""
        volumes = self.state / "volumes"
        for marker in volumes.glob("*/volume.json"):
            if json.loads(marker.read_text())["cell"] == name:
                return marker.parent / "sidecars" / "db"
        raise AssertionError(f"no volume of cell {name}")


def _count(shared: Shared, cell: str) -> int:
    """What the cell reads from its sidecar's server on 127.0.0.1 (retried while a sidecar
    just started has not written its first count)."""
    deadline = time.monotonic() + 10
    while True:
        done = shared("exec", cell, "--", "wget", "-qO-", "http://127.0.0.1:8080/count")
        if done.returncode == 0 and done.stdout.strip().isdigit():
            return int(done.stdout)
        assert time.monotonic() < deadline, (done.stdout, done.stderr)
        time.sleep(0.2)


def _rows(path: Path) -> list[int]:
    return [int(line) for line in (path / "rows").read_text().split()]


def _engine(state: Path, what: str) -> list[dict[str, Any]]:
    import docker

    client = docker.from_env()
    try:
        label = f"dev.devcell.state-dir={state_hash(state)}"
        if what == "containers":
            found: list[dict[str, Any]] = client.api.containers(
                all=True, filters={"label": [label]})
        elif what == "images":
            found = [i for i in client.api.images(filters={"label": label})
                     if any(t.startswith("devcell-build/") for t in i.get("RepoTags") or [])]
        else:
            found = (client.api.volumes(filters={"label": label}) or {}).get("Volumes") or []
        return found
    finally:
        client.close()


def _inspect(container_id: str) -> dict[str, Any]:
    import docker

    client = docker.from_env()
    try:
        found: dict[str, Any] = client.api.inspect_container(container_id)
        return found
    finally:
        client.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    require_engine()
    root = tmp_path_factory.mktemp("sidecars")
    (root / "app.yaml").write_text(MANIFEST)
    (root / "db").mkdir()
    (root / "db" / "Dockerfile").write_text(
        f"FROM {IMAGE}\nCMD {json.dumps(['sh', '-c', SIDECAR])}\n")
    run = Shared(root / "state")
    try:
        run.ok("apply", "-f", str(root / "app.yaml"))
        yield run
    finally:
        remove_containers(run.state)
        _remove_builds(run.state)  # what a failed test left: its delete removes them


def _remove_builds(state: Path) -> None:
    import docker

    client = docker.from_env()
    try:
        for image in _engine(state, "images"):
            for tag in image.get("RepoTags") or []:
                client.api.remove_image(tag)
    finally:
        client.close()


def test_the_cell_reaches_its_sidecar_on_loopback_and_both_are_labelled_devcells(
        shared: Shared) -> None:
    assert _count(shared, "app") > 0
    containers = {c["Names"][0].lstrip("/"): c for c in _engine(shared.state, "containers")}
    (sidecar,) = [c for c in containers.values() if c["Labels"].get("dev.devcell.sidecar")]
    (own,) = [c for c in containers.values() if c["Labels"].get("dev.devcell.cell-id")]
    labels = sidecar["Labels"]
    assert labels["dev.devcell.sidecar"] == "db" and labels["dev.devcell.cell"] == "app"
    assert labels["dev.devcell.sidecar-of"] == own["Labels"]["dev.devcell.cell-id"]
    assert labels["dev.devcell.cell-id"] == ""  # never taken for the cell's own container
    assert sidecar["HostConfig"]["NetworkMode"] == f"container:{own['Id']}"
    assert sidecar["Image"].startswith("devcell-build/") and ".app.db:" not in sidecar["Image"]
    assert "/app.db:" in sidecar["Image"]  # its own tags: the cell's builds never remove them
    host = _inspect(sidecar["Id"])["HostConfig"]
    assert (host["Memory"], host["NanoCpus"]) == (64 * 2**20, 500_000_000)  # its resources
    # The 16 MiB its /dev/shm holds count in the cell's memory (the cell alone holds ~1 MiB).
    runtimes = [i for i in json.loads(shared.ok("df", "-v", "-o", "json"))["items"]
                if i["type"] == "Runtimes" and i["owner"] == "app"]
    assert runtimes[0]["memoryBytes"] >= 16 * 2**20, runtimes
    (cache,) = _engine(shared.state, "volumes")
    assert cache["Labels"]["dev.devcell.cell-volume"] == "cache"
    wide = shared.ok("get", "cells", "app", "-o", "wide")
    header, row = wide.splitlines()[:2]
    # by the header's position: other values (DIRTY: `1.2 MiB in 3 files`) hold spaces
    at = header.index(" SIDECARS ") + 1
    assert row[at:].split()[0] == "db:running", wide
    described = shared.ok("describe", "cell", "app")
    assert "db: running; data at /data" in described
    assert "cache at /root/.cache" in described


def test_logs_name_the_sidecars_and_show_ones_output_through_the_engine_escaped(
        shared: Shared) -> None:
    cli = shared  # the devcell command, a subprocess each call
    services = cli("logs", "app", "--tail", "1")
    assert services.returncode == 0 and "has sidecars (db)" in services.stderr
    done = cli("logs", "app", "-c", "db", "--timestamps")
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.endswith(" db up\\x1b[31m") and line[:4].isdigit()  # the engine's time
    missing = cli("logs", "app", "--sidecar", "nope")
    assert missing.returncode != 0 and "has no sidecar 'nope' (sidecars: db)" in missing.stderr


def test_a_snapshot_taken_while_both_write_holds_the_sidecars_data_and_a_fork_starts_with_it(
        shared: Shared) -> None:
    shared.ok("exec", "app", "--", "sh", "-c", "echo cached > /root/.cache/mark")
    shared.ok("snapshot", "create", "app", "--name", "s1")
    snap = json.loads(shared.ok("get", "snapshot", "s1", "-o", "json"))
    saved = Path(snap["status"]["checkpoint"]["checkpoint"]) / "sidecars" / "db"
    rows = _rows(saved)
    assert rows == list(range(1, len(rows) + 1))  # a consistent prefix, frozen mid-run
    # Its hook ran before the freeze and the postCheckpoint one after: not in the snapshot.
    assert (saved / "hooks").read_text() == "pre\n"
    assert (shared.data("app") / "hooks").read_text() == "pre\npost\n"
    shared.ok("cell", "fork", "app", "--snapshot", "s1", "--name", "app2")
    forked = _rows(shared.data("app2"))
    assert forked[:len(rows)] == rows  # then its own sidecar writes on (from 1 again)
    assert _count(shared, "app2") > 0
    # The cache is not part of a snapshot: the fork has its own, empty.
    missing = shared("exec", "app2", "--", "cat", "/root/.cache/mark")
    assert missing.returncode != 0
    assert shared.ok("exec", "app", "--", "cat", "/root/.cache/mark") == "cached\n"


def test_an_exported_snapshot_carries_the_sidecars_data_and_a_fork_of_its_import_has_it(
        shared: Shared) -> None:
    archive = shared.state.parent / "s1.tar"
    shared.ok("snapshot", "export", "s1", "-o", str(archive))
    imported = shared.ok("snapshot", "import", str(archive), "--name", "moved")
    assert "moved" in imported
    snap = json.loads(shared.ok("get", "snapshot", "s1", "-o", "json"))
    saved = Path(snap["status"]["checkpoint"]["checkpoint"]) / "sidecars" / "db"
    moved = json.loads(shared.ok("get", "snapshot", "moved", "-o", "json"))
    copied = Path(moved["status"]["checkpoint"]["checkpoint"]) / "sidecars" / "db"
    assert _rows(copied) == _rows(saved) and (copied / "hooks").read_text() == "pre\n"
    manifest = shared.state.parent / "app3.yaml"
    manifest.write_text(MANIFEST.replace("{name: app}", "{name: app3}").replace(
        "  volumes:", "  workspace: {from: {snapshot: moved}}\n  volumes:"))
    shared.ok("apply", "-f", str(manifest))
    forked = _rows(shared.data("app3"))
    assert forked[:len(_rows(saved))] == _rows(saved)
    shared.ok("delete", "cell", "app3", "--approve")


def test_a_sidecar_killed_behind_devcells_back_holds_ready_false_until_cell_restart(
        shared: Shared) -> None:
    import docker

    (sidecar,) = [c for c in _engine(shared.state, "containers")
                  if c["Labels"].get("dev.devcell.sidecar") == "db"
                  and c["Labels"]["dev.devcell.cell"] == "app"]
    client = docker.from_env()
    try:
        client.api.kill(sidecar["Id"])  # a kill is a manual stop: the engine leaves it down
    finally:
        client.close()
    shared.ok("wait", "cell", "app", "--for=condition=Ready=False", "--timeout", "30s")
    ready = next(c for c in shared.cell("app")["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SidecarNotRunning"), ready
    assert "sidecar db is not running (Exited" in ready["message"]
    shared.ok("cell", "restart", "app")
    shared.ok("wait", "cell", "app", "--for=condition=Ready", "--timeout", "60s")
    assert "db:running" in shared.ok("get", "cells", "app", "-o", "wide")


def test_sleep_and_start_keep_the_sidecars_data_and_the_cells_volume(shared: Shared) -> None:
    shared.ok("cell", "sleep", "app")
    asleep = [c["State"] for c in _engine(shared.state, "containers")
              if c["Labels"]["dev.devcell.cell"] == "app"]
    assert asleep == ["exited", "exited"]
    before = _rows(shared.data("app"))
    shared.ok("cell", "start", "app")
    deadline = time.monotonic() + 10
    while len(_rows(shared.data("app"))) <= len(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    after = _rows(shared.data("app"))
    assert after[:len(before)] == before and len(after) > len(before)
    assert shared.ok("exec", "app", "--", "cat", "/root/.cache/mark") == "cached\n"
    assert _count(shared, "app") > 0


def test_an_apply_of_the_unchanged_manifest_rebuilds_a_sidecar_whose_dockerfile_changed(
        shared: Shared) -> None:
    manifest = shared.state.parent / "app.yaml"
    assert shared.ok("apply", "-f", str(manifest)).strip() == "cell/app unchanged"
    dockerfile = shared.state.parent / "db" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "LABEL edited=yes\n")
    before = shared.cell("app")["status"]["build"]["sidecars"]["db"]
    diff = shared("diff", "-f", str(manifest))
    assert diff.returncode == 1 and f"-      db: {before}" in diff.stdout, diff
    assert shared.ok("apply", "-f", str(manifest)).strip() == "cell/app rebuilt"
    built = shared.cell("app")["status"]["build"]["sidecars"]["db"]
    (sidecar,) = [c for c in _engine(shared.state, "containers")
                  if c["Labels"].get("dev.devcell.sidecar") == "db"
                  and c["Labels"]["dev.devcell.cell"] == "app"]
    assert sidecar["Image"] == built and sidecar["State"] == "running"
    assert shared.ok("apply", "-f", str(manifest)).strip() == "cell/app unchanged"


def test_delete_removes_every_container_and_volume_labelled_for_the_cells(
        shared: Shared) -> None:
    shared.ok("delete", "cell", "app", "app2", "--approve")
    assert _engine(shared.state, "containers") == []
    assert _engine(shared.state, "volumes") == []
    assert _engine(shared.state, "images") == []  # the sidecar's build too
    assert list((shared.state / "volumes").glob("vol*")) == []
