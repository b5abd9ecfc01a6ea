"""ui.graph: the lineage forest's layout (left to right, parents between their children, as
deep as forks go without recursion) and an operation's timeline (bars where and as long as
each step ran)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from devcell.api.lineage import forest
from devcell.server.ui.graph import lineage_svg, seconds_text, timeline_svg


def _cell(i: str, forked_from: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": f"c{i}", "name": f"cell-{i}", "phase": "Running", "forked_from": forked_from,
            "deleting_at": None, "deleted_at": None, **extra}


def _snap(i: str, cell: str | None, **extra: Any) -> dict[str, Any]:
    return {"id": f"s{i}", "name": f"snap-{i}", "cell_id": cell, "phase": "Ready",
            "deleting_at": None, "deleted_at": None, **extra}


def _boxes(svg: str) -> dict[str, tuple[float, float]]:
    found = re.findall(r'data-name="([^"]+)">(?:<a href="[^"]+">)?<rect x="([\d.]+)" '
                       r'y="([\d.]+)"', svg)
    return {name: (float(x), float(y)) for name, x, y in found}


def test_a_cell_its_snapshots_and_their_forks() -> None:
    cells = [_cell("a"), _cell("f1", "s1"), _cell("f2", "s2")]
    snaps = [_snap("1", "ca"), _snap("2", "ca"), _snap("3", "ca")]
    svg = lineage_svg(*forest(cells, snaps), focus="cell-a")
    boxes = _boxes(svg)
    assert set(boxes) == {"cell-a", "snap-1", "snap-2", "snap-3", "cell-f1", "cell-f2"}
    assert boxes["cell-a"][0] < boxes["snap-1"][0] < boxes["cell-f1"][0]  # left to right
    assert boxes["snap-1"][1] < boxes["snap-2"][1] < boxes["snap-3"][1]
    assert boxes["cell-a"][1] == boxes["snap-2"][1]  # between its first and last child
    assert len(re.findall(r'class="edge"', svg)) == 5
    assert 'class="node cell phase-running focus" data-kind="cell" data-name="cell-a"' in svg
    assert 'href="/ui/cells/cell-f1"' in svg and 'href="/ui/cells/snap' not in svg


def test_a_deep_chain_of_forks_draws_without_recursion() -> None:
    cells, snaps = [_cell("0")], []
    for i in range(1, 1500):
        snaps.append(_snap(str(i), f"c{i - 1}"))
        cells.append(_cell(str(i), f"s{i}"))
    svg = lineage_svg(*forest(cells, snaps))
    assert svg.count('class="edge"') == 2 * 1499


def test_hostile_names_are_escaped_in_the_graph() -> None:
    svg = lineage_svg(*forest([_cell("x", name="</text><script>x</script>")], []))
    assert "<script>" not in svg and "&lt;/text&gt;&lt;script&gt;" in svg


def test_the_timeline_places_each_step() -> None:
    op = {"created_at": "2026-12-05T10:00:00.000Z", "steps": [
        {"name": "create", "status": "Succeeded", "started_at": "2026-12-05T10:00:00.000Z",
         "finished_at": "2026-12-05T10:00:01.000Z", "duration_ms": 1000.0},
        {"name": "start", "status": "Failed", "started_at": "2026-12-05T10:00:01.000Z",
         "finished_at": "2026-12-05T10:00:04.000Z", "duration_ms": 3000.0,
         "error": "<boom>"},
        {"name": "wait", "status": "Pending", "started_at": None, "finished_at": None,
         "duration_ms": None}]}
    svg = timeline_svg(op, now=datetime(2026, 12, 5, 10, 1, tzinfo=UTC))
    bars = re.findall(r'<rect class="bar" x="([\d.]+)" y="\d+" width="([\d.]+)"', svg)
    assert len(bars) == 2  # the pending step has none
    (x1, w1), (x2, w2) = [(float(x), float(w)) for x, w in bars]
    assert x1 < x2 and abs(x1 + w1 - x2) < 0.2 and abs(w2 / w1 - 3) < 0.01
    assert 'class="step status-failed" data-step="start"' in svg
    assert seconds_text(0.25) == "250 ms" and seconds_text(3) == "3.00 s"
    assert seconds_text(None) == "-"
