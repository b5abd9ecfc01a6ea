"""A Docker Compose based devcontainer.json -> a Cell with sidecars, on samples written after
the forms of the specification's compose templates (an app and a database sharing its
network, an existing compose file with a devcontainer override, a database needing a
password, a subset of services run). No engine: tests/e2e/test_import_devcontainer_compose.py
applies one for real."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devcell.api import devcontainer
from devcell.errors import ManifestError


@pytest.fixture(autouse=True)
def _no_compose_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DB_PASSWORD", "NODE_VERSION", "PORT", "TAG", "REQUIRED", "EMPTY"):
        monkeypatch.delenv(var, raising=False)


def _project(root: Path, devcontainer_json: str, **files: str) -> Path:
    """A project folder with .devcontainer/devcontainer.json and `files` (relative to
    .devcontainer, `..` allowed); returns devcontainer.json's path."""
    folder = root / ".devcontainer"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "devcontainer.json").write_text(textwrap.dedent(devcontainer_json))
    for name, text in files.items():
        path = Path(os.path.normpath(folder / name.replace("__", "/")))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder / "devcontainer.json"


def _convert(path: Path, out_dir: Path, state: Path) -> devcontainer.Conversion:
    result = devcontainer.convert(path, name=None, out_dir=out_dir, state_dir=state)
    assert result.problems == []
    return result


def _refused(path: Path, out_dir: Path, state: Path) -> list[str]:
    with pytest.raises(ManifestError) as refused:
        devcontainer.convert(path, name=None, out_dir=out_dir, state_dir=state)
    return [str(p) for p in refused.value.problems]


APP_AND_DATABASE = """\
    // An app container beside a database, the app on the database's network.
    {
      "name": "Shop (app and db)",
      "dockerComposeFile": "docker-compose.yml",
      "service": "app",
      "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
      "forwardPorts": [3000, "db:5432"],
      "postCreateCommand": "make deps",
      "shutdownAction": "stopCompose",
    }
"""
APP_AND_DATABASE_COMPOSE = """\
    version: "3.8"
    services:
      app:
        build:
          context: .
          dockerfile: Dockerfile
          args:
            NODE_VERSION: ${NODE_VERSION:-22}
        volumes:
          - ../..:/workspaces:cached
          - node_modules:/workspaces/shop/node_modules
        command: sleep infinity
        network_mode: service:db
        environment:
          DATABASE_URL: postgres://shop:${DB_PASSWORD}@db:5432/shop
          VERBOSE: yes
          API_TOKEN: abc123
      db:
        image: postgres:16-alpine
        restart: unless-stopped
        volumes:
          - pg-data:/var/lib/postgresql/data
        environment:
          - POSTGRES_USER=shop
          - POSTGRES_PASSWORD=${DB_PASSWORD}
        healthcheck:
          test: ["CMD", "pg_isready", "-U", "shop"]
          interval: 5s
    volumes:
      pg-data:
      node_modules:
    x-notes: extension fields are for anchors, which compose ignores
"""


def test_an_app_beside_its_database(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    path = _project(root, APP_AND_DATABASE, **{
        "docker-compose.yml": APP_AND_DATABASE_COMPOSE, "Dockerfile": "FROM scratch\n",
        ".env": "# the database's password\nDB_PASSWORD='pw 1'\n"})
    result = _convert(path, root, tmp_path / "state")
    spec = result.manifest["spec"]
    assert result.manifest["metadata"]["name"] == "shop-app-and-db"
    assert spec["build"] == {"context": ".devcontainer", "args": {"NODE_VERSION": "22"}}
    assert spec["workspace"]["mountPath"] == "/workspaces/shop"
    assert "volumes" not in spec  # node_modules lies inside the workspace
    assert spec["env"] == [
        {"name": "DATABASE_URL", "value": "postgres://shop:pw 1@db:5432/shop"},
        {"name": "VERBOSE", "value": "yes"},  # a string to compose (YAML 1.2), not true
        {"name": "API_TOKEN", "value": "abc123", "secret": True}]
    assert spec["sidecars"] == [{
        "name": "db", "image": "postgres:16-alpine",
        "env": [{"name": "POSTGRES_USER", "value": "shop"},
                {"name": "POSTGRES_PASSWORD", "value": "pw 1"}],
        "restart": "Always", "volume": {"mountPath": "/var/lib/postgresql/data"}}]
    assert spec["network"]["ports"] == [
        {"containerPort": 3000, "hostPort": 3000, "hostIP": "127.0.0.1"},
        {"containerPort": 5432, "hostPort": 5432, "hostIP": "127.0.0.1"}]
    assert spec["hooks"] == {"postCreate": [["/bin/sh", "-c", "make deps"]]}
    assert result.said[0] == "compose: service app is the cell; sidecars: db"
    compose = root / ".devcontainer" / "docker-compose.yml"
    notes = "\n".join(result.notes)
    for line, field, why in [
            (10, "services.app.volumes[0]", "the project folder is the cell's workspace at "
             "/workspaces/shop; the rest of"),
            (11, "services.app.volumes[1]", "not converted (a cell's volume may not lie "
             "inside its workspace, /workspaces/shop;"),
            (12, "services.app.command", "not converted (it only keeps the container "
             "running"),
            (15, "services.app.environment.DATABASE_URL", "names the service db as a host; "
             "in a cell it is reached at 127.0.0.1"),
            (25, "services.db.environment[1]", "written in the manifest as it is"),
            (26, "services.db.healthcheck", "not converted (a sidecar has no readiness")]:
        assert f"{compose}:{line}: {field}: {why}" in notes, (line, field)
    assert "shutdownAction: not converted" in notes
    assert "x-notes" not in notes and "version" not in notes


def test_an_existing_compose_file_with_a_devcontainer_override(tmp_path: Path) -> None:
    """Two files merged in order; paths in both relative to the first file's folder (the
    project's), so the override's `..` is the project's parent."""
    root = tmp_path / "api"
    path = _project(root, """\
        {
          "dockerComposeFile": ["../docker-compose.yml", "docker-compose.yml"],
          "service": "api",
          "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
        }
        """, **{"../docker-compose.yml": """\
        services:
          api:
            image: devcell/busybox:latest
            ports: ["8080:80", "127.0.0.1:9229:9229"]
            environment: [MODE=prod, LOG=info]
            command: ["serve", "--port", "80"]
            volumes: ["./data:/srv/data", "pip_cache:/root/.cache"]
          cache:
            image: redis:7
            command: redis-server --save 60 1
            volumes: [cache:/data, extra:/extra]
            ports:
              - target: 6379
                published: "6380"
                host_ip: 127.0.0.1
        """, "docker-compose.yml": """\
        services:
          api:
            ports: ["8080:80", "3000-3001:3000-3001"]
            environment: {MODE: dev}
            command: sleep infinity
            volumes: ["..:/workspaces:cached", "./data2:/srv/data"]
        """})
    result = _convert(path, root, tmp_path / "state")
    spec = result.manifest["spec"]
    assert spec["image"] == "devcell/busybox:latest"
    assert spec["workspace"]["mountPath"] == "/workspaces/api"
    assert spec["env"] == [{"name": "MODE", "value": "dev"}, {"name": "LOG", "value": "info"}]
    assert spec["volumes"] == [{"name": "pip-cache", "mountPath": "/root/.cache"}]
    assert [(p["hostPort"], p["containerPort"]) for p in spec["network"]["ports"]] == [
        (8080, 80), (9229, 9229), (3000, 3000), (3001, 3001)]
    assert spec["sidecars"] == [{
        "name": "cache", "image": "redis:7", "command": ["redis-server", "--save", "60", "1"],
        "ports": [{"containerPort": 6379, "hostPort": 6380, "hostIP": "127.0.0.1"}],
        "volume": {"mountPath": "/data"}}]
    notes = "\n".join(result.notes)
    override = root / ".devcontainer" / "docker-compose.yml"
    base = root / "docker-compose.yml"
    assert f"{override}:6: services.api.volumes[1]: left out, DevCell's security rules " \
        f"refuse it: host bind mounts are off by default: {root}/data2" in notes
    assert f"{override}:5: services.api.command: not converted (it only keeps" in notes
    assert f"{base}:11: services.cache.volumes[1]: not converted (a sidecar has one data " \
        "volume (its first: /data))" in notes
    assert f"{base}:4: services.api.ports[0]: published on 127.0.0.1 only (compose " \
        "publishes on every address)" in notes


def test_runservices_chooses_the_sidecars_and_depends_on_orders_them(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", """\
        {"dockerComposeFile": "compose.yaml", "service": "web",
         "runServices": ["web", "worker"]}
        """, **{"compose.yaml": """\
        services:
          web: {image: "devcell/busybox:latest"}
          worker:
            image: devcell/busybox:latest
            command: ["sh", "-c", "while sleep 1; do :; done"]
            depends_on: [queue_db]
            restart: on-failure:3
          queue_db: {image: "devcell/busybox:latest", restart: "no"}
          mail: {image: "devcell/busybox:latest"}
          debug: {image: "devcell/busybox:latest", profiles: [debug]}
        """})
    result = _convert(path, tmp_path / "p", tmp_path / "state")
    sidecars = result.manifest["spec"]["sidecars"]
    assert [(s["name"], s.get("restart")) for s in sidecars] == [
        ("queue-db", "Never"), ("worker", "OnFailure")]
    notes = "\n".join(result.notes)
    assert "services.mail: not converted (not in runServices, so not run)" in notes
    path.write_text('{"dockerComposeFile": "compose.yaml", "service": "web"}')
    result = _convert(path, tmp_path / "p", tmp_path / "state")
    assert [s["name"] for s in result.manifest["spec"]["sidecars"]] == [
        "queue-db", "worker", "mail"]  # as `docker compose up`: no service with profiles
    assert "services.debug: not converted (it has profiles, which compose starts only when " \
        "asked; name it in runServices)" in "\n".join(result.notes)
    path.write_text('{"dockerComposeFile": "compose.yaml", "service": "web", '
                    '"runServices": ["web", "worker"]}')
    notes = "\n".join(_convert(path, tmp_path / "p", tmp_path / "state").notes)
    assert "services.queue_db: runs as a sidecar though not in runServices: a service that " \
        "runs depends on it" in notes
    assert "services.worker.depends_on: not converted (only the order is kept" in notes
    assert result.manifest["spec"]["workspace"] == {"mountPath": "/workspaces/p"}


@pytest.mark.parametrize(("override", "command", "service"), [
    ("", "httpd -f -p 8080", ["httpd", "-f", "-p", "8080"]),
    ("", '/bin/sh -c "while sleep 1000; do :; done"', None),
    ('"overrideCommand": true,', "httpd -f -p 8080", None),
])
def test_the_service_s_own_command_runs_as_the_cell_s_service_main(
        tmp_path: Path, override: str, command: str, service: list[str] | None) -> None:
    """Compose's overrideCommand default is false: the service's command runs (a keep-alive
    loop only kept the container up; DevCell's supervisor does that)."""
    path = _project(tmp_path / "p", "{" + override + '"dockerComposeFile": "c.yml", '
                    '"service": "a"}', **{"c.yml": f"""\
        services:
          a:
            image: devcell/busybox:latest
            command: {command}
        """})
    result = _convert(path, tmp_path / "p", tmp_path / "state")
    services = result.manifest["spec"].get("services")
    assert services == ([{"name": "main", "command": service}] if service else None)
    assert ("runs as the cell's service main" in result.said[0]) is bool(service)
    assert ("overrideCommand: true: the service's own command is not run" in
            "\n".join(result.notes)) is bool(override)


def test_variables_as_compose_fills_them(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAG", "from-shell")
    monkeypatch.setenv("EMPTY", "")
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        services:
          a:
            image: devcell/busybox:${TAG}
            environment:
              DOLLAR: $$HOME
              DEFAULTED: ${PORT:-8080}
              EMPTY_DEFAULT: ${EMPTY:-fallback}
              EMPTY_KEPT: ${EMPTY-fallback}
              PLUS: ${TAG:+set}
              BARE: $TAG
        """, ".env": "TAG=from-dotenv\nPORT=9000\n"})
    env = {e["name"]: e["value"] for e in
           _convert(path, tmp_path / "p", tmp_path / "state").manifest["spec"]["env"]}
    assert env == {"DOLLAR": "$HOME", "DEFAULTED": "9000", "EMPTY_DEFAULT": "fallback",
                   "EMPTY_KEPT": "", "PLUS": "set", "BARE": "from-shell"}


def test_an_unset_variable_is_refused_by_name_and_line(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        services:
          a:
            image: devcell/busybox:latest
            environment:
              URL: http://${DB_HOST}:5432
              NEEDED: ${REQUIRED:?set REQUIRED to the API's address}
          b:
            image: ${NOT_USED_WHEN_NOT_RUN}
        """})
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert shown == [
        f"{compose}:5: services.a.environment.URL: DB_HOST is not set (in the environment "
        "or .env) and has no default; give it one with ${DB_HOST:-default}",
        f"{compose}:6: services.a.environment.NEEDED: REQUIRED is required: set REQUIRED "
        "to the API's address",
        f"{compose}:8: services.b.image: NOT_USED_WHEN_NOT_RUN is not set (in the "
        "environment or .env) and has no default; give it one with "
        "${NOT_USED_WHEN_NOT_RUN:-default}"]


def test_what_cannot_map_is_refused_naming_the_compose_file_line_and_field(
        tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "app"}', **{
        "c.yml": f"""\
        services:
          app:
            build: {outside}
            network_mode: host
            pid: host
            volumes:
              - /var/run/docker.sock:/var/run/docker.sock
              - cache:/etc
          db:
            image: devcell/busybox:latest
            network_mode: container:other
            gpus: all
        """})
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    expect = [
        (3, "services.app.build", f"the build context {outside} lies outside the project "
         "folder"),
        (4, "services.app.network_mode", "network_mode: host is refused: the host's network "
         "is not shared unless an administrator allows it (security.allowHostNetwork)"),
        (8, "services.app.volumes[1]", "target /etc would hide or overwrite /etc"),
        (5, "services.app.pid", "pid: host is refused"),
        (11, "services.db.network_mode", "network_mode: container:other is refused"),
        (12, "services.db.gpus", "gpus is refused: host devices are not given to cells"),
    ]
    for line, field, message in expect:
        assert any(s.startswith(f"{compose}:{line}: {field}: ") and message in s
                   for s in shown), (line, field, shown)
    assert len(shown) == len(expect)


def test_the_devcontainer_json_fields_are_checked(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", """\
        {
          "dockerComposeFile": "c.yml",
          "service": "nope",
          "runServices": ["ghost"],
        }
        """, **{"c.yml": "services:\n  app: {image: devcell/busybox:latest}\n"})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert shown == [f"{path}:3: service: service nope is not in the compose files (they "
                     "define app)"]
    path.write_text('{"dockerComposeFile": ["c.yml", 3], "runServices": "app"}')
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert [s.split(": ")[1] for s in shown] == ["dockerComposeFile", "service"]
    path.write_text('{"dockerComposeFile": "c.yml", "service": "app", '
                    '"runServices": ["app", "ghost"]}')
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert shown == [f"{path}:1: runServices[1]: service ghost is not in the compose files"]


_ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
    for i in range(6))


@pytest.mark.parametrize(("make", "message"), [
    (lambda d, out: os.symlink(out / "c.yml", d / "c.yml"), "it lies outside the project"),
    (lambda d, out: os.mkfifo(d / "c.yml"), "cannot read it"),
    (lambda d, out: (d / "c.yml").write_text("a: " + "x" * (1 << 20)), "larger than 1 MiB"),
    (lambda d, out: (d / "c.yml").write_text(_ALIAS_BOMB), "more than 100000 values"),
    (lambda d, out: (d / "c.yml").write_text("services: {a: *nowhere}\n"),
     "unknown anchor *nowhere"),
    (lambda d, out: (d / "c.yml").write_text("services: {}\n---\nservices: {}\n"),
     "expected one YAML document"),
    (lambda d, out: (d / "c.yml").write_text("services:\n  a: {image: b\n"),
     "YAML syntax error"),
    (lambda d, out: (d / "c.yml").write_text("services:\n  a: {}\n  a: {}\n"),
     'duplicate key "a"'),
    (lambda d, out: (d / "c.yml").write_text("- a\n"), "expected a mapping"),
    (lambda d, out: None, "no such file"),
])
def test_a_compose_file_read_as_hostile(tmp_path: Path, make: Any, message: str) -> None:
    """The project folder may be a cell's live workspace: a link out of it, a FIFO, a huge
    file or a YAML bomb is refused, naming the file."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "c.yml").write_text("services: {a: {image: devcell/busybox:latest}}\n")
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}')
    make(path.parent, out)
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 1 and shown[0].startswith(str(path.parent / "c.yml")) \
        and message in shown[0], shown


def test_anchors_aliases_and_merge_keys_as_compose_files_share_settings(
        tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        x-env: &env
          SHARED: "1"
          MODE: base
        x-service: &service
          image: devcell/busybox:latest
          restart: "no"
        services:
          a:
            <<: *service
            environment:
              <<: *env
              MODE: app
          b:
            <<: *service
            environment: *env
            command: [sleep, "3600"]
        """})
    spec = _convert(path, tmp_path / "p", tmp_path / "state").manifest["spec"]
    assert spec["image"] == "devcell/busybox:latest"
    assert spec["env"] == [{"name": "MODE", "value": "app"}, {"name": "SHARED", "value": "1"}]
    assert spec["sidecars"] == [{
        "name": "b", "image": "devcell/busybox:latest",
        "env": [{"name": "SHARED", "value": "1"}, {"name": "MODE", "value": "base"}],
        "command": ["sleep", "3600"], "restart": "Never"}]


def test_a_compose_file_outside_the_project_is_refused(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "../../c.yml", "service": "a"}')
    (tmp_path / "c.yml").write_text("services: {a: {image: devcell/busybox:latest}}\n")
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 1 and "it lies outside the project folder" in shown[0]


def test_unknown_keys_are_noted_never_dropped(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        name: shop
        services:
          a:
            image: devcell/busybox:latest
            container_name: shop-app
            user: node
            future_key: 1
            build_hint: x
            volumes: [{type: tmpfs, target: /scratch}]
            ports: ["53:53/udp", "9000"]
          b:
            build: {context: ., cache_from: [x]}
            environment: [FROM_SHELL]
            volumes: ["./init.sql:/docker-entrypoint-initdb.d/init.sql"]
        networks: {default: {}}
        """, "Dockerfile": "FROM scratch\n"})
    result = _convert(path, tmp_path / "p", tmp_path / "state")
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    notes = "\n".join(result.notes)
    for line, field in [(1, "name"), (5, "services.a.container_name"), (6, "services.a.user"),
                        (7, "services.a.future_key"), (8, "services.a.build_hint"),
                        (9, "services.a.volumes[0]"), (10, "services.a.ports[0]"),
                        (12, "services.b.build.cache_from"),
                        (13, "services.b.environment[0]"),
                        (14, "services.b.volumes[0]"), (15, "networks")]:
        assert f"{compose}:{line}: {field}: " in notes, field
    assert f"{compose}:10: services.a.ports[1]: published on the same port" in notes
    sidecar = result.manifest["spec"]["sidecars"][0]
    assert sidecar == {"name": "b", "build": {"context": ".devcontainer"}}


def test_a_bad_value_from_compose_is_blamed_on_its_line(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": "services:\n  a: {image: devcell/busybox:latest}\n  b:\n"
                 "    image: 'Not An Image'\n"})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    assert len(shown) == 1 and shown[0].startswith(f"{compose}:3: services.b: ") \
        and "spec.sidecars[0].image" in shown[0], shown


def test_env_files_are_read_from_the_project_only(tmp_path: Path) -> None:
    (tmp_path / "secret.env").write_text("STOLEN=1\n")
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        services:
          a:
            image: devcell/busybox:latest
            env_file: [app.env, {path: optional.env, required: false}]
            environment: {FROM_FILE: overridden}
          b:
            image: devcell/busybox:latest
            env_file: ../../secret.env
          c:
            image: devcell/busybox:latest
            env_file: missing.env
        """, "app.env": "# settings\nexport FROM_FILE=file\nQUOTED=\"a b\"\nPLAIN=x # note\n"})
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 2, shown
    assert shown[0].startswith(f"{compose}:8: services.b.env_file: ") \
        and "it lies outside the project folder" in shown[0]
    assert shown[1] == f"{compose}:11: services.c.env_file: the env file " \
        f"{compose.parent / 'missing.env'} does not exist"
    path.write_text('{"dockerComposeFile": "c.yml", "service": "a", "runServices": []}')
    env = _convert(path, tmp_path / "p", tmp_path / "state").manifest["spec"]["env"]
    assert env == [{"name": "FROM_FILE", "value": "overridden"},
                   {"name": "QUOTED", "value": "a b"}, {"name": "PLAIN", "value": "x"}]


def test_more_sidecars_than_a_cell_takes_and_extends_are_refused(tmp_path: Path) -> None:
    services = "".join(f"  s{i}: {{image: devcell/busybox:latest}}\n" for i in range(10))
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "s0"}', **{
        "c.yml": "services:\n" + services})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 1 and "9 services would be the cell's sidecars; a cell has at most " \
        "8: name the ones to run in runServices" in shown[0], shown
    path.write_text('{"dockerComposeFile": "c.yml", "service": "s0", "runServices": ["s1"]}')
    assert [s["name"] for s in _convert(path, tmp_path / "p", tmp_path / "state").manifest[
        "spec"]["sidecars"]] == ["s1"]
    (path.parent / "c.yml").write_text("services:\n  a:\n    extends: {service: b}\n"
                                       "  b: {image: devcell/busybox:latest}\n")
    path.write_text('{"dockerComposeFile": "c.yml", "service": "a"}')
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert any(":3: services.a.extends: extends is refused: DevCell's import does not follow "
               "extends" in s for s in shown), shown


def test_a_dockerfile_beside_the_context_is_built_one_outside_the_project_refused(
        tmp_path: Path) -> None:
    (tmp_path / "Outside.Dockerfile").write_text("FROM scratch\n")
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": """\
        services:
          a: {build: {context: app, dockerfile: ../Dockerfile}}
          b:
            build:
              context: app
              dockerfile: ../../../Outside.Dockerfile
        """, "Dockerfile": "FROM scratch\n", "app__main.go": "package main\n"})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 1 and ":6: services.b.build.dockerfile: the Dockerfile " \
        f"{tmp_path / 'Outside.Dockerfile'} lies outside the project folder" in shown[0], shown
    path.write_text('{"dockerComposeFile": "c.yml", "service": "a", "runServices": []}')
    spec = _convert(path, tmp_path / "p", tmp_path / "state").manifest["spec"]
    assert spec["build"] == {"context": ".devcontainer/app", "dockerfile": "../Dockerfile"}


PRIVILEGED_COMPOSE = """\
    services:
      a:
        image: devcell/busybox:latest
        cap_add: [CAP_SYS_PTRACE, SYS_ADMIN]
        security_opt: ["seccomp:unconfined", "no-new-privileges:true"]
        devices: ["/dev/fuse", {source: /dev/null, permissions: rw}]
        init: true
      b:
        image: devcell/busybox:latest
        privileged: true
"""


def test_the_cell_s_privileges_need_the_configuration_s_allowances(tmp_path: Path) -> None:
    """cap_add, security_opt and devices become spec.security, refused (naming the compose
    line and the allowance) until DevCell's configuration allows each; a sidecar takes
    none."""
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a", '
                    '"runServices": []}', **{"c.yml": PRIVILEGED_COMPOSE})
    compose = tmp_path / "p" / ".devcontainer" / "c.yml"
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    for line, field, allowance in [
            (4, "cap_add[0]", "listing SYS_PTRACE in security.allowedCapabilities"),
            (4, "cap_add[1]", "listing SYS_ADMIN in security.allowedCapabilities"),
            (5, "security_opt[0]", "listing seccomp=unconfined in security.allowedSecurityOpts"),
            (6, "devices[0]", "security.allowedDevices"),
            (6, "devices[1]", "security.allowedDevices")]:
        assert any(s.startswith(f"{compose}:{line}: services.a.{field}: ") and allowance in s
                   for s in shown), (field, shown)
    assert len(shown) == 5
    state = tmp_path / "allowed"
    state.mkdir(mode=0o700)
    (state / "config.yaml").write_text(
        "apiVersion: devcell.dev/v1alpha1\nkind: Config\nsecurity:\n"
        "  allowedCapabilities: [SYS_PTRACE, SYS_ADMIN]\n"
        "  allowedSecurityOpts: [seccomp=unconfined]\n  allowedDevices: [/dev/fuse, /dev/null]\n")
    (state / "config.yaml").chmod(0o600)
    spec = _convert(path, tmp_path / "p", state).manifest["spec"]
    assert spec["security"] == {"capabilities": ["SYS_PTRACE", "SYS_ADMIN"],
                                "securityOpt": ["seccomp=unconfined"],
                                "devices": ["/dev/fuse", "/dev/null:/dev/null:rw"]}
    path.write_text('{"dockerComposeFile": "c.yml", "service": "a"}')
    shown = _refused(path, tmp_path / "p", state)
    assert shown == [f"{compose}:10: services.b.privileged: privileged is refused: a sidecar "
                     "runs with DevCell's default confinement (only the cell's own container "
                     "takes spec.security)"]


def test_network_mode_of_a_service_that_is_not_there_is_refused(tmp_path: Path) -> None:
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": "services:\n  a:\n    image: devcell/busybox:latest\n"
                 "    network_mode: service:gone\n"})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert len(shown) == 1 and ":4: services.a.network_mode: network_mode: service:gone names " \
        "no service of the compose files" in shown[0], shown


def test_aliases_repeating_a_large_value_are_bounded(tmp_path: Path) -> None:
    """An alias copies a value for free (60 kB written once, read 256 times per service);
    what the import reads stays under 16 MiB."""
    env = ", ".join(f"A{i}: *v" for i in range(256))
    path = _project(tmp_path / "p", '{"dockerComposeFile": "c.yml", "service": "a"}', **{
        "c.yml": f"x-v: &v {'v' * 60_000}\nx-env: &env {{{env}}}\nservices:\n"
                 + "".join(f"  s{i}: {{image: b, environment: *env}}\n" for i in range(3))
                 + "  a: {image: devcell/busybox:latest}\n"})
    shown = _refused(path, tmp_path / "p", tmp_path / "state")
    assert [s.split(": ", 2)[2] for s in shown] == [
        "the values read add up to more than 16 MiB"], shown
