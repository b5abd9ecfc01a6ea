"""The services' verdict on a running cell (controllers/services.py): what Ready says of a
crash loop, a readiness check not passed yet, a service held for postCreate, and when the
services are no reason at all."""

from __future__ import annotations

from typing import Any

from devcell.controllers import services
from devcell.store import objects

WEB = {"name": "web", "command": ["httpd"]}
CHECKED = {**WEB, "ready": {"httpGet": {"port": 8080, "path": "/health"}}}


def _spec(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"services": list(entries)}


def test_nothing_reported_is_no_verdict_unless_a_check_waits() -> None:
    assert services.judge("api", _spec(WEB), None) is None
    assert services.judge("api", _spec(WEB), {}) is None  # an older supervisor writes none
    assert services.judge("api", {}, {"web": {"state": "running"}}) is None
    held = services.judge("api", _spec(CHECKED), {})
    assert held is not None and held.reason == services.NOT_READY
    assert "http GET 127.0.0.1:8080/health" in held.message


def test_a_crash_loop_names_the_service_its_status_and_restarts() -> None:
    verdict = services.judge("api", _spec(WEB, {"name": "db", "command": ["pg"]}), {
        "web": {"state": "running", "restarts": 0},
        "db": {"state": "crash-looping", "restarts": 4, "lastExit": 127}})
    assert verdict is not None and verdict.reason == services.CRASH_LOOPING
    assert "service db" in verdict.message and "status 127" in verdict.message
    assert "4 restarts" in verdict.message and "devcell logs api db" in verdict.message
    assert verdict.view["web"] == {"state": "running", "restarts": 0}


def test_a_check_passes_then_the_service_is_ready() -> None:
    failing = services.judge("api", _spec(CHECKED), {
        "web": {"state": "running", "check": {"ready": False, "failed": 3, "last": 1}}})
    assert failing is not None and failing.reason == services.NOT_READY
    assert "failed 3 times in a row" in failing.message
    untestable = services.judge("api", _spec(CHECKED), {
        "web": {"state": "running", "check": {"ready": False, "failed": 1, "last": 125}}})
    assert untestable is not None and "cannot run" in untestable.message
    passing = services.judge("api", _spec(CHECKED), {
        "web": {"state": "running", "check": {"ready": True, "ok": 1}}})
    assert passing is not None and passing.reason is None
    assert passing.view["web"]["state"] == "ready"


def test_held_and_ended_services() -> None:
    held = services.judge("api", _spec(WEB), {"web": {"state": "waiting"}})
    assert held is not None and "postCreate" in held.message
    ended = services.judge("api", _spec({**WEB, "restart": "OnFailure"}),
                           {"web": {"state": "exited", "lastExit": 0}})
    assert ended is not None and ended.reason is None


def test_with_verdict_sets_and_clears_only_its_own_reasons() -> None:
    ready = objects.set_condition([], "Ready", "True", "Running", "cell is running")
    looping = services.Verdict(services.CRASH_LOOPING, "service web is crash-looping", {})
    status = services.with_verdict({"conditions": ready}, looping,
                                   conditions=objects.set_condition)
    assert status["conditions"][0]["reason"] == services.CRASH_LOOPING
    assert services.judged(status)
    fine = services.Verdict(None, "", {"web": {"state": "running", "restarts": 1}})
    back = services.with_verdict(status, fine, conditions=objects.set_condition)
    assert back["conditions"][0]["status"] == "True" and "message" not in back
    hooked = {"conditions": objects.set_condition([], "Ready", "False", "PostCreateFailed",
                                                  "hook failed")}
    assert not services.judged(hooked)


DB = {"name": "db", "image": "postgres:16"}


def test_a_sidecar_not_running_holds_ready_false_naming_it_and_the_engines_words() -> None:
    spec = {"sidecars": [DB, {"name": "cache", "image": "redis"}]}
    verdict = services.judge("api", spec, None, [
        {"name": "db", "state": "exited", "status": "Exited (1) 3 seconds ago"}])
    assert verdict is not None and verdict.reason == services.SIDECAR_NOT_RUNNING
    assert "sidecar db is not running (Exited (1) 3 seconds ago)" in verdict.message
    assert verdict.sidecars == {
        "db": {"state": "exited", "status": "Exited (1) 3 seconds ago"},
        "cache": {"state": "missing", "status": "no container"}}
    assert verdict.view == {}
    status = services.with_verdict({"conditions": []}, verdict,
                                   conditions=objects.set_condition)
    assert "services" not in status and status["sidecars"] == verdict.sidecars
    assert status["conditions"][0]["reason"] == services.SIDECAR_NOT_RUNNING


def test_running_sidecars_are_no_reason_and_a_services_reason_comes_first() -> None:
    spec = {"sidecars": [DB], "services": [WEB]}
    up = [{"name": "db", "state": "running", "status": "Up 2 seconds"}]
    fine = services.judge("api", spec, {"web": {"state": "running"}}, up)
    assert fine is not None and fine.reason is None
    assert fine.sidecars == {"db": {"state": "running"}}  # no stale "Up 2 seconds"
    looping = services.judge("api", spec, {"web": {"state": "crash-looping", "restarts": 3}},
                             [{"name": "db", "state": "exited", "status": "Exited (0)"}])
    assert looping is not None and looping.reason == services.CRASH_LOOPING
    assert looping.sidecars == {"db": {"state": "exited", "status": "Exited (0)"}}
    # Sidecars not listed (a backend that does not report them): no sidecar verdict.
    assert services.judge("api", {"sidecars": [DB]}, None, None) is None
    # Ready False only because of a sidecar: the services may speak again.
    status = {"conditions": objects.set_condition([], "Ready", "False",
                                                  services.SIDECAR_NOT_RUNNING, "x")}
    assert services.judged(status)
