"""Dev Container Features for real (issue 29 part 1): features in the specification's format
(devcontainer-feature.json + install.sh) written by the test, pushed as OCI artifacts to a
local registry (Debian's docker-registry on 127.0.0.1) and served for ghcr.io through
images.registryMirrors; a cell with two of them built on the engine: installed in the order
installsAfter gives, options reaching install.sh, containerEnv in the image, an unchanged
re-apply builds nothing and a changed option rebuilds. A local feature folder (offline)
asking for a capability is refused without security.allowedCapabilities, naming the feature
and the allowance, and accepted with it (the capability granted, its entrypoint run at the
start), on the image spec.build makes; deleting the cell removes both images."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.host.ids import state_hash
from tests.backends.engine import IMAGE, remove_containers, require_engine
from tests.conftest import Cli
from tests.registry import Registry, start

pytestmark = pytest.mark.e2e

GHCR = "ghcr.io/devcontainers/features"
LOCAL_FILES = ("its local feature folder and build context are paths relative to the manifest's "
               "file, files of the client's: a server takes relative paths from its own working "
               "directory (docs/api.md)")


def feature(fid: str, *, options: dict[str, Any] | None = None, **meta: Any) -> dict[str, str]:
    """A feature folder's files: install.sh appends its id and options to /features.log."""
    names = [str(o).upper() for o in options or {}]
    record = " ".join(f"{n}=${n}" for n in names)
    return {
        "devcontainer-feature.json": json.dumps({"id": fid, "version": "1.0.0",
                                                 "options": options or {}, **meta}),
        "install.sh": f'#!/bin/sh\nset -e\necho "{fid} {record} user=$_REMOTE_USER"'
                      " >> /features.log\n",
    }


def _config(state: Path, **security: Any) -> None:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    doc: dict[str, Any] = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Config"}
    if security.pop("mirror", None):
        doc["images"] = {"registryMirrors": {"ghcr.io": security.pop("address")}}
    if security:
        doc["security"] = security
    (state / "config.yaml").write_text(json.dumps(doc))
    os.chmod(state / "config.yaml", 0o600)


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


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Registry]:
    running = start(tmp_path / "registry")
    yield running
    running.stop()


def _cell(cli: Cli, name: str) -> dict[str, Any]:
    done = cli("get", "cell", name, "-o", "json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def _built_image(cli: Cli, name: str) -> str:
    return str(_cell(cli, name)["status"]["build"]["image"])


def test_two_oci_features_in_order_with_options_rebuilt_only_when_an_option_changes(
        cli: Cli, tmp_path: Path, engine_state: Path, served: Registry) -> None:
    served.push_feature("devcontainers/features/base-tools", "1", feature("base-tools"))
    served.push_feature("devcontainers/features/greeter", "2", feature(
        "greeter", options={"greeting": {"type": "string", "default": "hi"},
                            "loud": {"type": "boolean", "default": False}},
        installsAfter=[f"{GHCR}/base-tools"], containerEnv={"GREETER_HOME": "/opt/greeter"}))
    _config(engine_state, mirror=True, address=served.address)
    manifest = tmp_path / "cell.yaml"

    def write(greeting: str) -> None:
        manifest.write_text(textwrap.dedent(f"""\
            apiVersion: devcell.dev/v1alpha1
            kind: Cell
            metadata: {{name: feats}}
            spec:
              backend: container
              image: {IMAGE}
              features:
                - ref: {GHCR}/greeter:2
                  options: {{greeting: {greeting}, loud: true}}
                - ref: {GHCR}/base-tools:1
            """))

    write("hello")
    done = cli("apply", "-f", str(manifest), timeout=300)
    assert done.returncode == 0, done.stderr
    log = cli("exec", "feats", "--", "sh", "-c", "cat /features.log; echo $GREETER_HOME")
    assert log.stdout.splitlines() == ["base-tools  user=root",
                                       "greeter GREETING=hello LOUD=true user=root",
                                       "/opt/greeter"], log.stderr
    first = _built_image(cli, "feats")

    again = cli("apply", "-f", str(manifest))
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr
    assert _built_image(cli, "feats") == first

    write("hey")
    changed = cli("apply", "-f", str(manifest), timeout=300)
    assert changed.returncode == 0, changed.stderr
    assert _built_image(cli, "feats") != first
    log = cli("exec", "feats", "--", "cat", "/features.log")
    assert log.stdout.splitlines()[-1] == "greeter GREETING=hey LOUD=true user=root"


@pytest.mark.state_dir_only(LOCAL_FILES)
def test_a_local_feature_asking_for_a_capability_needs_the_allowance(
        cli: Cli, tmp_path: Path, engine_state: Path) -> None:
    _config(engine_state)  # no registry at all: a local feature is offline
    folder = tmp_path / "project" / "tracer"
    folder.mkdir(parents=True)
    files = feature("tracer", capAdd=["SYS_PTRACE"], entrypoint="/tracer-init")
    files["install.sh"] += ("printf '#!/bin/sh\\necho started > /tmp/tracer-started\\n' "
                            "> /tracer-init\nchmod +x /tracer-init\n")
    for name, text in files.items():
        (folder / name).write_text(text)
    # On spec.build's image: built first (as CELL__base), the feature on top.
    (tmp_path / "project" / "Dockerfile").write_text(f"FROM {IMAGE}\nRUN echo built > /base\n")
    manifest = tmp_path / "project" / "cell.yaml"
    manifest.write_text(textwrap.dedent("""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {name: tracer}
        spec:
          backend: container
          build: {context: .}
          features:
            - ref: ./tracer
        """))
    refused = cli("apply", "-f", str(manifest), timeout=300)
    message = _cell(cli, "tracer")["status"].get("message", "")
    assert refused.returncode != 0, refused.stdout
    assert "feature " + str(folder) in message and "capability SYS_PTRACE" in message, message
    assert "security.allowedCapabilities" in message, message

    _config(engine_state, allowedCapabilities=["SYS_PTRACE"])
    accepted = cli("apply", "-f", str(manifest), timeout=300)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    log = cli("exec", "tracer", "--", "cat", "/features.log")
    assert log.stdout.strip() == "tracer  user=root", log.stderr
    status = cli("exec", "tracer", "--", "cat", "/proc/self/status").stdout
    [effective] = [line.split()[1] for line in status.splitlines()
                   if line.startswith("CapEff:")]
    assert int(effective, 16) & (1 << 19), status  # CAP_SYS_PTRACE: the feature's, granted
    started = cli("exec", "tracer", "--", "cat", "/tmp/tracer-started")
    assert started.stdout == "started\n", started.stderr  # its entrypoint ran at the start
    assert cli("exec", "tracer", "--", "cat", "/base").stdout == "built\n"

    deleted = cli("delete", "cell", "tracer", "--approve", timeout=120)
    assert deleted.returncode == 0, deleted.stderr
    import docker

    client = docker.from_env(timeout=60)
    try:  # both builds removed with the cell, and its features' build context
        assert client.api.images(filters={
            "label": [f"dev.devcell.state-dir={state_hash(engine_state)}"]}) == []
    finally:
        client.close()
    assert not (engine_state / "features" / "contexts" / "tracer").exists()


@pytest.mark.state_dir_only(LOCAL_FILES)
def test_features_install_as_root_and_the_image_keeps_its_own_user(
        cli: Cli, tmp_path: Path, engine_state: Path) -> None:
    _config(engine_state)
    project = tmp_path / "project"
    (project / "who").mkdir(parents=True)
    (project / "Dockerfile").write_text(
        f"FROM {IMAGE}\nRUN echo 'dev:x:1000:1000::/home/dev:/bin/sh' >> /etc/passwd && "
        "mkdir -p /home/dev && chown 1000 /home/dev\nUSER dev\n")
    (project / "who" / "devcontainer-feature.json").write_text('{"id": "who"}')
    (project / "who" / "install.sh").write_text(
        '#!/bin/sh\necho "uid=$(id -u) user=$_REMOTE_USER home=$_REMOTE_USER_HOME" > /who\n')
    manifest = project / "cell.yaml"
    manifest.write_text("apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {name: who}\n"
                        "spec:\n  backend: container\n  build: {context: .}\n"
                        "  features: [{ref: ./who}]\n")
    done = cli("apply", "-f", str(manifest), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = cli("exec", "who", "--", "sh", "-c", "cat /who; id -u")
    assert seen.stdout.splitlines() == ["uid=0 user=dev home=/home/dev", "1000"], seen.stderr
