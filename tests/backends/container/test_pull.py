"""Pulling a cell's image, against a real registry (Debian's docker-registry on 127.0.0.1) and
the real Docker engine: each spec.imagePullPolicy, credentials, and every failure's cause."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devcell.backends.container import images
from devcell.backends.container.backend import ContainerBackend
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Plan, Settled
from devcell.errors import ImagePullFailed, retry_delay
from devcell.store.db import Database
from tests.backends.container.test_controller import backend_of, ref_of, run_in
from tests.controllers.support import apply, cell_doc, converge_all, decide, last_operation, record
from tests.registry import Registry, auth_registry, closed_port_ref, registry

__all__ = ["auth_registry", "registry"]  # fixtures


def pulled_cell(name: str, image: str, **spec: Any) -> dict[str, Any]:
    return cell_doc(name, backend="container", image=image, network={"mode": "none"},
                    services=[{"name": "idle", "command": ["sleep", "600"]}], **spec)


def test_an_image_only_in_the_registry_is_pulled_and_the_cell_becomes_ready(
        registry: Registry, ctx: Context, db: Database, state: Path) -> None:
    image = registry.ref("team/tools")
    digest = registry.push(image, version="1")
    assert not registry.local_images()
    apply(db, pulled_cell("api", image))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and plan.step_names == [
        "create-volume", "pull-image", "create", "start"]
    assert converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running" and cell.condition("Ready")["status"] == "True"
    op, steps = last_operation(db, "api")
    pulled = next(s for s in steps if s.name == "pull-image")
    assert pulled.status == "Succeeded" and pulled.outputs["digest"] == digest
    assert run_in(backend_of(ctx), ref_of(db, "api"), "echo $DEVCELL_TEST_IMAGE_VERSION") == "1\n"
    recorded = images.PullRecord(state).load()
    assert recorded[image].digest == digest and recorded[image].cells == ["api"]
    assert oct((state / images.RECORD_FILE).stat().st_mode & 0o777) == "0o600"
    assert isinstance(decide(ctx, "Cell", "api"), Settled)  # present now: no second pull


def test_if_not_present_does_not_pull_an_image_the_engine_has(
        registry: Registry, ctx: Context, db: Database, state: Path) -> None:
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    apply(db, pulled_cell("api", image))
    assert converge_all(ctx).ok
    registry.push(image, version="2")  # a newer digest: IfNotPresent does not look
    assert isinstance(decide(ctx, "Cell", "api"), Settled)
    apply(db, pulled_cell("api", image, env=[{"name": "X", "value": "1"}]))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and "pull-image" not in plan.step_names  # recreated, not pulled


def test_always_pulls_a_newer_digest_and_recreates_the_cell(
        registry: Registry, ctx: Context, db: Database, state: Path) -> None:
    image = registry.ref("team/tools", "latest")
    registry.push(image, version="1")
    apply(db, pulled_cell("api", image, imagePullPolicy="Always"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    run_in(backend, ref_of(db, "api"), "echo kept > /workspace/kept.txt")
    assert isinstance(decide(ctx, "Cell", "api"), Settled)  # registry asked: same digest

    newer = registry.push(image, version="2")
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and plan.action == "update"
    assert plan.step_names == ["pull-image", "stop", "keep-rootfs", "delete", "create", "start"]
    assert converge_all(ctx).ok
    ref = ref_of(db, "api")
    rootfs = record(db, "Cell", "api").status["rootfs"]  # a new digest: a fresh root
    assert not rootfs["kept"] and "image changed" in rootfs["why"]
    assert run_in(backend, ref, "echo $DEVCELL_TEST_IMAGE_VERSION") == "2\n"
    assert run_in(backend, ref, "cat /workspace/kept.txt") == "kept\n"  # workspace kept
    assert images.PullRecord(state).load()[image].digest == newer
    assert isinstance(decide(ctx, "Cell", "api"), Settled)  # nothing more to do


def test_always_keeps_a_running_cell_when_its_registry_is_down(
        registry: Registry, ctx: Context, db: Database) -> None:
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    apply(db, pulled_cell("api", image, imagePullPolicy="Always"))
    assert converge_all(ctx).ok
    registry.process.kill()
    registry.process.wait(10)
    assert isinstance(decide(ctx, "Cell", "api"), Settled)
    assert backend_of(ctx).observe(ref_of(db, "api")).running


def test_never_fails_clearly_without_pulling(
        registry: Registry, ctx: Context, db: Database) -> None:
    image = registry.ref("team/tools")
    registry.push(image, version="1")
    apply(db, pulled_cell("api", image, imagePullPolicy="Never"))
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Blocked) and retry_delay(decision.error) is None
    ready = record(db, "Cell", "api").condition("Ready")
    assert ready["reason"] == "ImageNotFound"
    assert "imagePullPolicy is Never" in ready["message"] and "docker pull" in ready["message"]
    assert not registry.local_images()  # nothing was pulled


def test_a_missing_tag_is_not_found_with_the_fix(
        registry: Registry, ctx: Context, db: Database) -> None:
    registry.push(registry.ref("team/tools"), version="1")
    apply(db, pulled_cell("api", registry.ref("team/tools", "no-such-tag")))
    report = converge_all(ctx)
    assert not report.ok
    ready = record(db, "Cell", "api").condition("Ready")
    assert ready["reason"] == "ImagePullFailed"
    assert "(not-found)" in ready["message"] and "check the name and tag" in ready["message"]


def test_an_unreachable_registry_is_a_temporary_failure_with_the_fix(
        ctx: Context, db: Database, state: Path) -> None:
    image = closed_port_ref()
    backend: ContainerBackend = backend_of(ctx)
    with pytest.raises(ImagePullFailed) as caught:
        backend.pull_image(ref_of_new("api"), image)
    assert caught.value.cause == "unreachable" and retry_delay(caught.value) == 0.0
    assert "cannot be reached" in str(caught.value)
    apply(db, pulled_cell("api", image))
    assert not converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert cell.condition("Ready")["reason"] == "ImagePullFailed"
    assert "(unreachable)" in cell.condition("Ready")["message"]
    assert not images.PullRecord(state).load()


def test_a_registry_with_htpasswd_refuses_without_credentials_and_pulls_with_them(
        auth_registry: Registry, ctx: Context, db: Database, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-login"))  # never root's ~/.docker
    image = auth_registry.ref("private/tools")
    auth_registry.push(image, version="1")
    apply(db, pulled_cell("api", image))
    assert not converge_all(ctx).ok
    ready = record(db, "Cell", "api").condition("Ready")
    assert ready["reason"] == "ImagePullFailed" and "(unauthorized)" in ready["message"]
    assert f"docker login {auth_registry.address}" in ready["message"]

    logged_in = tmp_path / "logged-in"
    auth_registry.login(logged_in)
    monkeypatch.setenv("DOCKER_CONFIG", str(logged_in))
    assert converge_all(ctx).ok  # the same backend, the login read at the pull
    assert record(db, "Cell", "api").phase == "Running"


def ref_of_new(name: str) -> Any:
    from tests.backends.container.support import cell

    return cell(name)


def test_a_pull_reports_one_progress_task_per_downloaded_layer(
        registry: Registry, backend: ContainerBackend) -> None:
    from devcell import progress
    from tests.test_progress import Recorder

    image = registry.ref("team/tools")
    registry.push(image, version="layers")  # a layer of its own: the engine downloads it
    recorder = Recorder()
    previous = progress.install(recorder)
    try:
        outputs = backend.pull_image(ref_of_new("api"), image)
    finally:
        progress.install(previous)
    tasks = list(recorder.tasks.values())
    assert tasks and all(image in t["description"] for t in tasks)
    assert all(t["ended"] and t["done"] == t["total"] > 0 for t in tasks)
    assert outputs["downloaded"] == sum(t["total"] for t in tasks)


def test_always_does_not_claim_an_image_someone_else_pulled(
        registry: Registry, ctx: Context, db: Database, state: Path, docker_client: Any) -> None:
    image = registry.ref("team/theirs")
    registry.push(image, version="1")
    docker_client.api.pull(image.rpartition(":")[0], tag="1")  # the user's own pull
    apply(db, pulled_cell("api", image, imagePullPolicy="Always"))
    assert converge_all(ctx).ok
    op, steps = last_operation(db, "api")
    pulled = next(s for s in steps if s.name == "pull-image")
    assert pulled.status == "Succeeded" and pulled.outputs["changed"] is False
    assert image not in images.PullRecord(state).load()  # so `image prune` never removes it
