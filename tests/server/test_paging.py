"""server.paging: limit and continue tokens, in process (validated, never trusted), then a
paged list through the session's real server and the SDK following its tokens.

Cost: in process ~10 ms; the server's part ~2 s (five cells applied)."""

from __future__ import annotations

import base64
import json

import pytest

from devcell import Client
from devcell.errors import UsageError
from devcell.server import paging
from tests.server.conftest import Api
from tests.server.test_app import YAML, assert_problem, cell


def _forged(fields: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


def test_a_token_names_where_its_page_ended_for_its_own_list() -> None:
    given = paging.token("cells", "team=a", "web-2")
    assert paging.after(given, "cells", "team=a") == "web-2"
    for resource, selector in (("snapshots", "team=a"), ("cells", "team=b"), ("cells", "")):
        with pytest.raises(UsageError, match="not a token this list gave"):
            paging.after(given, resource, selector)


@pytest.mark.parametrize("given", [
    "", "not base64!", "e30", "x" * 300, "é",
    _forged({"v": 1, "r": "cells", "q": "", "a": "x"}),  # the selector not as digested
    _forged({"v": 2, "r": "cells", "q": paging._digest(""), "a": "x"}),
    _forged({"v": 1, "r": "cells", "q": paging._digest(""), "a": "Not A Name"}),
    _forged({"v": 1, "r": "cells", "q": paging._digest(""), "a": ["x"]}),
    _forged({"v": 1, "r": "cells", "q": paging._digest(""), "a": "x", "admin": True}),
    _forged([1, 2]), base64.urlsafe_b64encode(b"[" * 5000).decode()[:250]])
def test_a_forged_token_is_refused(given: str) -> None:
    with pytest.raises(UsageError, match="not a token this list gave"):
        paging.after(given, "cells", "")


def test_pages_in_name_order_each_row_once() -> None:
    rows = [{"name": n} for n in ("a", "b", "c", "d", "e")]
    first, ended = paging.page(rows, None, 2)
    assert [r["name"] for r in first] == ["a", "b"] and ended == "b"
    second, ended = paging.page(rows, ended, 2)
    assert [r["name"] for r in second] == ["c", "d"] and ended == "d"
    last, ended = paging.page(rows, ended, 2)
    assert [r["name"] for r in last] == ["e"] and ended is None
    assert paging.page(rows, "b", None) == (rows[2:], None)


@pytest.mark.parametrize("given", ["0", "10001", "-1", "x", "1.5", "9" * 20])
def test_limit_out_of_range_is_refused(given: str) -> None:
    with pytest.raises(UsageError, match="limit"):
        paging.limit(given)


# -- through the server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paged_cells(api: Api) -> list[str]:
    names = [f"paged-{i}" for i in range(5)]
    stream = "---\n".join(cell(n, team="paged") for n in names)
    assert api.client.post("/api/v1/apply", content=stream, headers=YAML).status_code == 200
    return names


def test_a_paged_list_returns_each_object_once(api: Api, paged_cells: list[str]) -> None:
    seen: list[str] = []
    query = {"labelSelector": "team=paged", "limit": "2"}
    pages = 0
    while True:
        got = api.client.get("/api/v1/cells", params=query)
        assert got.status_code == 200, got.text
        doc = got.json()
        assert len(doc["items"]) <= 2
        seen += [c["metadata"]["name"] for c in doc["items"]]
        pages += 1
        if "continue" not in doc["metadata"]:
            break
        query["continue"] = doc["metadata"]["continue"]
    assert seen == paged_cells and pages == 3


def test_the_sdk_follows_continue_tokens(api: Api, paged_cells: list[str]) -> None:
    with Client(f"unix:{api.socket}") as dc:
        whole = dc.list("cells", selector="team=paged")
        paged = dc.list("cells", selector="team=paged", limit=2)
    assert [c["metadata"]["name"] for c in paged] == paged_cells
    assert [c["metadata"]["name"] for c in whole] == paged_cells


def test_a_developer_s_paged_list_is_redacted_too(api: Api, paged_cells: list[str]) -> None:
    with api.tls_client(api.token("paging-dev", "developer")) as dev:
        got = dev.get("/api/v1/cells", params={"limit": "1"})
        assert got.status_code == 200
        first = got.json()["items"][0]["metadata"]["name"]
        rest: list[str] = []
        token = got.json()["metadata"]["continue"]
        while token:
            doc = dev.get("/api/v1/cells", params={"limit": "10000", "continue": token}).json()
            rest += [c["metadata"]["name"] for c in doc["items"]]
            token = doc["metadata"].get("continue")
            assert b"not-a-secret" not in json.dumps(doc).encode()
    assert first not in rest and "seed" in [first, *rest]


@pytest.mark.parametrize("query", [
    {"continue": "forged"},
    {"continue": _forged({"v": 1, "r": "cells", "q": paging._digest(""), "a": "../x"})},
    {"limit": "0"}, {"limit": "many"},
    {"limit": "2", "watch": "true"},
])
def test_a_bad_page_request_is_a_400_problem(api: Api, query: dict[str, str]) -> None:
    assert_problem(api.client.get("/api/v1/cells", params=query), 400)


def test_another_list_s_token_is_a_400(api: Api, paged_cells: list[str]) -> None:
    doc = api.client.get("/api/v1/cells", params={"labelSelector": "team=paged",
                                                  "limit": "1"}).json()
    token = doc["metadata"]["continue"]
    for path, query in (("/api/v1/cells", {"continue": token}),
                        ("/api/v1/snapshots", {"labelSelector": "team=paged",
                                               "continue": token}),
                        ("/api/v1/operations", {"limit": "1"})):
        assert_problem(api.client.get(path, params=query), 400)


def test_pages_without_a_selector_are_the_whole_list(api: Api, paged_cells: list[str]) -> None:
    """Without a selector a page is read as a page (its start and limit in SQL): the pages
    together are the unpaged list, in its order, each cell once."""
    with Client(f"unix:{api.socket}") as dc:
        for _ in range(20):  # a commit between the lists (another test's cells): again
            whole = [c["metadata"]["name"] for c in dc.list("cells")]
            paged = [c["metadata"]["name"] for c in dc.list("cells", limit=2)]
            if paged == whole:
                break
    assert paged == whole and len(set(paged)) == len(paged)
    assert set(paged_cells) <= set(paged)
