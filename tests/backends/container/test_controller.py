"""The container backend under the real controllers: drift repair, sleep and wake, crashes,
and an unreachable engine, all against the real Docker engine."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devcell.backends.base import CellRef
from devcell.backends.container.backend import ContainerBackend
from devcell.controllers.context import Context
from devcell.controllers.plan import Plan
from devcell.store import volumes
from devcell.store.db import Database, open_database
from tests.backends.engine import IMAGE
from tests.conftest import Cli
from tests.controllers.support import apply, cell_doc, converge_all, decide, record

SERVICE = {"name": "writer",
           "command": ["sh", "-c", "while true; do date >> /workspace/ticks; sleep 1; done"]}


def container_cell(name: str, state: str = "Running", **spec: Any) -> dict[str, Any]:
    return cell_doc(name, state, **{"backend": "container", "image": IMAGE,
                                    "network": {"mode": "none"}, "services": [SERVICE], **spec})


def backend_of(ctx: Context) -> ContainerBackend:
    backend = ctx.backend("container")
    assert isinstance(backend, ContainerBackend)
    return backend


def ref_of(db: Database, name: str) -> CellRef:
    cell = record(db, "Cell", name)
    volume = volumes.for_cell(db.conn, cell.id)
    return CellRef(cell.id, cell.name, cell.spec, volume.id if volume else None)


def run_in(backend: ContainerBackend, ref: CellRef, script: str) -> str:
    out = io.BytesIO()
    assert backend.exec(ref, ["sh", "-c", script], stdout=out, stderr=out) == 0, out.getvalue()
    return out.getvalue().decode()


def test_drift_after_docker_rm_is_repaired(ctx: Context, db: Database, docker_client: Any) -> None:
    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    run_in(backend, ref, "echo precious > /workspace/work.txt")
    docker_client.api.remove_container(backend.container_name(ref), force=True)

    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and plan.step_names == ["create", "start"]
    assert converge_all(ctx).ok
    assert backend.observe(ref).running
    assert run_in(backend, ref, "cat /workspace/work.txt") == "precious\n"

    docker_client.api.stop(backend.container_name(ref), timeout=1)  # stopped by hand
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and plan.step_names == ["start"]
    assert converge_all(ctx).ok and backend.observe(ref).running
    assert not isinstance(decide(ctx, "Cell", "api"), Plan)  # settled: nothing more to do


def test_sleep_then_start_keeps_the_workspace_and_the_root_filesystem(
        ctx: Context, db: Database) -> None:
    """Issue 30: a sleep stops the container instead of removing it, so what was installed
    (a file under /usr/local), shell history and /tmp survive sleep and start; the
    workspace is still checkpointed; processes and memory are not kept."""
    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    run_in(backend, ref, "echo note > /workspace/note.txt; mkdir -p /usr/local/bin; "
                         "printf '#!/bin/sh\\necho installed\\n' > /usr/local/bin/tool; "
                         "chmod +x /usr/local/bin/tool; echo scratch > /tmp/scratch; "
                         "sleep 6543 >/dev/null 2>&1 &")
    assert "sleep 6543" in run_in(backend, ref, "ps")

    apply(db, container_cell("api", "Sleeping"))
    assert converge_all(ctx).ok
    seen = backend.observe(ref)
    assert seen.exists and not seen.running  # stopped, kept: memory freed, files kept
    cell = record(db, "Cell", "api")
    sleep = cell.status["sleep"]
    assert sleep["consistency"] == "filesystem" and sleep["rootfs"] is True
    assert (Path(sleep["checkpoint"]) / "workspace" / "note.txt").read_text() == "note\n"
    ready = cell.condition("Ready") or {}
    assert "root filesystem kept" in ready["message"]
    assert not isinstance(decide(ctx, "Cell", "api"), Plan)  # asleep: nothing more to do

    apply(db, container_cell("api", "Running"))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and plan.step_names == ["start"]  # the kept container
    assert converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running"
    assert "processes and memory were not restored" in cell.status["lastStart"]["note"]
    assert "root filesystem" in cell.status["lastStart"]["note"]
    assert run_in(backend, ref, "cat /workspace/note.txt; /usr/local/bin/tool; "
                                "cat /tmp/scratch") == "note\ninstalled\nscratch\n"
    assert "sleep 6543" not in run_in(backend, ref, "ps")  # its processes were not kept


def test_spec_change_recreates_and_keeps_the_workspace(ctx: Context, db: Database) -> None:
    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    run_in(backend, ref, "echo kept > /workspace/kept.txt")
    before = backend.observe(ref).runtime_hash
    apply(db, container_cell("api", env=[{"name": "NEW", "value": "1"}]))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan)
    assert plan.step_names == ["stop", "keep-rootfs", "delete", "create", "start"]
    assert converge_all(ctx).ok
    ref = ref_of(db, "api")
    assert backend.observe(ref).runtime_hash != before
    assert run_in(backend, ref, "cat /workspace/kept.txt; echo $NEW") == "kept\n1\n"


def test_unreachable_engine_is_a_condition_not_a_crash(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Needs no engine: DOCKER_HOST points nowhere."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")
    db = open_database(state)
    ctx = Context(db, trigger="test")
    try:
        apply(db, container_cell("api"))
        report = converge_all(ctx)
        cell = record(db, "Cell", "api")
    finally:
        ctx.close()
        db.close()
    assert not report.ok
    ready = cell.condition("Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "BackendUnavailable"
    assert "unix:///nonexistent" in ready["message"] and "docker-setup" in ready["message"]


def test_orphan_from_a_crash_between_engine_call_and_commit(cli: Cli, state_dir: Path,
                                                          tmp_path: Path) -> None:
    from tests.backends.engine import remove_containers, require_engine

    require_engine()
    manifest = tmp_path / "cell.yaml"
    manifest.write_text(textwrap.dedent(f"""\
        apiVersion: devcell.dev/v1alpha1
        kind: Cell
        metadata: {{name: api}}
        spec:
          backend: container
          image: {IMAGE}
          network: {{mode: none}}
        """))
    try:
        crashed = cli("apply", "-f", str(manifest),
                      env={"DEVCELL_FAILPOINT": "step.create.after-call"})
        assert crashed.returncode == -9, crashed.stderr  # SIGKILLed after the engine call
        backend = ContainerBackend(state_dir=state_dir)
        try:
            orphans = backend.owned_containers()  # found by labels, not by the database
            assert [o["cell"] for o in orphans] == ["api"] and orphans[0]["state"] == "created"
            again = cli("apply", "-f", str(manifest))
            assert again.returncode == 0, again.stderr
            described = json.loads(cli("get", "cells", "api", "-o", "json").stdout)
            assert described["status"]["phase"] == "Running"
            after = backend.owned_containers()
            assert len(after) == 1 and after[0]["name"] == orphans[0]["name"]  # adopted, not doubled
            assert after[0]["state"] == "running"
        finally:
            backend.close()
        ops = cli("get", "operations").stdout
        assert "Interrupted" in ops or "Failed" in ops
    finally:
        remove_containers(state_dir)


def test_orphan_sweep_removes_only_unaccounted_resources(ctx: Context, db: Database,
                                                         docker_client: Any) -> None:
    from devcell.reconciler import orphans
    from tests.backends.container.support import cell, up

    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    kept = ref_of(db, "api")
    stray = cell("stray")  # made by an operation that died before its commit
    up(backend, stray)
    backend.checkpoint(stray, "snap_stray")
    foreign = docker_client.containers.run(IMAGE, ["sleep", "600"], detach=True,
                                           network_mode="none")
    try:
        owned = {(o.kind, o.id) for o in backend.list_owned()}
        assert {("cell", stray.id), ("volume", stray.volume_id), ("checkpoint", "snap_stray"),
                ("cell", kept.id), ("volume", kept.volume_id)} <= owned
        removed = {(o.kind, o.id) for o in orphans.sweep(ctx, "container")}
        assert removed == {("cell", stray.id), ("volume", stray.volume_id),
                           ("checkpoint", "snap_stray")}
        assert backend.observe(kept).running and not backend.observe(stray).exists
        assert docker_client.api.inspect_container(foreign.id)["State"]["Running"]
    finally:
        foreign.remove(force=True)


def test_containers_and_volumes_name_the_operation_that_made_them(
        ctx: Context, db: Database, docker_client: Any) -> None:
    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    created_by = {r[0]: r[1] for r in db.conn.execute(
        "SELECT s.name, s.op_id FROM operation_steps s JOIN operations o ON o.id = s.op_id "
        "WHERE o.object_id = ? AND s.status = 'Succeeded'", (ref.id,))}
    labels = docker_client.api.inspect_container(backend.container_name(ref))["Config"]["Labels"]
    assert labels["dev.devcell.operation"] == created_by["create"]
    marker = json.loads((backend.layout.volume(ref.volume_id or "") / "volume.json").read_text())
    assert marker["operation"] == created_by["create-volume"]


def test_a_disk_that_fills_up_during_sleep_leaves_the_cell_running(
        engine: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state directory's disk fills up right after `quiesce` froze the cell: whichever
    write fails then (the checkpoint's copy, the operation's record), the cell is not left
    paused, and the error names the full disk."""
    from devcell import failpoints
    from devcell.errors import DevCellError
    from tests.backends.engine import remove_containers
    from tests.store import faulty

    with faulty.small_disk(tmp_path / "disk", "24m") as disk:
        state = disk / "state"
        db = open_database(state)
        ctx = Context(db, trigger="test")
        try:
            apply(db, container_cell("api"))
            assert converge_all(ctx).ok
            backend = backend_of(ctx)
            ref = ref_of(db, "api")
            run_in(backend, ref, "head -c 4194304 /dev/zero > /workspace/data.bin")
            original = failpoints.hit

            def hit(name: str) -> None:
                if name == "step.quiesce.after-call":
                    faulty.fill(disk)
                original(name)

            monkeypatch.setattr(failpoints, "hit", hit)
            apply(db, container_cell("api", "Sleeping"))
            try:
                report = converge_all(ctx)
                failed = not report.ok
            except DevCellError as exc:
                assert "the disk is full" in str(exc)
                failed = True
            assert failed
            info = backend._find(ref)
            assert info is not None and info["State"] == "running"  # not paused, not gone
        finally:
            ctx.close()
            db.close()
            remove_containers(state)


def test_a_recreate_on_the_same_image_keeps_the_root_filesystem(
        ctx: Context, db: Database, docker_client: Any) -> None:
    """Issue 30: a spec change (here env) recreates the container; on the same image the old
    one's root filesystem is committed and the new one made from it, so what was installed
    stays, while the new spec applies; asleep or awake alike. An image change starts fresh
    and says so; deleting the cell removes what was kept. About 15 s (three recreates, one
    tiny image built)."""
    from devcell.backends.container import rootfs
    from devcell.store import events

    apply(db, container_cell("api", env=[{"name": "OLD", "value": "dropped-later"}]))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    kept_tag = rootfs.tag(backend.owner, ref.id)
    run_in(backend, ref, "mkdir -p /usr/local/bin; echo v1 > /usr/local/bin/tool.txt")

    apply(db, container_cell("api", env=[{"name": "NEW", "value": "1"}]))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan)
    assert plan.step_names == ["stop", "keep-rootfs", "delete", "create", "start"]
    assert converge_all(ctx).ok
    # the new spec applies: a variable it dropped is gone, though the old container had it
    assert run_in(backend, ref, "cat /usr/local/bin/tool.txt; echo $NEW ${OLD-unset}"
                  ) == "v1\n1 unset\n"
    kept = docker_client.images.get(kept_tag)
    assert not any(e.startswith("OLD=") for e in kept.attrs["Config"]["Env"])
    assert kept.labels["dev.devcell.managed"] == "false"  # no build: image ls/prune skip it
    cell = record(db, "Cell", "api")
    assert cell.status["rootfs"]["kept"] is True
    said = [e["message"] for e in events.for_object(db.conn, cell.id) if e["reason"] == "Updated"]
    assert "root filesystem (what was installed) was kept" in said[-1]
    seen = backend.observe(ref).detail["image_id"]
    assert seen == docker_client.images.get(IMAGE).id  # the cell's own image, not the kept one

    run_in(backend, ref, "echo v2 >> /usr/local/bin/tool.txt")  # asleep, then a change, then up
    apply(db, container_cell("api", "Sleeping", env=[{"name": "NEW", "value": "1"}]))
    assert converge_all(ctx).ok
    apply(db, container_cell("api", env=[{"name": "NEW", "value": "2"}]))
    assert converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert "root filesystem (what was installed) was kept" in cell.status["lastStart"]["note"]
    assert run_in(backend, ref, "cat /usr/local/bin/tool.txt; echo $NEW") == "v1\nv2\n2\n"

    other = "devcell-test/rootfs-fresh:1"
    docker_client.images.build(fileobj=io.BytesIO(
        f"FROM {IMAGE}\nLABEL devcell.test=rootfs-fresh\n".encode()), tag=other, rm=True)
    try:
        apply(db, container_cell("api", image=other, env=[{"name": "NEW", "value": "2"}]))
        assert converge_all(ctx).ok
        cell = record(db, "Cell", "api")
        assert cell.status["rootfs"] == {**cell.status["rootfs"], "kept": False}
        assert "image changed" in cell.status["rootfs"]["why"]
        assert run_in(backend, ref, "cat /usr/local/bin/tool.txt 2>/dev/null || echo fresh"
                      ) == "fresh\n"
        assert not docker_client.images.list(name=kept_tag.rpartition(":")[0])  # dropped

        run_in(backend, ref, "mkdir -p /usr/local/bin; echo v3 > /usr/local/bin/tool.txt")
        apply(db, container_cell("api", image=other, env=[{"name": "NEW", "value": "3"}]))
        assert converge_all(ctx).ok
        assert docker_client.images.list(name=kept_tag.rpartition(":")[0])
        # The cell's deletion: its delete step (the gate for its changed workspace aside).
        from devcell.controllers.cell import _STEPS
        from devcell.controllers.plan import Step
        from devcell.controllers.steps import StepName

        _STEPS[StepName.DELETE](backend, ref, Step(StepName.DELETE, {"forget_caches": True}))
        assert not backend.observe(ref).exists
        assert not docker_client.images.list(name=kept_tag.rpartition(":")[0])  # gone with it
    finally:
        docker_client.images.remove(other, force=False)


def test_a_recreate_on_the_kept_root_filesystem_does_not_run_postcreate_again(
        ctx: Context, db: Database) -> None:
    """What postCreate installed is in the kept root filesystem: the same hooks are not run
    twice on it (a non-idempotent `git clone` would fail); changed hooks run."""
    hooks = {"postCreate": [["sh", "-c", "echo ran >> /tmp/post-create"]]}
    apply(db, container_cell("api", hooks=hooks))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    assert run_in(backend, ref_of(db, "api"), "cat /tmp/post-create") == "ran\n"
    apply(db, container_cell("api", hooks=hooks, env=[{"name": "NEW", "value": "1"}]))
    plan = decide(ctx, "Cell", "api")
    assert isinstance(plan, Plan) and "keep-rootfs" in plan.step_names
    assert converge_all(ctx).ok
    ref = ref_of(db, "api")
    assert run_in(backend, ref, "cat /tmp/post-create; echo $NEW") == "ran\n1\n"
    changed = {"postCreate": [["sh", "-c", "echo again >> /tmp/post-create"]]}
    apply(db, container_cell("api", hooks=changed, env=[{"name": "NEW", "value": "1"}]))
    assert converge_all(ctx).ok
    assert run_in(backend, ref_of(db, "api"), "cat /tmp/post-create") == "ran\nagain\n"


def test_a_kept_root_filesystem_left_by_a_deleted_cell_is_swept(
        ctx: Context, db: Database) -> None:
    """A delete that died between removing the container and dropping its kept image leaves
    the image; the sweep of deleted cells' caches (gc, the orphan sweep) drops it."""
    from devcell.backends.container import rootfs

    apply(db, container_cell("api"))
    assert converge_all(ctx).ok
    apply(db, container_cell("api", env=[{"name": "NEW", "value": "1"}]))
    assert converge_all(ctx).ok
    backend = backend_of(ctx)
    ref = ref_of(db, "api")
    assert rootfs.kept_cell_ids(backend.owner) == {ref.id}
    backend.delete(ref)  # the container only, as an interrupted delete leaves it
    assert backend.prune_cell_caches(frozenset({ref.id})) == []  # still a cell: kept
    assert rootfs.kept_cell_ids(backend.owner) == {ref.id}
    assert f"kept root filesystem of {ref.id}" in backend.prune_cell_caches(frozenset())
    assert rootfs.kept_cell_ids(backend.owner) == set()
