"""The dashboard's pages, as HTML bodies made from ui.data's records (every user string
escaped by ui.html). The live parts are marked with data- attributes that the one script
(static/ui.js) reads: where to listen (`data-watch`, a /ui/watch/... URL) and where to put what
arrives."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devcell.server.ui import data, graph
from devcell.server.ui.html import Html, h, join, path, table

ACTIONS = ("sleep", "start", "snapshot", "fork")


def _link(kind: str, name: str | None) -> Html:
    if not name:
        return Html("-")
    return h('<a href="{}">{}</a>', path(kind, name), name)


def login(message: str | None, csrf: str) -> Html:
    note = h('<p class="error" role="alert">{}</p>', message) if message else Html("")
    return h('<h1>Sign in</h1>{}<form method="post" action="/ui/login" class="login">'
             '<input type="hidden" name="csrf" value="{}">'
             '<label>Token <input type="password" name="token" autocomplete="off" required '
             'autofocus></label><button type="submit">Sign in</button></form>'
             '<p class="hint">A token is made by an admin: <code>devcell token create --user '
             'NAME --role viewer|developer|admin</code>. It is kept by the server for this '
             'session only, never in the browser.</p>', note, csrf)


def cells(found: data.Cells) -> Html:
    rows = [[_link("cells", r.name), h('<span class="phase phase-{}">{}</span>',
                                       r.phase.lower(), r.phase),
             r.backend, r.node or "local", r.owner, r.idle, r.disk,
             r.forked_from, r.age] for r in found.rows]
    notes = join(h('<p class="note">{}</p>', n) for n in found.notes)
    body = table(["Name", "Phase", "Backend", "Node", "Owner", "Idle", "Disk", "Forked from",
                  "Age"], rows, cls="cells", row_ids=[r.id for r in found.rows])
    if not found.rows:
        body = Html('<p class="empty">No cells.</p>')
    return h('<h1>Cells</h1>{}<div data-watch="/ui/watch/cells?resourceVersion={}" '
             'data-kind="cells">{}</div><p class="live" aria-live="polite"></p>',
             notes, found.version, body)


def _fields(pairs: list[tuple[str, object]]) -> Html:
    return h('<dl class="fields">{}</dl>',
             join(h("<dt>{}</dt><dd>{}</dd>", k, v) for k, v in pairs))


def _events(rows: list[dict[str, Any]], watch: str) -> Html:
    body = table(["Time", "Type", "Reason", "Object", "Message", "By"],
                 [[e["created_at"], e["type"], e["reason"],
                   f"{str(e['object_kind']).lower()}/{e['object_name']}", e["message"],
                   e.get("actor")] for e in rows], cls="events")
    return h('<section class="events-live" data-watch="{}" data-kind="events">'
             '<h2>Events <span class="live-state"></span></h2>{}</section>', watch, body)


def _operations(rows: list[dict[str, Any]]) -> Html:
    return table(["Operation", "Object", "Action", "Trigger", "Status", "Step", "By", "Created"],
                 [[_link("operations", o["id"]),
                   f"{str(o['object_kind']).lower()}/{o['object_name']}", o["action"],
                   o["trigger"], o["status"], o["current_step"], o.get("actor"),
                   o["created_at"]] for o in reversed(rows)], cls="operations")


def actions(name: str, csrf: str, decisions: dict[str, Any],
            snapshots: list[dict[str, Any]]) -> Html:
    """The safe verbs as buttons, each a POST carrying the CSRF token. The server judges each
    by the caller's role (a refusal is a page naming its rule); beside a button the caller's
    role may not use, the rule that will refuse it."""
    forms = []
    for verb in ACTIONS:
        extra = Html("")
        if verb in ("snapshot", "fork"):
            extra = h('<input name="name" placeholder="new {} name" required '
                      'maxlength="63" aria-label="new {} name">', verb, verb)
        if verb == "fork":
            ready = [s["name"] for s in snapshots if s.get("phase") == "Ready"]
            extra = h('{}<select name="snapshot" aria-label="snapshot to fork">{}</select>',
                      extra, join(h('<option value="{}">{}</option>', s, s) for s in ready))
        decision = decisions.get(verb)
        note = Html("")
        if decision is not None and not decision.allowed:
            note = h('<span class="refused">your role may not: rule {}</span>', decision.rule)
        forms.append(h('<form method="post" action="{}" class="action" data-verb="{}">'
                       '<input type="hidden" name="csrf" value="{}">{}'
                       '<button type="submit">{}</button>{}</form>',
                       path("cells", name, verb), verb, csrf, extra, verb.capitalize(), note))
    return h('<section class="actions"><h2>Actions</h2>{}</section>', join(forms))


def cell(found: data.Cell, csrf: str, *, decisions: dict[str, Any], done: str | None = None
         ) -> Html:
    doc, r = found.doc, found.row
    meta, spec, status = doc["metadata"], doc["spec"], doc["status"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted((meta.get("labels") or {}).items()))
    notes = "; ".join(f"{k}: {v}" for k, v in sorted((meta.get("annotations") or {}).items()))
    forked = (status.get("lineage") or {}).get("forkedFrom") or {}
    held = status.get("held") or {}
    pairs: list[tuple[str, object]] = [
        ("Name", meta["name"]), ("Id", meta["id"]), ("Phase", r.phase),
        ("Backend", r.backend), ("Node", r.node or "local"), ("Owner", r.owner),
        ("Shared with", ", ".join(str(u) for u in spec.get("sharedWith") or []) or None),
        ("Image", spec.get("image")), ("Labels", labels or None),
        ("Annotations", notes or None), ("Idle", r.idle),
        ("Disk", r.disk), ("Held", f"{held.get('state')} by {held.get('by')}" if held else None),
        ("Forked from", h("{} (of cell {})", _link_snapshot(forked.get("snapshot")),
                          forked.get("cell")) if forked else None),
        ("Created", meta.get("creationTimestamp")), ("Message", status.get("message")),
    ]
    snaps = table(["Snapshot", "Phase", "Consistency", "Forks", "Created"],
                  [[s["name"], s["phase"], s["consistency"], s["forks"], s["created_at"]]
                   for s in found.snapshots], cls="snapshots") if found.snapshots else \
        Html('<p class="empty">No snapshots.</p>')
    return h('<h1>Cell {}</h1>{}{}{}<h2>Snapshots <a class="small" href="{}?cell={}">'
             'lineage graph</a></h2>{}<h2>Operations</h2>{}{}',
             meta["name"], _done(done), _fields(pairs),
             actions(meta["name"], csrf, decisions, found.snapshots),
             path("lineage"), meta["name"], snaps, _operations(found.operations),
             _events(found.events, f"/ui/watch/events?for=cell/{meta['id']}"
                                   f"&resourceVersion={found.version}"))


def _done(verb: str | None) -> Html:
    if verb is None:
        return Html("")
    return h('<p class="done" role="status">{} recorded: the daemon carries it out (see the '
             'events below).</p>', verb.capitalize())


def _link_snapshot(name: object) -> Html:
    return h('<span class="snapshot">{}</span>', name)


def lineage(found: data.Lineage, focus: str | None) -> Html:
    title = h("Lineage of {}", focus) if focus else Html("Lineage")
    return h('<h1>{}</h1><p class="hint">Each cell, the snapshots taken of it, and the cells '
             'forked from those.</p><div class="graph">{}</div>', title,
             graph.lineage_svg(found.roots, found.children, focus))


def operations(found: data.Operations) -> Html:
    return h('<h1>Operations</h1>{}', _operations(found.rows))


def operation(op: dict[str, Any]) -> Html:
    now = datetime.now(UTC)
    steps = op.get("steps", [])
    rows = []
    for s in steps:
        _, duration = graph.step_span(op, s, now)
        rows.append([s["idx"], s["name"], s["status"], s.get("started_at"),
                     graph.seconds_text(duration),
                     h('<span class="error">{}</span>', s["error"]) if s.get("error") else None])
    pairs: list[tuple[str, object]] = [
        ("Operation", op["id"]),
        ("Object", _link("cells", op["object_name"]) if op["object_kind"] == "Cell"
         else f"{str(op['object_kind']).lower()}/{op['object_name']}"),
        ("Action", op["action"]), ("Trigger", op["trigger"]), ("Status", op["status"]),
        ("Reason", op.get("reason")), ("By", op.get("actor")), ("Created", op["created_at"]),
        ("Finished", op.get("finished_at")), ("Message", op.get("message"))]
    return h('<h1>Operation {}</h1>{}<h2>Timeline</h2><div class="graph">{}</div>{}',
             op["id"], _fields(pairs), graph.timeline_svg(op, now),
             table(["#", "Step", "Status", "Started", "Took", "Error"], rows, cls="steps"))


def events(found: data.Events) -> Html:
    return h('<h1>Events</h1>{}',
             _events(found.rows, f"/ui/watch/events?resourceVersion={found.version}"))


def problem(status: int, title: str, detail: str, rule: str | None = None) -> Html:
    """An error as a page: what went wrong, and for a refusal the rule that refused it."""
    extra = h('<p class="rule">Refused by rule <code>{}</code>.</p>', rule) if rule else \
        Html("")
    return h('<div class="problem" role="alert"><h1>{} {}</h1><p class="detail">{}</p>{}</div>',
             status, title, detail, extra)
