"""Ready means serving (issue 30 part 4), with the fake backend: a crash loop makes Ready
False with its reason, a readiness check holds Ready until it passes, a failed postCreate
leaves the cell running and is run again only when asked, and `cell restart` and `cell
rerun-hooks` are recorded operations. What a service's supervisor reports is set with
`FakeBackend.set_services`, as the container backend reads it from the cell's state files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from devcell.api import apply as api
from devcell.api import cells
from devcell.backends import fake
from devcell.errors import ManifestError
from devcell.reconciler import observe
from devcell.store import objects, operations
from devcell.store.db import open_database
from tests.controllers.support import cell_doc

WEB = {"name": "web", "command": ["httpd", "-f"]}
CHECKED = {**WEB, "ready": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}


def _record(state: Path, name: str = "api") -> objects.ObjectRecord:
    db = open_database(state)
    try:
        return objects.require(db.conn, "Cell", name)
    finally:
        db.close()


def _ready(state: Path, name: str = "api") -> dict[str, Any]:
    return _record(state, name).condition("Ready") or {}


def _report(state: Path, services: dict[str, dict[str, Any]] | None, name: str = "api") -> None:
    """What the cell's supervisor says now, then observed as every acting command does."""
    backend = fake.FakeBackend(state_dir=state)
    try:
        backend.set_services(_record(state, name).id, services)
        calls = backend.calls()
    finally:
        backend.close()
    assert calls is not None
    db = open_database(state)
    try:
        observe.observe_and_record(db, [_record(state, name).id])
    finally:
        db.close()


def _calls(state: Path) -> list[tuple[str, str, str]]:
    backend = fake.FakeBackend(state_dir=state)
    try:
        return backend.calls()
    finally:
        backend.close()


def _operations(state: Path, name: str = "api") -> list[str]:
    db = open_database(state)
    try:
        cell = objects.require(db.conn, "Cell", name)
        return [op["action"] for op in operations.for_object(db.conn, cell.id)]
    finally:
        db.close()


def test_a_crash_looping_service_makes_ready_false_with_the_reason(
        state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api", services=[WEB]))]).ok
    _report(state, {"web": {"state": "running", "restarts": 0}})
    assert _ready(state)["status"] == "True"
    _report(state, {"web": {"state": "crash-looping", "restarts": 5, "lastExit": 127}})
    ready = _ready(state)
    assert (ready["status"], ready["reason"]) == ("False", "ServiceCrashLooping")
    assert "exited with status 127" in ready["message"] and "5 restarts" in ready["message"]
    view = _record(state).status["services"]["web"]
    assert view == {"state": "crash-looping", "restarts": 5, "lastExit": 127}
    # A re-apply of the unchanged manifest does not paper over it.
    assert api.apply(state, [write("api.yaml", cell_doc("api", services=[WEB]))]) is not None
    assert _ready(state)["reason"] == "ServiceCrashLooping"
    _report(state, {"web": {"state": "running", "restarts": 6, "lastExit": 0}})
    assert _ready(state)["status"] == "True"
    assert _record(state).status["services"]["web"]["restarts"] == 6


def test_a_readiness_check_holds_ready_until_it_passes(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api", services=[CHECKED]))]) \
        is not None
    ready = _ready(state)
    assert (ready["status"], ready["reason"]) == ("False", "ServiceNotReady")
    assert "tcp 127.0.0.1:8080" in ready["message"]
    _report(state, {"web": {"state": "running"}, })
    assert _ready(state)["reason"] == "ServiceNotReady"
    _report(state, {"web": {"state": "running", "check": {"ready": False, "failed": 2}}})
    assert "failed 2 times" in _ready(state)["message"]
    _report(state, {"web": {"state": "running", "check": {"ready": True, "ok": 1}}})
    assert _ready(state)["status"] == "True"
    assert _record(state).status["services"]["web"]["state"] == "ready"


def test_a_readiness_check_is_refused_where_the_backend_cannot_report_it(
        state: Path, write: Any) -> None:
    doc = cell_doc("api", services=[CHECKED])
    doc["spec"].update(backend="vm", image="devcell/busybox:latest")
    with pytest.raises(ManifestError) as raised:
        api.apply(state, [write("api.yaml", doc)])
    assert "spec.services[0].ready" in str(raised.value)
    assert "does not report its services' state" in str(raised.value)


def test_start_hooks_are_refused_where_the_backend_would_skip_them(
        state: Path, write: Any) -> None:
    doc = cell_doc("api", services=[WEB], hooks={"postCreate": [["make", "deps"]]})
    doc["spec"].update(backend="vm", image="devcell/busybox:latest")
    with pytest.raises(ManifestError) as raised:
        api.apply(state, [write("api.yaml", doc)])
    assert "spec.hooks.postCreate" in str(raised.value)
    assert "does not run hooks when it starts a cell" in str(raised.value)


@pytest.fixture
def failing_post_create(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVCELL_FAKE_FAIL", "post_create@api:1")
    fake._ENV_FAILURES.clear()


def test_a_failed_post_create_leaves_the_cell_running_and_reruns_only_when_asked(
        state: Path, write: Any, failing_post_create: None) -> None:
    doc = cell_doc("api", services=[WEB], hooks={"postCreate": [["make", "deps"]]})
    path = write("api.yaml", doc)
    report = api.apply(state, [path])
    assert not report.ok
    cell = _record(state)
    assert cell.phase == "Running"
    ready = cell.condition("Ready") or {}
    assert (ready["status"], ready["reason"]) == ("False", "PostCreateFailed")
    assert "rerun-hooks" in ready["message"]
    assert cell.status["postCreate"]["state"] == "Failed"
    # Re-applying the unchanged manifest neither recreates the cell nor runs the hook.
    api.apply(state, [path])
    assert [c for c in _calls(state) if c[0] in ("create", "post_create")] == [
        ("create", "api", "ok"), ("post_create", "api", "injected-failure")]
    rerun = cells.rerun_hooks(state, "api")
    assert rerun.ok
    assert ("post_create", "api", "ok") in _calls(state)
    assert _ready(state)["status"] == "True"
    assert "rerun-hooks" in _operations(state)
    assert "asked" not in _record(state).status


def test_restart_of_a_service_and_of_the_cell_are_recorded_operations(
        state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api", services=[WEB]))]).ok
    assert cells.restart(state, "api", "web").ok
    assert ("restart_service", "api/web", "ok") in _calls(state)
    before = [c[0] for c in _calls(state)]
    assert cells.restart(state, "api").ok
    after = [c[0] for c in _calls(state)][len(before):]
    assert after == ["stop", "start"]
    assert _operations(state).count("restart") == 2
    assert _ready(state)["status"] == "True"
    with pytest.raises(ManifestError, match="has no service 'db'"):
        cells.restart(state, "api", "db")


def test_restart_of_a_cell_that_is_not_running_is_refused(state: Path, write: Any) -> None:
    assert api.apply(state, [write("api.yaml", cell_doc("api", "Stopped", services=[WEB]))]).ok
    with pytest.raises(ManifestError, match="start it first"):
        cells.restart(state, "api")
    with pytest.raises(ManifestError, match="start it first"):
        cells.rerun_hooks(state, "api")
    assert os.path.exists(state)


def test_a_cell_with_an_ask_not_carried_out_is_not_ready_for_a_wait(
        state: Path, write: Any) -> None:
    """What `cell restart` waits for when a daemon does the work: not the Ready it had."""
    from devcell.reconciler import waiting
    from devcell.store import asks

    assert api.apply(state, [write("api.yaml", cell_doc("api", services=[WEB]))]).ok
    db = open_database(state)
    try:
        cell = objects.require(db.conn, "Cell", "api")
        assert waiting.check(db, "Cell", cell.id).done
        with db.write() as conn:
            asks.ask(conn, objects.require(conn, "Cell", "api"), asks.RESTART, service="web")
        pending = waiting.check(db, "Cell", cell.id)
        assert not pending.done and "asked and not yet done: restart" in pending.detail
    finally:
        db.close()
    assert cells.restart(state, "api", "web").ok  # the inline converge carries it out
    db = open_database(state)
    try:
        assert waiting.check(db, "Cell", _record(state).id).done
    finally:
        db.close()
