"""Registry images through the CLI, as a user runs it: apply pulls, `image ls` shows what
DevCell pulled with sizes, `image prune` removes only what nothing uses, credentials come from
DOCKER_CONFIG, and the daemon backs off from an unreachable registry. A real registry
(Debian's docker-registry on 127.0.0.1) and the real Docker engine; no mocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Cli
from tests.processes import child_setup, end
from tests.registry import Registry, auth_registry, closed_port_ref, registry

__all__ = ["auth_registry", "registry"]  # fixtures
pytestmark = pytest.mark.e2e


def manifest(directory: Path, image: str, *, name: str = "box", policy: str | None = None
             ) -> Path:
    path = directory / f"{name}.yaml"
    pull = f"\n          imagePullPolicy: {policy}" if policy else ""
    path.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: {name}}}
        spec:
          backend: container
          image: {image}{pull}
          network: {{mode: none}}
          services:
            - name: idle
              command: [sleep, "600"]
        """))
    return path


def cell_json(cli: Cli, name: str = "box", **kw: Any) -> dict[str, Any]:
    shown = cli("get", "cell", name, "-o", "json", **kw)
    assert shown.returncode == 0, shown.stderr
    return dict(json.loads(shown.stdout))


def ready(cell: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in cell["status"]["conditions"] if c["type"] == "Ready")


def image_ls(cli: Cli) -> list[dict[str, Any]]:
    listed = cli("image", "ls", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout)["items"])


def test_apply_pulls_an_image_only_the_registry_has_then_ls_and_prune(
        registry: Registry, cli: Cli, tmp_path: Path) -> None:
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    applied = cli("apply", "-f", str(manifest(tmp_path, image)))
    assert applied.returncode == 0, applied.stderr
    assert "Traceback" not in applied.stderr
    assert "\x1b[" not in applied.stderr and "━" not in applied.stderr  # no terminal: no bars
    cell = cell_json(cli)
    assert cell["status"]["phase"] == "Running" and ready(cell)["status"] == "True"
    described = cli("describe", "cell", "box").stdout
    assert "pull-image" in described

    table = cli("image", "ls")
    assert table.returncode == 0 and image in table.stdout and "in use: box" in table.stdout
    [row] = image_ls(cli)
    assert row["image"] == image and row["size"] > 100_000 and row["cells"] == ["box"]

    kept = cli("image", "prune")
    assert kept.returncode == 0 and f"image/{image} kept: named by cell box" in kept.stdout
    assert registry.local_images()

    assert cli("delete", "cell", "box", "--approve").returncode == 0
    dry = cli("image", "prune", "--dry-run")
    assert f"image/{image} would remove" in dry.stdout and registry.local_images()
    pruned = cli("image", "prune")
    assert pruned.returncode == 0 and f"image/{image} removed" in pruned.stdout
    assert not registry.local_images()
    assert image_ls(cli) == []


@pytest.fixture
def docker_client() -> Iterator[Any]:
    import docker

    client = docker.from_env()
    yield client
    client.close()


def test_prune_never_touches_an_image_devcell_did_not_pull_or_a_user_still_uses(
        registry: Registry, cli: Cli, tmp_path: Path, docker_client: Any) -> None:
    mine, theirs = registry.ref("team/mine"), registry.ref("team/theirs")
    registry.push(mine, version="1")
    registry.push(theirs, version="2")
    docker_client.api.pull(theirs.rpartition(":")[0], tag="1")  # the user's own pull
    assert cli("apply", "-f", str(manifest(tmp_path, mine))).returncode == 0
    assert cli("delete", "cell", "box", "--approve").returncode == 0
    user_container = docker_client.api.create_container(mine, command=["true"])["Id"]
    try:
        pruned = cli("image", "prune")
        assert pruned.returncode == 0, pruned.stderr
        assert f"image/{mine} kept: used by container" in pruned.stdout
        assert theirs not in pruned.stdout and [r["image"] for r in image_ls(cli)] == [mine]
    finally:
        docker_client.api.remove_container(user_container, force=True)
    assert f"image/{mine} removed" in cli("image", "prune").stdout
    tags = {t for i in registry.local_images() for t in i.get("RepoTags") or []}
    assert tags == {theirs}  # the user's pull survives every prune


def test_never_fails_clearly(registry: Registry, cli: Cli, tmp_path: Path) -> None:
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    applied = cli("apply", "-f", str(manifest(tmp_path, image, policy="Never")))
    assert applied.returncode == 1 and "Traceback" not in applied.stderr
    assert "imagePullPolicy is Never" in applied.stderr
    assert ready(cell_json(cli))["reason"] == "ImageNotFound"
    assert not registry.local_images()


def test_credentials_come_from_docker_config(
        auth_registry: Registry, cli: Cli, tmp_path: Path) -> None:
    image = auth_registry.ref("private/tools")
    auth_registry.push(image, version="1")
    path = manifest(tmp_path, image)
    nobody = {"DOCKER_CONFIG": str(tmp_path / "no-login")}  # never root's ~/.docker
    refused = cli("apply", "-f", str(path), env=nobody)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "(unauthorized)" in refused.stderr and f"docker login {auth_registry.address}" in (
        refused.stderr)
    assert ready(cell_json(cli))["reason"] == "ImagePullFailed"

    logged_in = tmp_path / "docker-config"
    auth_registry.login(logged_in)
    applied = cli("apply", "-f", str(path), env={"DOCKER_CONFIG": str(logged_in)})
    assert applied.returncode == 0, applied.stderr
    assert cell_json(cli)["status"]["phase"] == "Running"


Daemon = Callable[..., tuple[Path, Path]]


@pytest.fixture
def daemon(tmp_path: Path, state_dir: Path) -> Iterator[Daemon]:
    """Starts `devcell controller run --manifests DIR [ARGS]`; returns (DIR, its log)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> tuple[Path, Path]:
        watched = tmp_path / "watched"
        watched.mkdir()
        log = tmp_path / "daemon.log"
        with log.open("wb") as out:
            started.append(subprocess.Popen(
                [sys.executable, "-m", "devcell", "controller", "run", "--manifests",
                 str(watched), *args], stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                preexec_fn=child_setup, env=dict(os.environ, DEVCELL_HOME=str(state_dir))))
        return watched, log

    try:
        yield start
    finally:
        for proc in started:
            end(proc)


def test_the_daemon_backs_off_from_an_unreachable_registry(daemon: Daemon, cli: Cli) -> None:
    watched, log = daemon()  # the default resync (60 s): only the queue's backoff retries
    image = closed_port_ref()
    manifest(watched, image)
    deadline = time.monotonic() + 60
    cell: dict[str, Any] = {}
    while time.monotonic() < deadline:
        shown = cli("get", "cell", "box", "-o", "json")
        if shown.returncode == 0:
            cell = json.loads(shown.stdout)
            if cell["status"].get("retries", 0) >= 6:
                break
        time.sleep(0.3)
    else:
        raise AssertionError(f"no backoff seen: {cell}\n{log.read_text()[-3000:]}")
    condition = ready(cell)
    assert condition["reason"] == "ImagePullFailed"
    assert "(unreachable)" in condition["message"] and "cannot be reached" in condition["message"]
    assert cell["status"].get("nextRetryAt")
    ops = json.loads(cli("get", "operations", "-o", "json").stdout)["items"]
    failed = sorted(o["created_at"] for o in ops if o["reason"] == "ImagePullFailed")
    assert len(failed) >= 5
    times = [time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:-1])
             for t in failed]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[-1] > 2 * gaps[0], gaps  # exponential backoff, not a hot loop
    assert "Traceback" not in log.read_text()


def test_bytes_used_counts_what_devcell_pulled_for_df(
        registry: Registry, cli: Cli, tmp_path: Path, state_dir: Path) -> None:
    from devcell.api import images

    assert images.bytes_used(state_dir) == 0
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    assert cli("apply", "-f", str(manifest(tmp_path, image))).returncode == 0
    [row] = image_ls(cli)
    assert images.bytes_used(state_dir) == row["size"] > 0
    report = json.loads(cli("df", "-v", "-o", "json").stdout)
    [images_row] = [t for t in report["types"] if t["type"] == "Images"]
    assert images_row == {"type": "Images", "total": 1, "active": 1,
                          "sizeBytes": row["size"], "reclaimableBytes": 0}
    [item] = [i for i in report["items"] if i["type"] == "Images"]
    assert item["name"] == image and item["owner"] == "box"


def wait_for(what: str, predicate: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_always_under_the_daemon_follows_a_pushed_digest(
        registry: Registry, daemon: Daemon, cli: Cli) -> None:
    watched, log = daemon("--resync", "1s")  # the resync asks the registry every second
    image = registry.ref("team/tools", "latest")
    registry.push(image, version="1")
    manifest(watched, image, policy="Always")

    def version() -> str:
        ran = cli("exec", "box", "--", "sh", "-c", "echo $DEVCELL_TEST_IMAGE_VERSION")
        return ran.stdout.strip() if ran.returncode == 0 else ""

    wait_for("the cell Running from version 1", lambda: version() == "1")
    cli("exec", "box", "--", "sh", "-c", "echo kept > /workspace/kept.txt")
    registry.push(image, version="2")  # the resync (1 s) asks the registry, pulls, recreates
    wait_for("the cell recreated from version 2", lambda: version() == "2")
    assert cli("exec", "box", "--", "cat", "/workspace/kept.txt").stdout == "kept\n"
    ops = json.loads(cli("get", "operations", "-o", "json").stdout)["items"]
    updates = [o for o in ops if o["action"] == "update" and o["status"] == "Succeeded"]
    assert len(updates) == 1, ops
    assert [str(s) for s in updates[0]["plan"]] == [
        "pull-image", "stop", "keep-rootfs", "delete", "create", "start"]
    assert "Traceback" not in log.read_text()


def test_a_terminal_shows_a_progress_bar_per_layer(
        registry: Registry, state_dir: Path, tmp_path: Path) -> None:
    import pty

    image = registry.ref("team/tools")
    registry.push(image, version="tty")  # a layer the engine does not have: downloaded
    path = manifest(tmp_path, image)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "devcell", "apply", "-f", str(path)], stdin=follower,
            stdout=follower, stderr=follower, cwd=REPO, preexec_fn=child_setup,
            env=dict(os.environ, DEVCELL_HOME=str(state_dir), COLUMNS="160", TERM="xterm"))
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(120) == 0, seen.decode(errors="replace")
    finally:
        os.close(leader)
    text = seen.decode(errors="replace")
    assert f"{image} " in text and "MB" in text, text  # the layer's bar: name, bytes


def test_a_damaged_pull_record_is_a_clear_error(cli: Cli, state_dir: Path) -> None:
    state_dir.mkdir(parents=True)
    (state_dir / "pulled-images.json").write_text("{damaged")
    for verb in ("ls", "prune"):
        shown = cli("image", verb)
        assert shown.returncode == 1 and "Traceback" not in shown.stderr
        assert "pulled-images.json" in shown.stderr and "move it aside" in shown.stderr


def test_images_devcell_built_are_listed_and_pruned_by_their_labels(
        cli: Cli, state_dir: Path, tmp_path: Path, docker_client: Any) -> None:
    """What a build makes (issue 14, item 2) carries DevCell's labels for its state directory:
    listed as `built` and pruned when unused; one labelled for another state directory is not
    this one's, and is left alone."""
    import secrets

    from devcell.backends.container import base_image
    from devcell.backends.host.ids import state_hash

    state_dir.mkdir(parents=True)
    other = tmp_path / "other-state"
    names = {}
    rootfs = base_image.rootfs_tar()
    try:
        for who, directory in (("ours", state_dir), ("theirs", other)):
            # Tagged as a build tags (container_build.tag_for), with a build's labels.
            names[who] = (f"devcell-build/{state_hash(directory)[:12]}/"
                          f"{who}-{secrets.token_hex(4)}")
            docker_client.api.import_image_from_data(
                rootfs, repository=names[who], tag="1", changes=[
                    'CMD ["/bin/sh"]', "LABEL dev.devcell.managed=true",
                    f"LABEL dev.devcell.state-dir={state_hash(directory)}"])
        # A user's image made FROM ours inherits its labels, and a user's own tag on ours:
        # neither is DevCell's to remove.
        names["child"] = f"devcell-test-user/child-{secrets.token_hex(4)}"
        names["retag"] = f"devcell-test-user/retag-{secrets.token_hex(4)}"
        docker_client.api.import_image_from_data(
            rootfs, repository=names["child"], tag="1", changes=[
                'CMD ["/bin/sh"]', "LABEL dev.devcell.managed=true", "LABEL user=1",
                f"LABEL dev.devcell.state-dir={state_hash(state_dir)}"])
        docker_client.api.tag(f"{names['ours']}:1", names["retag"], "1")
        [row] = image_ls(cli)
        assert row["image"] == f"{names['ours']}:1" and row["origin"] == "built"
        assert row["size"] > 100_000
        pruned = cli("image", "prune")
        assert f"image/{names['ours']}:1 removed" in pruned.stdout, pruned.stdout
        assert names["theirs"] not in pruned.stdout and "devcell-test-user" not in pruned.stdout
        assert not docker_client.api.images(name=names["ours"])
        assert docker_client.api.images(name=names["theirs"])  # another state's: untouched
        assert docker_client.api.images(name=names["child"])  # inherited labels: untouched
        assert docker_client.api.images(name=names["retag"])  # a user's tag: kept, with data
    finally:
        for name in names.values():
            for info in docker_client.api.images(name=name):
                docker_client.api.remove_image(info["Id"], force=True)
