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
