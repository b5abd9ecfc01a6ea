"""ui.html: every argument escaped unless it is already Html; a name is one path segment."""

from __future__ import annotations

from devcell.server.ui.html import Html, esc, h, page, path, table


def test_arguments_are_escaped_and_html_is_kept() -> None:
    made = h("<td>{}</td><td>{}</td>", "<b>&\"'</b>", Html("<i>ok</i>"))
    assert made == "<td>&lt;b&gt;&amp;&quot;&#x27;&lt;/b&gt;</td><td><i>ok</i></td>"
    assert esc(None) == "-" and esc(3) == "3"
    assert esc("\x1b[31m\u202e") == "\\x1b[31m\\u202e"  # controls as their escapes
    assert h("{}", "{0}{}") == "{0}{}"  # an argument is never a template


def test_a_name_is_one_percent_encoded_segment() -> None:
    assert path("cells", "a/../b?x=1#y") == "/ui/cells/a%2F..%2Fb%3Fx%3D1%23y"
    assert path("cells", '"><script>') == "/ui/cells/%22%3E%3Cscript%3E"


def test_a_page_has_one_script_from_a_file_and_no_inline_code() -> None:
    shown = page("<t>", Html("<p>x</p>"), user="<u>", role="viewer", csrf="c\"s")
    assert shown.count("<script") == 1 and '<script src="/ui/static/ui.js" defer>' in shown
    assert "<title>&lt;t&gt; - DevCell</title>" in shown and "&lt;u&gt;" in shown
    assert 'value="c&quot;s"' in shown and " style=" not in shown
    rows = table(["A"], [["<x>"], [Html("<a href=\"/ui/cells/y\">y</a>")]], row_ids=["1", "2"])
    assert '<tr data-id="1"><td>&lt;x&gt;</td></tr>' in rows
    assert '<tr data-id="2"><td><a href="/ui/cells/y">y</a></td></tr>' in rows
