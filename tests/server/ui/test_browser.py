"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright for Python
through its executable (tests/server/ui/conftest.py: ONE browser for the session), against
the API's shared real server over TLS on 127.0.0.1 (fake backend), signed in with a token
through the sign-in form. Each test keeps a screenshot of its page (the `artifacts` folder)
and fails on any error the page logs, a Content-Security-Policy violation included.

Cost: the browser's start ~1 s once; each test ~0.5-2 s (the live event: until the
daemon records it, ~0.5 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Api
from tests.server.ui.conftest import Family, cell_yaml, unique


class Opened:
    """A page of a signed-in browser context, with the errors it logged."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))


def _signed_in(browser: Any, api: Api, token: str) -> Any:
    context = browser.new_context(ignore_https_errors=True, base_url=api.url)
    page = context.new_page()
    page.goto("/ui/cells")
    assert page.url.endswith("/ui/login")
    page.fill('input[name="token"]', token)
    page.click('button[type="submit"]')
    page.wait_for_url("**/ui/cells")
    page.close()
    return context


@pytest.fixture(scope="module")
def admin(browser: Any, api: Api) -> Iterator[Any]:
    context = _signed_in(browser, api, api.token(unique("ui-admin"), "admin"))
    yield context
    context.close()


@pytest.fixture
def opened(admin: Any) -> Iterator[Opened]:
    found = Opened(admin.new_page())
    yield found
    found.page.close()
    assert not found.errors, found.errors


def _shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def test_cells_page(opened: Opened, api: Api, family: Family, artifacts: Path) -> None:
    page = opened.page
    page.goto("/ui/cells")
    row = page.locator("table.cells tbody tr", has_text=family.forks[0])
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == family.forks[0] and cells[1] == "Running" and cells[2] == "fake"
    assert page.locator("table.cells th").all_inner_texts()[:7] == [
        "Name", "Phase", "Backend", "Node", "Owner", "Idle", "Disk"]
    _shot(page, artifacts, "cells")
    page.click(f"text={family.cell}")
    page.wait_for_url(f"**/ui/cells/{family.cell}")
    assert page.locator("h1").inner_text() == f"Cell {family.cell}"
    _shot(page, artifacts, "cell")


def test_lineage_graph_of_three_snapshots_and_two_forks(opened: Opened, family: Family,
                                                        artifacts: Path) -> None:
    page = opened.page
    page.goto(f"/ui/lineage?cell={family.cell}")
    graph = page.locator("svg.lineage")
    assert graph.is_visible()
    assert graph.locator("g.node.snapshot").count() == 3
    assert graph.locator("g.node.cell").count() == 3  # the cell and its two forks
    assert graph.locator("path.edge").count() == 5
    for fork, snap in zip(family.forks, family.snapshots, strict=False):
        assert graph.locator(f'path.edge[data-from="{snap}"][data-to="{fork}"]').count() == 1
    box = graph.locator(f'g.node[data-name="{family.forks[1]}"]').bounding_box()
    root = graph.locator(f'g.node[data-name="{family.cell}"]').bounding_box()
    assert box is not None and root is not None and box["x"] > root["x"]  # read left to right
    _shot(page, artifacts, "lineage")
    graph.locator(f'g.node[data-name="{family.forks[0]}"] a').click()
    page.wait_for_url(f"**/ui/cells/{family.forks[0]}")


def test_operation_timeline(opened: Opened, api: Api, family: Family,
                            artifacts: Path) -> None:
    ops = api.client.get("/api/v1/operations").json()["items"]
    op = next(o for o in ops if o["object_name"] == family.forks[1])
    page = opened.page
    page.goto(f"/ui/operations/{op['id']}")
    steps = page.locator("svg.timeline g.step")
    assert steps.count() == len(op["steps"]) > 0
    for i, step in enumerate(op["steps"]):
        bar = steps.nth(i).locator("rect.bar")
        assert bar.count() == 1 and bar.is_visible()
        assert steps.nth(i).get_attribute("data-step") == step["name"]
    assert page.locator("table.steps tbody tr").count() == len(op["steps"])
    _shot(page, artifacts, "operation")


def test_a_live_event_arrives_without_reload(opened: Opened, api: Api,
                                             artifacts: Path) -> None:
    page = opened.page
    page.goto("/ui/events")
    page.wait_for_selector('.live-state[data-state="live"]', timeout=15_000)
    marker = page.evaluate("() => { window.notReloaded = true; return 1; }")
    name = unique("arrives")
    made = api.client.post("/api/v1/apply", content=cell_yaml(name),
                           headers={"Content-Type": "application/yaml"})
    assert made.status_code == 200, made.text
    page.wait_for_selector(f'table.events tr.arrived:has-text("cell/{name}")', timeout=15_000)
    assert marker == 1 and page.evaluate("() => window.notReloaded") is True
    _shot(page, artifacts, "events-live")


def test_a_viewers_action_is_refused_with_the_rule(browser: Any, api: Api, family: Family,
                                                   artifacts: Path) -> None:
    context = _signed_in(browser, api, api.token(unique("ui-viewer"), "viewer"))
    try:
        opened = Opened(context.new_page())
        page = opened.page
        page.goto(f"/ui/cells/{family.cell}")
        sleep = page.locator('form.action[data-verb="sleep"]')
        assert "rule viewer-read-only" in sleep.inner_text()
        _shot(page, artifacts, "cell-viewer")
        sleep.locator("button").click()
        page.wait_for_load_state()
        assert page.locator("h1").inner_text() == "403 Forbidden"
        assert page.locator(".rule").inner_text() == "Refused by rule viewer-read-only."
        assert "may not sleep" in page.locator(".detail").inner_text()
        _shot(page, artifacts, "refused")
        # the refusal's own status is all the page logs
        assert all(e.startswith("Failed to load resource") and "403" in e
                   for e in opened.errors), opened.errors
    finally:
        context.close()
    held = api.client.get(f"/api/v1/cells/{family.cell}").json()["status"].get("held")
    assert held is None or held.get("by") != "api sleep"
