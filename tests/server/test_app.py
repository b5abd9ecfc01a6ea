"""The HTTP API through a real client (httpx over the unix socket) against the real server
(`devcell controller run --listen unix:...`, the session's `api` fixture, fake backend):
list, get, apply, delete, watch, and one problem document for every error.

Cost: the shared daemon (~2-3 s once), then ~0.1-1 s a test; the slow-body test waits
DEVCELL_API_BODY_SECONDS (1.5 s here).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest

from tests.server.conftest import BODY_SECONDS, Api

YAML = {"Content-Type": "application/yaml"}


def cell(name: str, **labels: str) -> str:
    shown = ", ".join(f"{k}: {v}" for k, v in labels.items())
    return (f"apiVersion: devcell.dev/v1alpha1\nkind: Cell\nmetadata: {{name: {name}, "
            f"labels: {{{shown}}}}}\nspec:\n  backend: fake\n  image: devcell/busybox:latest\n")


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """One problem document (RFC 9457): its media type, its four fields, no traceback."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    doc: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail"} <= set(doc)
    assert doc["status"] == status and doc["type"].startswith("https://devcell.dev/problems/")
    assert "Traceback" not in response.text
    return doc


def wait_for(api: Api, path: str, check: Any, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = api.client.get(path)
        if check(got):
            return got
        assert time.monotonic() < deadline, got.text
        time.sleep(0.05)


# -- list and get -------------------------------------------------------------------------------


def test_list_and_get_are_the_records_get_prints(api: Api) -> None:
    wait_for(api, "/api/v1/cells/seed", lambda r: r.json()["status"]["phase"] == "Running")
    listed = api.client.get("/api/v1/cells")
    assert listed.status_code == 200
    doc = listed.json()
    assert doc["kind"] == "List" and doc["metadata"]["resourceVersion"].isdigit()
    one = api.client.get("/api/v1/cells/seed").json()
    printed = json.loads(api.cli("get", "cells", "seed", "-o", "json").stdout)
    assert one == printed
    assert one["spec"]["env"][0]["value"] == "<redacted>"  # as get shows it: never the secret
    assert printed in doc["items"]
    by_id = api.client.get(f"/api/v1/cells/{one['metadata']['id']}").json()
    assert by_id == one


def test_label_selector_and_its_errors(api: Api) -> None:
    assert api.client.post("/api/v1/apply", content=cell("labeled", team="infra"),
                           headers=YAML).status_code == 200
    names = [c["metadata"]["name"] for c in
             api.client.get("/api/v1/cells", params={"labelSelector": "team=infra"}).json()["items"]]
    assert names == ["labeled"]
    doc = assert_problem(api.client.get("/api/v1/cells", params={"labelSelector": "team in ("}),
                         400)
    assert doc["type"].endswith("/bad-selector")
    assert_problem(api.client.get("/api/v1/operations", params={"labelSelector": "a=b"}), 400)


def test_operations_and_events_list_as_get_prints_them(api: Api) -> None:
    ops = api.client.get("/api/v1/operations").json()["items"]
    printed = json.loads(api.cli("get", "operations", "-o", "json").stdout)["items"]
    assert [o["id"] for o in ops] == [o["id"] for o in printed][:len(ops)]  # later ones may come
    assert all("steps" in o for o in ops)
    one = api.client.get(f"/api/v1/operations/{ops[0]['id']}").json()
    assert one["id"] == ops[0]["id"] and one["steps"]
    events = api.client.get("/api/v1/events", params={"for": "cell/seed"}).json()["items"]
    assert events and {e["object_name"] for e in events} == {"seed"}
    assert_problem(api.client.get("/api/v1/events", params={"for": "nonsense"}), 400)


def test_not_found_is_a_problem_with_a_suggestion(api: Api) -> None:
    doc = assert_problem(api.client.get("/api/v1/cells/sead"), 404)
    assert doc["detail"].startswith('cell "sead" not found')
    assert_problem(api.client.get("/api/v1/snapshots/none"), 404)
    assert_problem(api.client.get("/api/v1/operations/op_none"), 404)
    doc = assert_problem(api.client.get("/api/v1/rows/snapshots", params={"cell": "sead"}), 404)
    assert doc["detail"].startswith('cell "sead" not found')  # `snapshot list sead`'s words
    assert_problem(api.client.get("/api/v1/rows/snapshots", params={"cell": "x" * 64}), 400)


# -- apply and delete ---------------------------------------------------------------------------


def test_apply_a_stream_then_delete(api: Api) -> None:
    stream = cell("alpha") + "---\n" + cell("beta")
    dry = api.client.post("/api/v1/apply", content=stream, headers=YAML,
                          params={"dryRun": "true"})
    assert dry.status_code == 200 and [c["outcome"] for c in dry.json()["changes"]] == [
        "created", "created"]
    assert_problem(api.client.get("/api/v1/cells/alpha"), 404)  # a dry run records nothing
    done = api.client.post("/api/v1/apply", content=stream, headers=YAML)
    assert done.status_code == 200, done.text
    result = done.json()
    assert [(c["name"], c["outcome"]) for c in result["changes"]] == [
        ("alpha", "created"), ("beta", "created")]
    assert result["ok"] is True
    wait_for(api, "/api/v1/cells/beta", lambda r: r.json()["status"]["phase"] == "Running")
    again = api.client.post("/api/v1/apply", content=stream, headers=YAML).json()
    assert [c["outcome"] for c in again["changes"]] == ["unchanged", "unchanged"]
    gone = api.client.delete("/api/v1/cells/alpha")
    assert gone.status_code == 200 and gone.json()["changes"][0]["outcome"] == "deleted"
    wait_for(api, "/api/v1/cells/alpha", lambda r: r.status_code == 404)
    assert_problem(api.client.delete("/api/v1/cells/alpha"), 404)
    assert_problem(api.client.delete("/api/v1/operations/x"), 405)


def test_apply_json_document(api: Api) -> None:
    doc = {"apiVersion": "devcell.dev/v1alpha1", "kind": "Cell", "metadata": {"name": "json-one"},
           "spec": {"backend": "fake", "image": "devcell/busybox:latest"}}
    done = api.client.post("/api/v1/apply", json=doc)
    assert done.status_code == 200 and done.json()["changes"][0]["name"] == "json-one"


def test_invalid_manifest_has_apply_f_s_problems(api: Api, tmp_path: Any) -> None:
    bad = cell("gamma") + "  imag: x\n"
    answer = assert_problem(api.client.post("/api/v1/apply", content=bad, headers=YAML), 422)
    assert answer["type"].endswith("/manifest-invalid")
    (problem,) = answer["problems"]
    assert problem["file"] == "request.yaml" and problem["line"] == 7
    assert problem["field"] == "spec.imag" and problem["name"] == "gamma"
    (tmp_path / "request.yaml").write_text(bad)
    printed = api.cli("apply", "--dry-run", "-f", "request.yaml", cwd=tmp_path)
    assert printed.returncode != 0
    assert answer["detail"] in printed.stderr  # the same words, file:line:column and field
    assert_problem(api.client.get("/api/v1/cells/gamma"), 404)  # nothing recorded


@pytest.mark.parametrize("body, media", [
    (b'{"a": ', "application/json"),
    (b"\xff\xfe not utf-8", "application/yaml"),
    (b"a: [unclosed", "application/yaml"),
    (b"", "application/yaml"),
    (b"- just\n- a list\n", "application/yaml"),
    (b"[1, 2]", "application/json"),
])
def test_bad_json_or_yaml_is_a_422(api: Api, body: bytes, media: str) -> None:
    doc = assert_problem(api.client.post("/api/v1/apply", content=body,
                                         headers={"Content-Type": media}), 422)
    assert doc["problems"] and all(p["file"].startswith("request.") for p in doc["problems"])


def test_request_errors_are_problems(api: Api) -> None:
    assert_problem(api.client.post("/api/v1/apply", content=b"x", headers={
        "Content-Type": "text/plain"}), 415)
    assert_problem(api.client.post("/api/v1/apply", content=cell("q"), headers=YAML,
                                   params={"dryRun": "maybe"}), 400)
    assert_problem(api.client.get("/api/v1/nothing"), 404)
    assert_problem(api.client.put("/api/v1/cells/seed"), 405)
    assert_problem(api.client.get("/api/v1/events", params={"watch": "true",
                                                             "resourceVersion": "-1"}), 400)
    assert_problem(api.client.get("/api/v1/events", params={"watch": "true",
                                                             "timeoutSeconds": "0"}), 400)


# -- hostile clients ----------------------------------------------------------------------------


def _raw(api: Api, request: bytes, *, then: bytes = b"", pause: float = 0.0) -> bytes:
    """Send bytes as they are over the socket; the whole answer once the server closes or
    answers (bounded)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    try:
        sock.connect(str(api.socket))
        sock.sendall(request)
        if pause:
            time.sleep(pause)
        if then:
            try:
                sock.sendall(then)
            except OSError:
                pass
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < 200:
            try:
                chunk = sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
            if b'"status"' in answer and answer.rstrip().endswith(b"}"):
                break
        return answer
    finally:
        sock.close()


def test_huge_body_is_refused_from_its_length(api: Api) -> None:
    answer = _raw(api, b"POST /api/v1/apply HTTP/1.1\r\nHost: devcell\r\nContent-Type: "
                       b"application/yaml\r\nContent-Length: 100000000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413") and b"application/problem+json" in answer


def test_huge_chunked_body_is_cut_once_too_large(api: Api) -> None:
    """No Content-Length: the server keeps no more than its limit of the body (its peak
    memory grows by far less than the 96 MiB offered)."""
    chunk = b"#" * (1024 * 1024)
    before = api.peak_rss()

    def body() -> Any:
        for _ in range(96):
            yield chunk

    try:
        response = api.client.post("/api/v1/apply", content=body(), headers=YAML)
    except httpx.TransportError:
        pass  # the server answered and closed while the client was still sending
    else:
        assert_problem(response, 413)
    assert api.peak_rss() - before < 48 * 1024 * 1024


def test_one_document_over_the_limit_is_a_manifest_problem(api: Api) -> None:
    big = cell("big") + "  env:\n" + "".join(
        f"    - {{name: V{i}, value: {'x' * 1000}}}\n" for i in range(1200))
    doc = assert_problem(api.client.post("/api/v1/apply", content=big, headers=YAML), 422)
    assert "larger than the limit" in doc["detail"]


def test_slow_body_is_cut(api: Api) -> None:
    started = time.monotonic()
    answer = _raw(api, b"POST /api/v1/apply HTTP/1.1\r\nHost: devcell\r\nContent-Type: "
                       b"application/yaml\r\nContent-Length: 100\r\n\r\nkind:",
                  then=b" Cell", pause=BODY_SECONDS + 1.0)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b'"status":408' in answer
    assert time.monotonic() - started < BODY_SECONDS + 10


def test_bad_content_length_is_refused(api: Api) -> None:
    answer = _raw(api, b"POST /api/v1/apply HTTP/1.1\r\nHost: devcell\r\nContent-Type: "
                       b"application/yaml\r\nContent-Length: lots\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")


# -- watch --------------------------------------------------------------------------------------


def _lines(api: Api, path: str, params: dict[str, str], found: list[dict[str, Any]],
           headers: dict[str, str] | None = None, until: Any = None) -> threading.Thread:
    """Read a watch in a thread into `found` (JSON lines, or SSE `data:` lines)."""
    def read() -> None:
        with api.client.stream("GET", path, params=params, headers=headers or {}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: "):
                    line = line[len("data: "):]
                elif not line.startswith("{"):
                    continue
                found.append(json.loads(line))
                if until is not None and until(found):
                    return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_watch_cells_as_json_lines(api: Api) -> None:
    version = api.client.get("/api/v1/cells").json()["metadata"]["resourceVersion"]
    found: list[dict[str, Any]] = []
    reader = _lines(api, "/api/v1/cells", {"watch": "true", "resourceVersion": version,
                                            "timeoutSeconds": "30"}, found,
                    until=lambda f: any(e["type"] == "DELETED" for e in f))
    time.sleep(0.3)
    api.client.post("/api/v1/apply", content=cell("watched"), headers=YAML)
    wait_for(api, "/api/v1/cells/watched", lambda r: r.json()["status"]["phase"] == "Running")
    api.client.delete("/api/v1/cells/watched")
    reader.join(30)
    kinds = [(e["type"], e["object"].get("metadata", {}).get("name")) for e in found
             if e["type"] != "BOOKMARK"]
    assert kinds[0] == ("ADDED", "watched")
    assert kinds[-1][0] == "DELETED"
    assert all(int(e["resourceVersion"]) >= int(version) for e in found)


def test_watch_events_resumes_from_a_version_over_sse(api: Api) -> None:
    events = api.client.get("/api/v1/events").json()
    version = int(events["metadata"]["resourceVersion"])
    seen = {e["id"] for e in events["items"]}
    api.client.post("/api/v1/apply", content=cell("resumed"), headers=YAML)
    wait_for(api, "/api/v1/cells/resumed", lambda r: r.json()["status"]["phase"] == "Running")
    later = api.client.get("/api/v1/events").json()
    missed = [e["id"] for e in later["items"] if e["id"] not in seen]
    assert missed
    found: list[dict[str, Any]] = []
    reader = _lines(api, "/api/v1/events", {"watch": "true", "timeoutSeconds": "10"}, found,
                    headers={"Accept": "text/event-stream", "Last-Event-ID": str(version)},
                    until=lambda f: len(f) >= len(missed))
    reader.join(15)
    assert [e["object"]["id"] for e in found][:len(missed)] == missed
    versions = [int(e["resourceVersion"]) for e in found]  # the change log's: each later
    assert all(e["type"] == "ADDED" for e in found)
    assert versions == sorted(set(versions)) and versions[0] > version


def test_watch_ends_at_its_timeout(api: Api) -> None:
    started = time.monotonic()
    with api.client.stream("GET", "/api/v1/operations",
                           params={"watch": "1", "timeoutSeconds": "1"}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert time.monotonic() - started < 10
    assert all(e["type"] in ("ADDED", "MODIFIED", "BOOKMARK") for e in lines)


def test_concurrent_watches_are_bounded(api: Api) -> None:
    """Watches opened at the same moment each take a slot before any of them waits: no more
    than MAX_WATCHES are served at once (the count used to be taken after opening the
    database, so a burst all passed the check)."""
    import asyncio

    from devcell.server.app import MAX_WATCHES

    async def burst() -> list[int]:
        transport = httpx.AsyncHTTPTransport(uds=str(api.socket), limits=httpx.Limits(
            max_connections=MAX_WATCHES * 2, max_keepalive_connections=0))
        async with httpx.AsyncClient(transport=transport, base_url="http://devcell",
                                     timeout=30) as client:
            requests = [client.build_request("GET", "/api/v1/events", params={
                "watch": "true", "timeoutSeconds": "5"}) for _ in range(MAX_WATCHES + 40)]
            responses = await asyncio.gather(*(client.send(r, stream=True) for r in requests))
            statuses = [r.status_code for r in responses]
            await asyncio.gather(*(r.aclose() for r in responses))
            return statuses

    statuses = asyncio.run(burst())
    assert statuses.count(200) <= MAX_WATCHES, statuses
    assert statuses.count(503) >= 40 and set(statuses) <= {200, 503}
    time.sleep(0.5)  # the closed watches give their slots back
    with api.client.stream("GET", "/api/v1/events", params={"watch": "1",
                                                             "timeoutSeconds": "1"}) as r:
        assert r.status_code == 200


def test_watch_from_a_version_not_reached_is_refused(api: Api) -> None:
    """A resourceVersion past the newest event would wait, silent, for ids that may never
    come (and skip every event up to it): refused, as a version out of range."""
    latest = int(api.client.get("/api/v1/events").json()["metadata"]["resourceVersion"])
    for plural in ("events", "cells"):
        doc = assert_problem(api.client.get(f"/api/v1/{plural}", params={
            "watch": "true", "resourceVersion": str(latest + 10**9)}), 400)
        assert "newest" in doc["detail"]
    with api.client.stream("GET", "/api/v1/events", params={
            "watch": "1", "resourceVersion": str(latest), "timeoutSeconds": "1"}) as r:
        assert r.status_code == 200


def test_watch_from_a_version_older_than_the_log_keeps_is_gone(api: Api) -> None:
    """A version whose later changes the log no longer holds (here: from before the log,
    which began after the newest event an upgrade found) is a 410 problem: list again."""
    from devcell.store import changes
    from devcell.store.db import Database

    api.client.post("/api/v1/apply", content=cell("logged"), headers=YAML)
    db = Database(api.state, create=False)
    try:  # prune the oldest change kept, as the log does when it is full
        with db.write() as conn:
            conn.execute("DELETE FROM changes WHERE seq = (SELECT min(seq) FROM changes)")
        first = changes.oldest(db.conn)
    finally:
        db.close()
    assert first > 0
    for plural in ("events", "cells", "snapshots", "operations"):
        doc = assert_problem(api.client.get(f"/api/v1/{plural}", params={
            "watch": "true", "resourceVersion": str(first - 1)}), 410)
        assert doc["type"].endswith("/gone") and "list again" in doc["detail"]
    with api.client.stream("GET", "/api/v1/cells", params={
            "watch": "1", "resourceVersion": str(first), "timeoutSeconds": "1"}) as r:
        assert r.status_code == 200


# -- the OpenAPI document -----------------------------------------------------------------------


def test_openapi_document_is_served(api: Api) -> None:
    doc = api.client.get("/api/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert {"/api/v1/cells", "/api/v1/cells/{name}", "/api/v1/apply", "/api/v1/events",
            "/api/v1/openapi.json"} <= set(doc["paths"])
    spec = doc["components"]["schemas"]["CellManifest"]["properties"]["spec"]
    assert spec  # from devcell/schemas: the schema `devcell schema cell` prints
