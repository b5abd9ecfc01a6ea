"""The dashboard's two drawings, as SVG made on the server: a lineage forest (cells, the
snapshots taken of them, the cells forked from those) and an operation's steps on a time
axis. Every name and message is escaped (ui.html); the layouts are iterative, since lineage
may be as deep as forks of forks go.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devcell.api.lineage import Node
from devcell.server.ui.html import Html, h, join, path

W, H, GAP_X, GAP_Y, PAD = 200, 36, 56, 14, 10
MAX_LABEL = 24


def _short(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 1] + "\u2026"


def _state(kind: str, row: dict[str, Any]) -> str:
    if row.get("deleted_at"):
        return "Deleted"
    if row.get("deleting_at"):
        return "Deleting"
    return str(row.get("phase") or "Pending")


def _layout(roots: list[Node], children: dict[str, list[Node]]
            ) -> tuple[list[tuple[Node, int, float]], list[tuple[Node, Node]]]:
    """(node, depth, row) for every node and the (parent, child) edges: leaves take the next
    row each, a parent sits midway between its first and last child."""
    placed: dict[str, tuple[Node, int, float]] = {}
    order: list[str] = []
    edges: list[tuple[Node, Node]] = []
    next_row = 0.0
    for root in roots:
        # Post-order without recursion: (node, depth, children done?).
        stack: list[tuple[Node, int, bool]] = [(root, 0, False)]
        while stack:
            node, depth, done = stack.pop()
            key = node[1]["id"]
            kids = children.get(key, [])
            if kids and not done:
                stack.append((node, depth, True))
                for kid in reversed(kids):
                    edges.append((node, kid))
                    stack.append((kid, depth + 1, False))
                continue
            if kids:
                rows = [placed[k[1]["id"]][2] for k in kids]
                row = (rows[0] + rows[-1]) / 2
            else:
                row, next_row = next_row, next_row + 1
            placed[key] = (node, depth, row)
            order.append(key)
    return [placed[k] for k in order], edges


def lineage_svg(roots: list[Node], children: dict[str, list[Node]], focus: str | None = None
                ) -> Html:
    """The forest as an SVG: a cell a box linking to its page, a snapshot a rounded box, an
    arrow from each cell to its snapshots and from each snapshot to its forks."""
    nodes, edges = _layout(roots, children)
    if not nodes:
        return Html('<p class="empty">No cells or snapshots.</p>')
    where = {n[1]["id"]: (PAD + d * (W + GAP_X), PAD + r * (H + GAP_Y)) for n, d, r in nodes}
    width = max(x for x, _ in where.values()) + W + PAD
    height = max(y for _, y in where.values()) + H + PAD
    lines = []
    for parent, child in edges:
        (x1, y1), (x2, y2) = where[parent[1]["id"]], where[child[1]["id"]]
        x1, y1, y2 = x1 + W, y1 + H / 2, y2 + H / 2
        mid = (x1 + x2) / 2
        lines.append(h('<path class="edge" data-from="{}" data-to="{}" '
                       'd="M{} {} C{} {} {} {} {} {}" marker-end="url(#arrow)"/>',
                       parent[1]["name"], child[1]["name"], x1, y1, mid, y1, mid, y2, x2, y2))
    boxes = []
    for (kind, row), _, _ in nodes:
        x, y = where[row["id"]]
        state = _state(kind, row)
        cls = f"node {kind} phase-{state.lower()}"
        if focus is not None and focus in (row["name"], row["id"]):
            cls += " focus"
        text = h('<rect x="{}" y="{}" width="{}" height="{}" rx="{}"/>'
                 '<text x="{}" y="{}" class="name">{}</text>'
                 '<text x="{}" y="{}" class="state">{} \u00b7 {}</text>'
                 '<title>{}/{} ({})</title>',
                 x, y, W, H, 14 if kind == "snapshot" else 3,
                 x + 8, y + 15, _short(str(row["name"])),
                 x + 8, y + 29, kind, state, kind, row["name"], state)
        if kind == "cell" and not row.get("deleted_at"):
            text = h('<a href="{}">{}</a>', path("cells", str(row["name"])), text)
        boxes.append(h('<g class="{}" data-kind="{}" data-name="{}">{}</g>',
                       cls, kind, row["name"], text))
    return h('<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
             'viewBox="0 0 {} {}" role="img" aria-label="snapshot lineage">'
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M0 0 L10 5 L0 10 z"/>'
             '</marker></defs>{}{}</svg>', width, height, width, height, join(lines),
             join(boxes))


def _when(stamp: object) -> datetime | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        found = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def step_span(op: dict[str, Any], step: dict[str, Any], now: datetime
              ) -> tuple[float | None, float | None]:
    """(start, duration) of a step in seconds from the operation's start (None: not begun
    or not known)."""
    t0 = _when(op.get("created_at"))
    started = _when(step.get("started_at"))
    if t0 is None or started is None:
        return None, None
    finished = _when(step.get("finished_at"))
    if step.get("duration_ms") is not None:
        duration: float | None = float(step["duration_ms"]) / 1000
    elif finished is not None:
        duration = (finished - started).total_seconds()
    elif step.get("status") == "Running":
        duration = (now - started).total_seconds()
    else:
        duration = None
    return max((started - t0).total_seconds(), 0.0), duration


CHART, LABEL, ROW = 560, 170, 26


def timeline_svg(op: dict[str, Any], now: datetime | None = None) -> Html:
    """Each step as a bar placed at its start and as long as it took, its status as its
    colour (a failed step's bar red, its error under the chart's table)."""
    now = now or datetime.now(UTC)
    spans = [step_span(op, s, now) for s in op.get("steps", [])]
    ends = [a + (d or 0) for a, d in spans if a is not None]
    total = max(ends + [0.001])
    bars = []
    for i, (step, (start, duration)) in enumerate(zip(op.get("steps", []), spans, strict=True)):
        y = 20 + i * ROW
        status = str(step.get("status") or "Pending")
        bar = Html("")
        if start is not None:
            x = LABEL + start / total * CHART
            width = max((duration or 0) / total * CHART, 2)
            bar = Html(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{width:.1f}" '
                       'height="16"/>')
        bars.append(h('<g class="step status-{}" data-step="{}"><text x="0" y="{}">{}</text>'
                      '{}<text x="{}" y="{}" class="dur">{}</text></g>',
                      status.lower(), step.get("name"), y + 12, _short(str(step.get("name"))),
                      bar, LABEL + CHART + 8, y + 12, seconds_text(duration)))
    height = 30 + len(bars) * ROW
    axis = h('<line class="axis" x1="{}" y1="10" x2="{}" y2="10"/>'
             '<text x="{}" y="8" class="dur">0</text><text x="{}" y="8" class="dur end">{}</text>',
             LABEL, LABEL + CHART, LABEL, LABEL + CHART, seconds_text(total))
    return h('<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
             'viewBox="0 0 {} {}" role="img" aria-label="operation timeline">{}{}</svg>',
             LABEL + CHART + 90, height, LABEL + CHART + 90, height, axis, join(bars))
