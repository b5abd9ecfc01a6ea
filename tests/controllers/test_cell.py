"""Cell controller decisions: what a cell plans from desired, recorded and observed state."""

from __future__ import annotations

import pytest

from devcell.backends.base import CellRef
from devcell.controllers.cell import CellController, runtime_hash
from devcell.controllers.context import Context
from devcell.controllers.plan import Blocked, Plan, Settled, Wait, When
from devcell.store import desired, volumes
from devcell.store.db import Database
from tests.controllers.support import (
    apply,
    cell_doc,
    converge_all,
    decide,
    fake,
    op_count,
    plan_of,
    record,
    snapshot_doc,
)


def names(plan: Plan) -> list[str]:
    return plan.step_names


# -- new cells -------------------------------------------------------------------------------


def test_new_running_cell_plans_volume_create_start(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", env=[{"name": "A", "value": "1"}]))
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "create"
    assert names(plan) == ["create-volume", "create", "start"]
    volume_step, create_step, _ = plan.steps
    assert volume_step.args["from_checkpoint"] is None
    assert volume_step.args["record"] is True
    assert volume_step.args["volume_id"].startswith("vol_")
    assert create_step.args["runtime_hash"] == runtime_hash(record(db, "Cell", "api").spec,
                                                            db.hash_key)
    assert all(s.when is When.SUCCESS for s in plan.steps)
    assert plan.backend == "fake"


def test_deciding_has_no_side_effects_on_the_backend(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    first = plan_of(ctx, "Cell", "api")
    second = plan_of(ctx, "Cell", "api")
    assert names(first) == names(second)
    assert fake(ctx).calls() == []
    assert op_count(db) == 0
    assert db.conn.execute("SELECT count(*) FROM volumes").fetchone()[0] == 0


def test_new_stopped_cell_plans_no_start(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("worker", "Stopped"))
    plan = plan_of(ctx, "Cell", "worker")
    assert names(plan) == ["create-volume", "create"]
    assert "start" not in names(plan)


def test_new_sleeping_cell_only_prepares_its_workspace(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("lazy", "Sleeping"))
    plan = plan_of(ctx, "Cell", "lazy")
    assert names(plan) == ["create-volume"]
    converge_all(ctx)
    cell = record(db, "Cell", "lazy")
    assert cell.phase == "Sleeping"
    observed = fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec))
    assert not observed.exists
    assert isinstance(decide(ctx, "Cell", "lazy"), Settled)


def test_unknown_id_is_settled(ctx: Context) -> None:
    assert CellController().decide(ctx, "cell_doesnotexist0000") == Settled()


# -- state changes ---------------------------------------------------------------------------


def test_running_cell_set_sleeping_plans_quiesce_checkpoint_delete(db: Database,
                                                                   ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    cell = record(db, "Cell", "api")
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "sleep"
    assert names(plan) == ["quiesce", "checkpoint", "delete", "resume"]
    whens = {s.name: s.when for s in plan.steps}
    assert whens["resume"] is When.FAILURE  # compensation only
    assert whens["checkpoint"] is When.SUCCESS
    checkpoint = plan.steps[1]
    assert checkpoint.args["checkpoint_id"] == f"sleep-{cell.id}-g{cell.generation}"


def test_stopped_cell_set_sleeping_skips_quiesce(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "sleep"
    assert names(plan) == ["checkpoint", "delete"]


def test_sleeping_cell_set_running_plans_wake(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Running")
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "wake"
    assert names(plan) == ["create", "start"]  # the workspace volume survived the sleep
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    assert cell.phase == "Running"
    assert cell.status["lastStart"]["from"] == "sleep"


def test_running_cell_set_stopped_plans_stop_only(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    apply(db, cell_doc("api", "Stopped"))
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "stop"
    assert names(plan) == ["stop"]


def test_spec_change_recreates_the_runtime_and_keeps_the_volume(db: Database,
                                                                ctx: Context) -> None:
    apply(db, cell_doc("api", env=[{"name": "A", "value": "1"}]))
    converge_all(ctx)
    before = volumes.for_cell(db.conn, record(db, "Cell", "api").id)
    assert before is not None
    apply(db, cell_doc("api", env=[{"name": "A", "value": "2"}]))
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "update"
    assert names(plan) == ["stop", "delete", "create", "start"]
    assert "create-volume" not in names(plan) and "delete-volume" not in names(plan)
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    after = volumes.for_cell(db.conn, cell.id)
    assert after == before
    assert db.conn.execute("SELECT count(*) FROM volumes WHERE cell_id = ?",
                           (cell.id,)).fetchone()[0] == 1
    observed = fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec))
    assert observed.running and observed.runtime_hash == runtime_hash(cell.spec, db.hash_key)
    assert (cell.phase, cell.observed_generation, cell.generation) == ("Running", 2, 2)


def test_spec_change_on_stopped_cell_recreates_without_start(db: Database,
                                                             ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped", image="one"))
    converge_all(ctx)
    apply(db, cell_doc("api", "Stopped", image="two"))
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["delete", "create"]


def test_spec_change_while_sleeping_plans_nothing_until_woken(db: Database,
                                                              ctx: Context) -> None:
    apply(db, cell_doc("api", "Sleeping", image="one"))
    converge_all(ctx)
    apply(db, cell_doc("api", "Sleeping", image="two"))
    decision = decide(ctx, "Cell", "api")
    assert isinstance(decision, Settled)
    cell = record(db, "Cell", "api")
    assert cell.observed_generation == cell.generation == 2
    apply(db, cell_doc("api", "Running", image="two"))
    plan = plan_of(ctx, "Cell", "api")
    assert plan.steps[names(plan).index("create")].args["runtime_hash"] == runtime_hash(
        record(db, "Cell", "api").spec, db.hash_key)


def test_labels_only_change_plans_nothing(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", labels={"team": "core"}))
    converge_all(ctx)
    ops = op_count(db)
    result = apply(db, cell_doc("api", labels={"team": "platform"}))
    assert [c.outcome for c in result.changes] == ["configured"]
    assert result.to_reconcile == []
    assert isinstance(decide(ctx, "Cell", "api"), Settled)
    converge_all(ctx)
    assert op_count(db) == ops
    assert record(db, "Cell", "api").labels == {"team": "platform"}


# -- forks -----------------------------------------------------------------------------------


def test_fork_waits_until_its_snapshot_is_ready(db: Database, ctx: Context) -> None:
    # The source cell is Stopped, so the snapshot cannot be taken yet.
    apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"),
          cell_doc("exp", fork_of="snap"))
    report = converge_all(ctx)
    fork = record(db, "Cell", "exp")
    assert ("Cell", fork.id) in report.waiting
    decision = decide(ctx, "Cell", "exp")
    assert isinstance(decision, Wait)
    assert decision.reason == "WaitingForSnapshot"
    assert '"snap"' in decision.message and "Pending" in decision.message
    fork = record(db, "Cell", "exp")
    assert fork.phase == "Pending"
    ready = fork.condition("Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "WaitingForSnapshot"
    assert volumes.for_cell(db.conn, fork.id) is None
    assert not any(target == "exp" for _, target, _ in fake(ctx).calls())

    apply(db, cell_doc("api", "Running"))
    converge_all(ctx, [("Cell", record(db, "Cell", "api").id)])
    assert record(db, "Snapshot", "snap").phase == "Pending"  # not converged yet
    converge_all(ctx, [("Snapshot", record(db, "Snapshot", "snap").id)])
    snap = record(db, "Snapshot", "snap")
    assert snap.phase == "Ready"
    plan = plan_of(ctx, "Cell", "exp")
    assert plan.action == "fork"
    assert names(plan) == ["create-volume", "create", "start"]
    assert plan.steps[0].args["from_checkpoint"] == snap.id
    converge_all(ctx)
    fork = record(db, "Cell", "exp")
    assert fork.phase == "Running"
    vol = volumes.for_cell(db.conn, fork.id)
    assert vol is not None and vol.from_snapshot_id == snap.id


def test_fork_and_its_sources_converge_in_one_pass(db: Database, ctx: Context) -> None:
    result = apply(db, cell_doc("api"), snapshot_doc("snap", "api"),
                   cell_doc("exp", fork_of="snap"), snapshot_doc("snap2", "exp"),
                   cell_doc("exp2", fork_of="snap2"))
    report = converge_all(ctx, result.to_reconcile)
    assert report.ok, report
    assert {record(db, "Cell", n).phase for n in ("api", "exp", "exp2")} == {"Running"}
    assert {record(db, "Snapshot", n).phase for n in ("snap", "snap2")} == {"Ready"}


# -- deletion --------------------------------------------------------------------------------


def test_deleting_cell_plans_teardown_and_its_snapshots_remain(db: Database,
                                                               ctx: Context) -> None:
    apply(db, cell_doc("api"), snapshot_doc("snap", "api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    vol = volumes.for_cell(db.conn, cell.id)
    assert vol is not None
    desired.delete(db, "Cell", "api")
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "delete"
    assert names(plan) == ["stop", "delete", "delete-volume"]
    assert plan.steps[2].args["volume_id"] == vol.id
    report = converge_all(ctx, [("Cell", cell.id)])
    assert report.ok
    gone = record(db, "Cell", cell.id)
    assert gone.deleted_at is not None and gone.phase == "Deleted"
    assert not fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec)).exists
    assert not fake(ctx).volume_exists(vol.id)
    assert volumes.for_cell(db.conn, cell.id) is None
    assert db.conn.execute("SELECT count(*) FROM attachments").fetchone()[0] == 0
    # the snapshot survives its cell, as record and as checkpoint
    snap = record(db, "Snapshot", "snap")
    assert snap.deleted_at is None and snap.phase == "Ready"
    assert isinstance(decide(ctx, "Snapshot", "snap"), Settled)
    assert fake(ctx).checkpoint_exists(snap.id)
    # and a new fork can still be made from it
    apply(db, cell_doc("phoenix", fork_of="snap"))
    assert converge_all(ctx).ok
    assert record(db, "Cell", "phoenix").phase == "Running"
    # the name of the deleted cell is free again
    apply(db, cell_doc("api"))
    assert record(db, "Cell", "api").id != cell.id


def test_deleting_stopped_cell_does_not_stop_it_again(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"))
    converge_all(ctx)
    desired.delete(db, "Cell", "api")
    assert names(plan_of(ctx, "Cell", "api")) == ["delete", "delete-volume"]


def test_deleting_a_fork_that_never_started_plans_no_backend_steps(db: Database,
                                                                   ctx: Context) -> None:
    apply(db, cell_doc("api", "Stopped"), snapshot_doc("snap", "api"),
          cell_doc("exp", fork_of="snap"))
    converge_all(ctx)
    desired.delete(db, "Cell", "exp")
    plan = plan_of(ctx, "Cell", "exp")
    assert plan.action == "delete" and plan.steps == []
    fork_id = record(db, "Cell", "exp").id
    converge_all(ctx, [("Cell", fork_id)])
    assert record(db, "Cell", fork_id).deleted_at is not None
    assert isinstance(decide(ctx, "Cell", fork_id), Settled)


# -- level-triggered: plans follow what the backend observes -----------------------------------


def test_cell_lost_by_the_backend_is_recreated(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    fake(ctx).delete(CellRef(cell.id, cell.name, cell.spec))
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["create", "start"]
    assert converge_all(ctx).ok
    assert fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec)).running


def test_cell_stopped_behind_our_back_is_started(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    fake(ctx).stop(CellRef(cell.id, cell.name, cell.spec))
    plan = plan_of(ctx, "Cell", "api")
    assert plan.action == "start" and names(plan) == ["start"]


def test_volume_lost_by_the_backend_is_recreated_under_the_same_id(db: Database,
                                                                   ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    vol = volumes.for_cell(db.conn, cell.id)
    assert vol is not None
    fake(ctx).delete_volume(vol.id)
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["create-volume"]
    assert plan.steps[0].args == {"volume_id": vol.id, "from_checkpoint": None, "record": False}
    assert converge_all(ctx).ok
    assert fake(ctx).volume_exists(vol.id)
    assert db.conn.execute("SELECT count(*) FROM volumes").fetchone()[0] == 1


def test_unavailable_backend_is_a_condition_not_a_plan(db: Database,
                                                                ctx: Context,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent")  # no engine: unavailable
    apply(db, {**cell_doc("box"), "spec": {"backend": "container", "image": "busybox"}})
    decision = decide(ctx, "Cell", "box")
    assert isinstance(decision, Blocked) and decision.message
    assert "container" in decision.message
    ready = record(db, "Cell", "box").condition("Ready")
    assert ready is not None and ready["reason"] == "BackendUnavailable"
    report = converge_all(ctx)
    assert ("Cell", record(db, "Cell", "box").id) in report.failed
    assert op_count(db) == 0


def sleep_checkpoints(ctx: Context, cell_id: str) -> list[str]:
    return [r[0] for r in fake(ctx).conn.execute(
        "SELECT id FROM checkpoints WHERE cell_id = ? AND id LIKE 'sleep-%'", (cell_id,))]


def test_sleep_checkpoint_is_taken_under_a_per_generation_id(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    assert sleep_checkpoints(ctx, cell.id) == [f"sleep-{cell.id}-g2"]
    assert cell.status["sleep"]["checkpoint"] == f"fake://sleep-{cell.id}-g2"
    assert cell.status["sleep"]["consistency"] == "metadata"


def test_deleting_a_cell_that_slept_leaves_no_sleep_checkpoint(db: Database,
                                                              ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    for state in ("Sleeping", "Running", "Sleeping", "Running"):
        desired.set_cell_state(db, "api", state)
        assert converge_all(ctx).ok
    desired.delete(db, "Cell", "api")
    assert converge_all(ctx, [("Cell", cell.id)]).ok
    assert record(db, "Cell", cell.id).deleted_at is not None
    assert sleep_checkpoints(ctx, cell.id) == []


def test_sleeping_to_stopped_does_not_claim_a_start(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Sleeping")
    converge_all(ctx)
    desired.set_cell_state(db, "api", "Stopped")
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["create"]
    assert converge_all(ctx).ok
    cell = record(db, "Cell", "api")
    assert cell.phase == "Stopped"
    assert not fake(ctx).observe(CellRef(cell.id, cell.name, cell.spec)).running
    reasons = [r[0] for r in db.execute("SELECT reason FROM events WHERE object_id = ?",
                                        (cell.id,))]
    assert "Woken" not in reasons
    assert "lastStart" not in cell.status
    assert plan.action != "wake"

def test_an_observe_failure_is_a_condition_not_a_crash(db: Database, ctx: Context,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from devcell.backends.fake import FakeBackend
    from devcell.errors import BackendError, BackendUnavailable

    apply(db, cell_doc("api"))
    converge_all(ctx)

    def broken(self: FakeBackend, cell: object) -> None:
        raise BackendUnavailable("the engine went away")

    monkeypatch.setattr(FakeBackend, "observe", broken)
    report = converge_all(ctx)
    api = record(db, "Cell", "api")
    assert list(report.failed.values()) == ["the engine went away"]
    ready = api.condition("Ready") or {}
    assert ready["reason"] == "BackendUnavailable" and ready["status"] == "False"
    assert "observing the cell failed: the engine went away" in ready["message"]

    def odd(self: FakeBackend, cell: object) -> None:
        raise BackendError("listing failed")

    monkeypatch.setattr(FakeBackend, "observe", odd)
    converge_all(ctx)
    assert (record(db, "Cell", "api").condition("Ready") or {})["reason"] == "ObserveFailed"


def test_mounts_are_part_of_the_runtime_hash_only_when_present() -> None:
    base = {"image": "i", "services": [], "network": {"mode": "none"}}
    key = b"k" * 32
    assert runtime_hash(base, key) == runtime_hash({**base, "mounts": []}, key)  # no churn
    rw = {**base, "mounts": [{"hostPath": "/s", "mountPath": "/s", "readOnly": False}]}
    ro = {**base, "mounts": [{"hostPath": "/s", "mountPath": "/s", "readOnly": True}]}
    assert len({runtime_hash(base, key), runtime_hash(rw, key), runtime_hash(ro, key)}) == 3


def test_sidecars_and_volumes_are_part_of_the_runtime_hash_only_when_present() -> None:
    from devcell.controllers.cell import sidecar_ref, with_sidecar_images

    base = {"image": "i", "services": [], "network": {"mode": "none"}}
    key = b"k" * 32
    assert runtime_hash(base, key) == runtime_hash({**base, "sidecars": [], "volumes": []}, key)
    db = {**base, "sidecars": [{"name": "db", "image": "postgres:16"}]}
    cached = {**base, "volumes": [{"name": "cache", "mountPath": "/c"}]}
    assert len({runtime_hash(base, key), runtime_hash(db, key), runtime_hash(cached, key)}) == 3
    # A built sidecar runs its build's tag: a new digest is a new runtime.
    built = {**base, "sidecars": [{"name": "db", "build": {"context": "/src/db"}}]}
    one = with_sidecar_images(built, {"db": "devcell-build/o/api.db:1"})
    assert one["sidecars"] == [{"name": "db", "image": "devcell-build/o/api.db:1"}]
    assert runtime_hash(one, key) != runtime_hash(
        with_sidecar_images(built, {"db": "devcell-build/o/api.db:2"}), key)
    ref = sidecar_ref(CellRef("cell_1", "api", built, "vol_1"), built["sidecars"][0])
    assert (ref.name, ref.spec, ref.id) == ("api.db", {"build": {"context": "/src/db"}},
                                            "cell_1")


def test_host_and_attach_hooks_recreate_nothing_and_the_env_probe_does() -> None:
    base = {"image": "i", "services": [], "hooks": {"postStart": [["true"]]}}
    key = b"k" * 32
    hooked = {**base, "hooks": {"postStart": [["true"]], "postAttach": [["echo", "hi"]],
                                "hostInitialize": [["touch", "x"]]}}
    assert runtime_hash(base, key) == runtime_hash(hooked, key)
    assert runtime_hash(base, key) != runtime_hash({**base, "userEnvProbe": "loginShell"}, key)
    bare = {"image": "i", "services": []}
    assert runtime_hash(bare, key) == runtime_hash({**bare, "hooks": {"postAttach": [["a"]]}},
                                                   key)

def test_a_pruned_cell_keeps_its_workspace_as_a_safety_snapshot_taken_once(
        db: Database, ctx: Context) -> None:
    from devcell.store import prunes

    apply(db, cell_doc("api"))
    converge_all(ctx)
    cell = record(db, "Cell", "api")
    vol = volumes.for_cell(db.conn, cell.id)
    assert vol is not None
    _edit_workspace(ctx, vol.id)  # changed since any snapshot: a plain delete would ask
    desired.delete(db, "Cell", "api", reason="Pruned", keep_pruned=3600)
    kept = prunes.of(record(db, "Cell", "api"))
    assert kept is not None and kept.safety == "api-pruned-1" and kept.keep_seconds == 3600
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["stop", "checkpoint", "delete", "delete-volume"]
    assert plan.gate is None  # nothing is lost, so nothing to approve
    assert plan.steps[1].args["checkpoint_id"] == kept.safety_id
    # a crash after the checkpoint call, before its step was recorded: the same id again
    ref = CellRef(cell.id, cell.name, cell.spec, vol.id)
    fake(ctx).checkpoint(ref, kept.safety_id)
    assert converge_all(ctx, [("Cell", cell.id)]).ok
    assert record(db, "Cell", cell.id).deleted_at is not None
    safety = record(db, "Snapshot", "api-pruned-1")
    assert safety.id == kept.safety_id and safety.phase == "Ready"
    assert safety.spec == {"cell": "api", "ttl": "1h"}
    assert fake(ctx).checkpoint_exists(kept.safety_id)
    assert db.conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 1
    # the workspace seeds a new cell of that name
    apply(db, cell_doc("api", fork_of="api-pruned-1"))
    assert converge_all(ctx).ok


def test_a_prune_that_keeps_nothing_asks_as_a_delete_does(db: Database, ctx: Context) -> None:
    apply(db, cell_doc("api"))
    converge_all(ctx)
    vol = volumes.for_cell(db.conn, record(db, "Cell", "api").id)
    assert vol is not None
    _edit_workspace(ctx, vol.id)
    desired.delete(db, "Cell", "api", reason="Pruned", keep_pruned=0)
    plan = plan_of(ctx, "Cell", "api")
    assert names(plan) == ["stop", "delete", "delete-volume"]
    assert plan.gate is not None and "loses that work" in plan.gate.reason


def _edit_workspace(ctx: Context, volume_id: str) -> None:
    """Someone edits the workspace (the fake backend counts writes)."""
    backend = fake(ctx)
    backend.conn.execute("UPDATE volumes SET writes = writes + 1 WHERE id = ?", (volume_id,))
    backend.conn.commit()
