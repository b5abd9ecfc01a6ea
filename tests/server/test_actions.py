"""Actions on a cell through the API (server/actions.py): sleep, start, snapshot, fork, restart and
rerun-hooks, recorded (202) or waited for (wait=true: 200, how each object ended and the
operations that ran), each error one problem document; a real client (httpx over the unix
socket, and over TLS with a developer's token for who made each change) against the session's
real server on the fake backend. Who may do which is in test_app_auth.py's table.

Cost: ~1-3 s a test once the shared daemon runs (the fake backend converges at once).
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.server.conftest import Api
from tests.server.test_app import YAML, assert_problem, cell, wait_for


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _running(api: Api) -> str:
    name = _unique("act")
    assert api.client.post("/api/v1/apply", content=cell(name), headers=YAML).status_code == 200
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    return name


def _phase(api: Api, kind: str, name: str) -> str:
    return str(api.client.get(f"/api/v1/{kind}/{name}").json()["status"]["phase"])


def test_sleep_then_start_waited_for(api: Api) -> None:
    name = _running(api)
    slept = api.client.post(f"/api/v1/cells/{name}/sleep", params={"wait": "true"})
    assert slept.status_code == 200, slept.text
    doc = slept.json()
    assert doc["ok"] and doc["changes"][0]["name"] == name
    assert [r["status"] for r in doc["results"]] == ["settled"]
    assert doc["operations"] and all(o.startswith("op_") for o in doc["operations"])
    assert slept.headers["location"] == f"/api/v1/cells/{name}"
    assert _phase(api, "cells", name) == "Sleeping"
    op = api.client.get(f"/api/v1/operations/{doc['operations'][-1]}").json()
    assert op["status"] == "Succeeded"
    started = api.client.post(f"/api/v1/cells/{name}/start",
                              params={"wait": "true", "timeoutSeconds": "60"})
    assert started.status_code == 200 and started.json()["ok"], started.text
    assert _phase(api, "cells", name) == "Running"
    # What the CLI's verbs record: the state asked for, then what the daemon did.
    reasons = [e["reason"] for e in api.client.get(
        "/api/v1/events", params={"for": f"cell/{name}"}).json()["items"]]
    assert {"StateChanged", "Slept"} <= set(reasons), reasons


def test_without_wait_the_answer_is_202_once_recorded(api: Api) -> None:
    name = _running(api)
    answered = api.client.post(f"/api/v1/cells/{name}/sleep")
    assert answered.status_code == 202, answered.text
    doc = answered.json()
    assert doc["changes"][0]["kind"] == "Cell" and doc["results"] == []
    assert doc["resourceVersion"].isdigit()
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Sleeping")


def test_snapshot_then_fork(api: Api) -> None:
    name, snap, fork = _running(api), _unique("snap"), _unique("fork")
    taken = api.client.post(f"/api/v1/cells/{name}/snapshot", params={"wait": "true"},
                            json={"name": snap, "ttl": "1h"})
    assert taken.status_code == 200 and taken.json()["ok"], taken.text
    assert _phase(api, "snapshots", snap) == "Ready"
    assert taken.json()["reconciledBy"].startswith("pid ")  # as the CLI's error lines say it
    again = api.client.post(f"/api/v1/cells/{name}/snapshot", json={"name": snap})
    assert "already exists" in assert_problem(again, 409)["detail"]
    # exclusive: false records it again as `snapshot create` does (the CLI's remote mode)
    same = api.client.post(f"/api/v1/cells/{name}/snapshot", params={"wait": "true"},
                           json={"name": snap, "ttl": "1h", "exclusive": False})
    assert same.status_code == 200 and same.json()["ok"], same.text
    assert [c["outcome"] for c in same.json()["changes"]] == ["unchanged"]
    forked = api.client.post(f"/api/v1/cells/{name}/fork", params={"wait": "true"},
                             json={"name": fork, "snapshot": snap})
    assert forked.status_code == 200 and forked.json()["ok"], forked.text
    made = api.client.get(f"/api/v1/cells/{fork}").json()
    assert made["status"]["phase"] == "Running"
    assert made["spec"]["workspace"]["from"] == {"snapshot": snap}
    # A fork never lands on a recorded cell (the seed is another's: nor would it be allowed).
    assert_problem(api.client.post(f"/api/v1/cells/{name}/fork",
                                   json={"name": "seed", "snapshot": snap}), 409)
    # A snapshot of another cell: refused as `cell fork` refuses it, located at its field.
    other = api.client.post(f"/api/v1/cells/{fork}/fork",
                            json={"name": _unique("f"), "snapshot": snap})
    doc = assert_problem(other, 422)
    assert doc["problems"][0]["field"] == "--snapshot"
    # not exclusive: a snapshot's name taken by another cell's snapshot is still a conflict;
    # a fork over a recorded cell is judged as `cell fork` judges it (an admin may change it)
    assert_problem(api.client.post(f"/api/v1/cells/{fork}/snapshot",
                                   json={"name": snap, "exclusive": False}), 409)
    assert_problem(api.client.post(f"/api/v1/cells/{name}/fork", json={
        "name": "seed", "snapshot": snap, "exclusive": False}), 422)
    # count: NAME-1 to NAME-N, each name free (taken: the CLI's located problem)
    many = _unique("many")
    made = api.client.post(f"/api/v1/cells/{name}/fork", params={"wait": "true"},
                           json={"name": many, "snapshot": snap, "count": 2})
    assert made.status_code == 200 and made.json()["ok"], made.text
    assert [c["name"] for c in made.json()["changes"]] == [f"{many}-1", f"{many}-2"]
    again = api.client.post(f"/api/v1/cells/{name}/fork",
                            json={"name": many, "snapshot": snap, "count": 2})
    assert assert_problem(again, 422)["problems"][0]["field"] == "--name"
    for count in (0, 101, True, "2"):
        assert_problem(api.client.post(f"/api/v1/cells/{name}/fork", json={
            "name": many, "snapshot": snap, "count": count}), 400)


def test_restart_and_rerun_hooks_waited_for(api: Api) -> None:
    """As `cell restart [SERVICE]` and `cell rerun-hooks`: an ask on the running cell,
    converged; a service it does not have, or a cell not running, a 422 naming it."""
    name = _unique("act")
    text = cell(name) + "  services:\n    - {name: web, command: [sleep, '1000']}\n"
    assert api.client.post("/api/v1/apply", content=text, headers=YAML).status_code == 200
    wait_for(api, f"/api/v1/cells/{name}", lambda r: r.json()["status"]["phase"] == "Running")
    for path, body, outcome in (("restart", None, "restart requested"),
                                ("restart", {}, "restart requested"),
                                ("restart", {"service": "web"},
                                 "restart of service web requested"),
                                ("rerun-hooks", None, "rerun of its hooks requested")):
        done = api.client.post(f"/api/v1/cells/{name}/{path}", params={"wait": "true"},
                               json=body) if body is not None else api.client.post(
            f"/api/v1/cells/{name}/{path}", params={"wait": "true"})
        assert done.status_code == 200 and done.json()["ok"], done.text
        assert [c["outcome"] for c in done.json()["changes"]] == [outcome]
        assert [r["status"] for r in done.json()["results"]] == ["settled"]
    unknown = api.client.post(f"/api/v1/cells/{name}/restart", json={"service": "db"})
    assert "has no service 'db' (its services: web)" in str(assert_problem(unknown, 422))
    for body, word in (({"service": 3}, "service must be a str"),
                       ({"name": "x"}, "unknown field 'name'"), ([1], "a JSON object")):
        doc = assert_problem(api.client.post(f"/api/v1/cells/{name}/restart", json=body), 400)
        assert word in doc["detail"]
    assert_problem(api.client.post(f"/api/v1/cells/{name}/restart", content=b"service: web"),
                   415)
    assert api.client.post(f"/api/v1/cells/{name}/sleep",
                           params={"wait": "true"}).status_code == 200
    for path in ("restart", "rerun-hooks"):
        slept = assert_problem(api.client.post(f"/api/v1/cells/{name}/{path}"), 422)
        assert "is Sleeping, not Running" in str(slept)


def test_restore_planned_recorded_and_waited_for(api: Api) -> None:
    """POST /snapshots/NAME/restore as `snapshot restore`: a dry run's plan (200, nothing
    recorded), a restore recorded (202) or waited for (200: done, its operation); stopped
    at its approval gate when the workspace changed since its last snapshot; each refusal
    a problem in the verb's words."""
    name, snap = _running(api), _unique("snap")
    taken = api.client.post(f"/api/v1/cells/{name}/snapshot", params={"wait": "true"},
                            json={"name": snap})
    assert taken.status_code == 200 and taken.json()["ok"], taken.text
    path = f"/api/v1/snapshots/{snap}/restore"
    plan = api.client.post(path, json={"dryRun": True})
    assert plan.status_code == 200, plan.text
    assert plan.json()["cell"] == name and plan.json()["operation"] is None
    assert not plan.json()["done"] and plan.json()["safety"].startswith(f"{name}-pre-restore-")
    done = api.client.post(path, params={"wait": "true"}, json={"approve": True})
    assert done.status_code == 200 and done.json()["done"] and done.json()["ok"], done.text
    assert done.json()["operation"].startswith("op_")
    op = api.client.get(f"/api/v1/operations/{done.json()['operation']}").json()
    assert op["status"] == "Succeeded"
    gated = api.client.post(path, params={"wait": "true", "timeoutSeconds": "60"})
    assert gated.status_code == 200, gated.text
    if gated.json()["awaiting"] is not None:  # the fake backend's workspace changed
        assert api.cli("op", "cancel", gated.json()["operation"]).returncode == 0
    recorded = api.client.post(path, json={"approve": True, "safety": False})
    assert recorded.status_code == 202 and recorded.json()["resourceVersion"].isdigit()
    for body, word in (({"cell": 3}, "cell must be"), ({"dry": True}, "unknown field 'dry'"),
                       ({"approve": "yes"}, "approve must be a bool"), ([1], "a JSON object")):
        doc = assert_problem(api.client.post(path, json=body), 400)
        assert word in doc["detail"]
    assert_problem(api.client.post(path, content=b"approve: true", headers=YAML), 415)
    assert_problem(api.client.post(path, content=b"{}"), 415)  # a body, and no JSON said
    missing = assert_problem(api.client.post("/api/v1/snapshots/no-such-snap/restore"), 404)
    assert missing["detail"].startswith('snapshot "no-such-snap" not found')
    other = assert_problem(api.client.post(path, json={"cell": "seed"}), 409)
    assert "not of cell \"seed\"" in other["detail"]


def test_action_errors_are_problems(api: Api) -> None:
    name = "seed"
    doc = assert_problem(api.client.post("/api/v1/cells/no-such-cell/sleep"), 404)
    assert doc["type"].endswith("/not-found")
    assert_problem(api.client.get(f"/api/v1/cells/{name}/sleep"), 405)
    for body, word in (({}, "'name' is required"), ({"name": 3}, "name must be a str"),
                       ({"name": "x", "cell": "y"}, "unknown field 'cell'"),
                       ([1], "a JSON object")):
        doc = assert_problem(api.client.post(f"/api/v1/cells/{name}/snapshot", json=body), 400)
        assert word in doc["detail"]
    assert_problem(api.client.post(f"/api/v1/cells/{name}/snapshot", content=b"{",
                                   headers={"Content-Type": "application/json"}), 400)
    assert_problem(api.client.post(f"/api/v1/cells/{name}/snapshot", content=b"name: x",
                                   headers=YAML), 415)
    bad = api.client.post(f"/api/v1/cells/{name}/snapshot", json={"name": "Not_A Name"})
    assert assert_problem(bad, 422)["problems"][0]["field"] == "--name"
    for body in ({"name": "f", "snapshot": "s", "ports": {"http": 80}},
                 {"name": "f", "snapshot": "s", "ports": {"80": 70000}},
                 {"name": "f", "snapshot": "s", "ports": {"80": 8080}, "publish": False}):
        assert_problem(api.client.post(f"/api/v1/cells/{name}/fork", json=body), 400)
    for params in ({"wait": "maybe"}, {"timeoutSeconds": "0"}, {"timeoutSeconds": "x"}):
        assert_problem(api.client.post(f"/api/v1/cells/{name}/start", params=params), 400)


def test_an_action_is_recorded_in_its_callers_name(api: Api) -> None:
    token = api.token("act-dev", "developer")
    name = _unique("mine")
    with api.tls_client(token) as c:
        assert c.post("/api/v1/apply", content=cell(name), headers=YAML).status_code == 200
        wait_for(api, f"/api/v1/cells/{name}",
                 lambda r: r.json()["status"]["phase"] == "Running")
        before = {e["id"] for e in api.client.get(
            "/api/v1/events", params={"for": f"cell/{name}"}).json()["items"]}
        done = c.post(f"/api/v1/cells/{name}/sleep", params={"wait": "true"})
        assert done.status_code == 200 and done.json()["ok"], done.text
        refused = c.post("/api/v1/cells/seed/sleep")
        assert "refused by rule developer-not-own" in assert_problem(refused, 403)["detail"]
        over = c.post(f"/api/v1/cells/{name}/fork",
                      json={"name": "seed", "snapshot": "s", "exclusive": False})
        assert "refused by rule developer-not-own" in assert_problem(over, 403)["detail"]
    events: list[dict[str, Any]] = api.client.get(
        "/api/v1/events", params={"for": f"cell/{name}"}).json()["items"]
    mine = [e for e in events if e["id"] not in before and e.get("actor") == "act-dev"]
    assert mine, events
    assert _phase(api, "cells", "seed") == "Running"


def test_a_hostile_body_is_refused_small_fast_and_unrecorded(api: Api) -> None:
    """A huge name, JSON nested thousands deep, a consistency the Snapshot schema does not
    have: each a small 400 or 413 at once, nothing recorded, nothing in the daemon's log
    (found by attack27b and attack27c: a 4 MiB snapshot name took ~1 s and was echoed whole,
    deep JSON was a 500 with an ERROR, consistency "bogus" was recorded and its reconcile
    raised on every retry)."""
    import time

    json_type = {"Content-Type": "application/json"}
    logged = len(api.log.read_text(errors="replace"))
    started = time.monotonic()
    for verb, content, status in (
            ("fork", b'{"name": "f", "snapshot": "' + b"a" * (4 << 20) + b'"}', 413),
            ("fork", b'{"name": "f", "snapshot": "' + b"a" * 1000 + b'"}', 400),
            ("snapshot", b'{"name": "' + b"n" * 1000 + b'"}', 400),
            ("snapshot", b'{"name": "s", "ttl": "' + b"9" * 1000 + b'"}', 400),
            ("fork", b"[" * 60_000, 400),
            ("snapshot", b'{"name": "s", "consistency": "bogus"}', 400)):
        answer = api.client.post(f"/api/v1/cells/seed/{verb}", content=content,
                                 headers=json_type)
        assert_problem(answer, status)
        assert len(answer.content) < 2048
    assert time.monotonic() - started < 10
    assert api.client.get("/api/v1/snapshots/s").status_code == 404
    log = api.log.read_text(errors="replace")[logged:]
    assert "ERROR" not in log and "RecursionError" not in log
