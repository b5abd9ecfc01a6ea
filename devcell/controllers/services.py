"""Whether a running cell serves: its services' state, as its backend observed them, judged.

A cell is Ready when its runtime runs, and (where the backend reports its services'
state: Observed.detail["services"]) every service that should run does: none crash-looping
(exited again soon after its start, twice or more in a row), none held or waiting to
restart, and each with a readiness check (`services[].ready`) passing it. The verdict and a
per-service view (state, restarts, last exit, ready) go into the cell's status
(`status.services`), shown by `get -o wide` and `describe`; the observe path
(reconciler/observe.py) writes them whenever they change, so `wait --for=condition=Ready`
waits until the server answers, and a crash loop turns Ready False with its reason.
"""

from __future__ import annotations

from typing import Any

from devcell.backends import probes
from devcell.records import Record

CRASH_LOOPING = "ServiceCrashLooping"
NOT_READY = "ServiceNotReady"
SIDECAR_NOT_RUNNING = "SidecarNotRunning"
REASONS = frozenset({CRASH_LOOPING, NOT_READY, SIDECAR_NOT_RUNNING})


class Verdict(Record):
    reason: str | None
    """None: the services are no reason not to be Ready."""
    message: str
    view: dict[str, dict[str, Any]]
    """Service name -> what `get -o wide` and `describe` show of it."""
    sidecars: dict[str, dict[str, Any]] | None = None
    """Sidecar name -> its state and the engine's status line (spec.sidecars), when judged."""


def _state(service: dict[str, Any], seen: dict[str, Any] | None) -> str:
    """running | ready | starting | waiting | restarting | crash-looping | exited | unknown."""
    if seen is None:
        return "starting"
    state = str(seen.get("state") or "unknown")
    if state != "running":
        return state
    if not service.get("ready"):
        return "running"
    return "ready" if (seen.get("check") or {}).get("ready") else "starting"


def _view(service: dict[str, Any], seen: dict[str, Any] | None) -> dict[str, Any]:
    view: dict[str, Any] = {"state": _state(service, seen),
                            "restarts": int((seen or {}).get("restarts") or 0)}
    if (seen or {}).get("lastExit") is not None:
        view["lastExit"] = seen["lastExit"]  # type: ignore[index]
    if service.get("ready"):
        check = (seen or {}).get("check") or {}
        view["check"] = probes.describe(service["ready"])
        if check.get("failed"):
            view["checkFailures"] = int(check["failed"])
        if check.get("last") == probes.NO_TOOL:
            view["checkProblem"] = ("the image has none of nc, curl or bash to make this "
                                    "check")
    return view


def judge(cell_name: str, spec: dict[str, Any], seen: dict[str, Any] | None,
          sidecars: list[dict[str, Any]] | None = None) -> Verdict | None:
    """The services' verdict, or None when the backend reports nothing of them (`seen` None:
    a backend without service state, or a runtime that does not run); with the sidecars'
    (`sidecars`: as the backend listed them, None when it did not), a sidecar that is not
    running holds Ready False too."""
    verdict = _judge_services(cell_name, spec, seen)
    if sidecars is None or not spec.get("sidecars"):
        return verdict
    listed = {str(s.get("name")): s for s in sidecars}
    view: dict[str, dict[str, Any]] = {}
    for sidecar in spec["sidecars"]:
        found = listed.get(str(sidecar.get("name")))
        state = str(found.get("state") or "unknown") if found is not None else "missing"
        # The engine's status line only for a sidecar that is down (`Exited (1) 2 minutes
        # ago`): a running one's (`Up 3 seconds`) is stale as soon as it is written.
        view[str(sidecar.get("name"))] = {"state": state} if state == "running" else {
            "state": state, "status": str(found.get("status") or "") if found is not None
            else "no container"}
    down = [(name, v) for name, v in view.items() if v["state"] != "running"]
    services_view = verdict.view if verdict is not None else {}
    if verdict is not None and verdict.reason is not None or not down:
        return Verdict(verdict.reason if verdict is not None else None,
                       verdict.message if verdict is not None else "", services_view, view)
    name, v = down[0]
    return Verdict(SIDECAR_NOT_RUNNING, (
        f"sidecar {name} is not running ({v.get('status') or v['state']}); see `devcell describe "
        f"cell {cell_name}`, and `devcell cell restart {cell_name}` restarts the cell with "
        "its sidecars"), services_view, view)


def _judge_services(cell_name: str, spec: dict[str, Any], seen: dict[str, Any] | None
                    ) -> Verdict | None:
    services = spec.get("services") or []
    if seen is None or not services:
        return None
    if not seen and not any(s.get("ready") for s in services):
        return None  # a supervisor that writes no state (made by an older DevCell)
    view = {s["name"]: _view(s, seen.get(s["name"])) for s in services}
    looping = [n for n, v in view.items() if v["state"] == "crash-looping"]
    if looping:
        name = looping[0]
        v = view[name]
        return Verdict(CRASH_LOOPING, (
            f"service {name} is crash-looping: it exited with status {v.get('lastExit')} soon "
            f"after starting, {v['restarts']} restarts so far; see `devcell logs {cell_name} "
            f"{name}`, fix it, then `devcell cell restart {cell_name} {name}`"), view)
    waiting = [n for n, v in view.items() if v["state"] not in ("running", "ready", "exited")]
    if waiting:
        name = waiting[0]
        v = view[name]
        if v["state"] == "starting" and v.get("check"):
            why = f"its readiness check ({v['check']}) has not passed yet"
            if v.get("checkFailures"):
                why += f" (failed {v['checkFailures']} times in a row)"
            if v.get("checkProblem"):
                why = f"its readiness check ({v['check']}) cannot run: {v['checkProblem']}"
        elif v["state"] == "waiting":
            why = "it waits for the postCreate hooks"
        elif v["state"] == "restarting":
            why = f"it exited with status {v.get('lastExit')} and is about to restart"
        else:
            why = "it is starting"
        return Verdict(NOT_READY, f"service {name} is not serving: {why}", view)
    return Verdict(None, "", view)


def starting(cell_name: str, spec: dict[str, Any]) -> Verdict | None:
    """The verdict just after DevCell started the runtime, before anything was observed:
    a cell with readiness checks is not Ready until they pass."""
    if not any(s.get("ready") for s in spec.get("services") or []):
        return None
    return judge(cell_name, spec, {})


def with_verdict(status: dict[str, Any], verdict: Verdict | None, *,
                 conditions: Any) -> dict[str, Any]:
    """`status` with the services' view, and its Ready condition as the verdict says: False
    with the verdict's reason, or True again when only the services held it False.
    `conditions` is store.objects.set_condition (passed in: controllers own no SQL)."""
    if verdict is None:
        return status
    status = dict(status)
    if verdict.view or spec_services(status, verdict):
        status["services"] = verdict.view
    if verdict.sidecars is not None:
        status["sidecars"] = verdict.sidecars
    ready: dict[str, Any] = next(
        (c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
    if verdict.reason is not None:
        status["conditions"] = conditions(status.get("conditions", []), "Ready", "False",
                                          verdict.reason, verdict.message)
        status["message"] = verdict.message
    elif ready.get("reason") in REASONS:
        status["conditions"] = conditions(status.get("conditions", []), "Ready", "True",
                                          "Running", "cell is running")
        status.pop("message", None)
    return status


def spec_services(status: dict[str, Any], verdict: Verdict) -> bool:
    """Whether the services' view belongs in the status: it holds one already, or the
    verdict is the services' own (not only the sidecars')."""
    return "services" in status or verdict.sidecars is None


def judged(status: dict[str, Any]) -> bool:
    """Whether the services may speak for this Ready condition: it is True, or False only
    because of them (a failed hook, a drift or a failed step keeps its own reason)."""
    ready: dict[str, Any] = next(
        (c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
    return ready.get("status") == "True" or ready.get("reason") in REASONS
