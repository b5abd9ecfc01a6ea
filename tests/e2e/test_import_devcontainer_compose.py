"""A Docker Compose based devcontainer.json imported and applied on the real engine: the app
service becomes the cell, the database service its sidecar (both built FROM the test base
image), and the sidecar's data volume goes with the cell: snapshotted while both write,
forked (the fork's sidecar starts with the snapshot's data), slept and started (its data
kept). One cell family, one test: its cost is in the report of the compose helper."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import Cli

pytestmark = pytest.mark.e2e

DB_PORT = 8081
"""Where the database sidecar serves its data directory, inside the cell's network
namespace (the cell reaches it on 127.0.0.1: no network leaves the cell)."""
Log = list[tuple[str, int]]
"""The sidecar's log: (the token of the run that wrote the line, its count in that run)."""


@pytest.fixture
def engine_state(state_dir: Path) -> Iterator[Path]:
    require_engine()
    yield state_dir
    remove_containers(state_dir)
    import docker

    client = docker.from_env(timeout=120)
    try:
        for image in client.api.images(filters={
                "label": [f"dev.devcell.state-dir={state_hash(state_dir)}"]}):
            client.api.remove_image(image["Id"], force=True)
    finally:
        client.close()


def _project(root: Path) -> Path:
    """The app and its database as the specification's compose template lays them out."""
    folder = root / ".devcontainer"
    folder.mkdir(parents=True)
    (folder / "devcontainer.json").write_text(textwrap.dedent("""\
        {
          "name": "shop",
          "dockerComposeFile": "docker-compose.yml",
          "service": "app",
          "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
          "shutdownAction": "stopCompose",
        }
        """))
    (folder / "Dockerfile").write_text(f"FROM {IMAGE}\n")
    (folder / "db.Dockerfile").write_text(f"FROM {IMAGE}\nRUN mkdir -p /var/lib/db\n")
    (folder / "docker-compose.yml").write_text(textwrap.dedent(f"""\
        services:
          app:
            build: {{context: ., dockerfile: Dockerfile}}
            volumes: ["../..:/workspaces:cached"]
            network_mode: service:db
            command: ["sh", "-c", "while true; do date >> /workspaces/shop/app.log; sleep 0.2;
              done"]
          db:
            build: {{context: ., dockerfile: db.Dockerfile}}
            restart: unless-stopped
            volumes: [db-data:/var/lib/db]
            command:
              - sh
              - -c
              - |
                token=$$(cat /proc/sys/kernel/random/uuid)
                httpd -p {DB_PORT} -h /var/lib/db
                i=0
                while true; do i=$$((i+1)); echo "$$token $$i" >> /var/lib/db/log; sleep 0.2; done
        volumes:
          db-data:
        """))
    return folder / "devcontainer.json"


def _db_log(cli: Cli, cell: str) -> Log:
    """The sidecar's log as (token of the run that wrote it, count), read from the cell
    through their shared network (empty while the sidecar's server is not up yet)."""
    got = cli("exec", cell, "--", "wget", "-qO-", f"http://127.0.0.1:{DB_PORT}/log")
    if got.returncode != 0:
        return []
    return [(token, int(n)) for token, n in (line.split() for line in got.stdout.splitlines())]


def _until(read: Callable[[], Log], check: Callable[[Log], bool], seconds: float = 20.0
           ) -> Log:
    deadline = time.monotonic() + seconds
    while True:
        found = read()
        if check(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _ready(cli: Cli, name: str) -> None:
    waited = cli("wait", "cell", name, "--for=condition=Ready", "--timeout", "60s")
    assert waited.returncode == 0, waited.stdout + waited.stderr


def test_a_compose_devcontainer_with_a_database_sidecar_is_snapshotted_forked_and_slept(
        cli: Cli, tmp_path: Path, engine_state: Path) -> None:
    _project(tmp_path / "shop")
    imported = cli("import", "devcontainer", "-o", "cell.yaml", cwd=tmp_path / "shop")
    assert imported.returncode == 0, imported.stderr
    assert "compose: service app is the cell (its command, " in imported.stderr
    assert "services.app.command, runs as the cell's service main); sidecars: db" \
        in imported.stderr
    applied = cli("apply", "-f", str(tmp_path / "shop" / "cell.yaml"))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    _ready(cli, "shop")

    def runs(log: Log) -> list[str]:
        return list(dict.fromkeys(token for token, _ in log))

    before = _until(lambda: _db_log(cli, "shop"), lambda log: len(log) >= 3)
    assert len(before) >= 3
    app = cli("exec", "shop", "--", "sh", "-c", "wc -l < /workspaces/shop/app.log")
    assert int(app.stdout) >= 1, app.stderr

    snapped = cli("snapshot", "create", "shop", "--name", "shop-1")
    assert snapped.returncode == 0, snapped.stdout + snapped.stderr
    after = _db_log(cli, "shop")  # the source keeps writing past the snapshot
    forked = cli("cell", "fork", "shop", "--snapshot", "shop-1", "--name", "shop-fork")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    _ready(cli, "shop-fork")
    fork = _until(lambda: _db_log(cli, "shop-fork"), lambda log: len(runs(log)) >= 2)
    source_token = before[0][0]
    kept = [line for line in fork if line[0] == source_token]
    assert len(kept) >= len(before) and fork[:len(kept)] == after[:len(kept)], (fork, after)
    assert len(runs(fork)) == 2, fork  # then the fork's own database run, after its data
    forked_app = cli("exec", "shop-fork", "--", "sh", "-c", "wc -l < /workspaces/shop/app.log")
    assert int(forked_app.stdout) >= int(app.stdout), forked_app.stderr

    slept = cli("cell", "sleep", "shop-fork")
    assert slept.returncode == 0, slept.stdout + slept.stderr
    started = cli("cell", "start", "shop-fork")
    assert started.returncode == 0, started.stdout + started.stderr
    _ready(cli, "shop-fork")
    woken = _until(lambda: _db_log(cli, "shop-fork"), lambda log: len(runs(log)) >= 3)
    assert woken[:len(fork)] == fork and len(runs(woken)) == 3, (woken, fork)
    source = _db_log(cli, "shop")
    assert len(runs(source)) == 1 and len(source) > len(after)  # the source never stopped
