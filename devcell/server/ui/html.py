"""HTML made safely from hostile strings, with the standard library alone.

A cell's names, labels, owners, event messages and errors are whatever someone wrote, so no
user string reaches a page unescaped: `Html` is text already safe to send, and `h()` makes it
from a template whose every argument is escaped (html.escape, quotes included, after
names.printable turns control characters into their escapes) unless it is an `Html` itself.
A page is built only from `Html`, so forgetting to escape is a type error (mypy), not a hole.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import quote

from devcell.names import printable


class Html(str):
    """Text already escaped: inserted into a page as it is."""

    __slots__ = ()


def esc(value: object) -> Html:
    """`value` as text safe anywhere in a page or a quoted attribute (None: a dash)."""
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("-")
    return Html(html.escape(printable(str(value)), quote=True))


def h(template: str, *args: object) -> Html:
    """`template` (a literal, trusted) with each `{}` replaced by its argument, escaped."""
    return Html(template.format(*(esc(a) for a in args)))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    return Html(sep.join(esc(p) for p in parts))


def path(*segments: str) -> Html:
    """A URL path under /ui made of segments (each percent-encoded: a name cannot add a
    segment, a query or a scheme)."""
    return Html(html.escape("/ui/" + "/".join(quote(s, safe="") for s in segments),
                            quote=True))


NAV = (("cells", "Cells"), ("lineage", "Lineage"), ("operations", "Operations"),
       ("events", "Events"))


def page(title: str, body: Html, *, user: str | None, role: str | None, csrf: str | None,
         script: bool = True, active: str = "") -> Html:
    """A whole page: the navigation, who is signed in (and a sign-out button when signed in
    with a token), the body, and the one script (served as a file: the CSP allows no inline
    script)."""
    links = join(h('<a href="/ui/{}"{}>{}</a>', key,
                   Html(' aria-current="page"') if key == active else Html(""), label)
                 for key, label in NAV)
    who = Html("")
    if user is not None:
        who = h('<span class="who">{} <span class="role">({})</span></span>', user, role)
        if csrf is not None:
            who = h('{}<form method="post" action="/ui/logout" class="inline">'
                    '<input type="hidden" name="csrf" value="{}">'
                    '<button type="submit">Sign out</button></form>', who, csrf)
    js = Html('<script src="/ui/static/ui.js" defer></script>') if script else Html("")
    return h('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             '<title>{} - DevCell</title><link rel="stylesheet" href="/ui/static/ui.css">{}'
             '</head><body><header><a class="brand" href="/ui/cells">DevCell</a>'
             '<nav>{}</nav><div class="session">{}</div></header><main>{}</main>'
             '</body></html>\n', title, js, links, who, body)


def table(headers: Iterable[str], rows: Iterable[Iterable[object]], *, cls: str = "",
          row_ids: Iterable[str] | None = None) -> Html:
    """A table; each cell escaped unless it is Html (a link made with h())."""
    head = join(h("<th>{}</th>", x) for x in headers)
    ids = iter(row_ids) if row_ids is not None else None
    body = join(h('<tr{}>{}</tr>',
                  h(' data-id="{}"', next(ids)) if ids is not None else Html(""),
                  join(h("<td>{}</td>", c) for c in row)) for row in rows)
    return h('<table class="{}"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
             cls, head, body)
